"""Contracts: the technical envelope (Debezium-compatible), column types and codecs, business
contracts, serde and compatibility."""

# A checkout's root is on sys.path, so `import contracts` would load a second copy of the floor.
if __name__ != "bizevents.contracts":
    raise ImportError(f"import bizevents.contracts, not {__name__}: the floors have one name")
