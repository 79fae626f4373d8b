"""What every source of capture shares: the run, the chunk driver, the initial
snapshot, the quarantine, the ledger, signals and the Kafka side."""
