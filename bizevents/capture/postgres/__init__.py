"""PostgreSQL capture: the slot's stream, its snapshot queries, codec, types and
quarantine."""
