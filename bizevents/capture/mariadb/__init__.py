"""MySQL/MariaDB capture: the binlog's stream, its snapshot queries, codec, types and
quarantine."""
