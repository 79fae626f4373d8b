"""The reference store domain: contracts, translators, schema and load for bizevents."""
