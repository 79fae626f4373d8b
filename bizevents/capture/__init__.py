"""Capture: committed row changes read from the database log (PostgreSQL logical decoding,
MariaDB/MySQL binlog) into per-table technical topics; core/ is what every source shares."""

# A checkout's root is on sys.path, so `import capture` would load a second copy of the floor.
if __name__ != "bizevents.capture":
    raise ImportError(f"import bizevents.capture, not {__name__}: the floors have one name")
