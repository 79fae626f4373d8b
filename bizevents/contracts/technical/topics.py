"""The names of technical topics: one place, so capture and its readers agree.

A table's changes go to ``<prefix>.<schema>.<table>``, Debezium's naming; the prefix
is the capture's ``topic_prefix`` (default its ``server``). For MySQL/MariaDB the
schema is the database.
"""

from __future__ import annotations


def table_topic(prefix: str, qualified: str) -> str:
    """The technical topic of the table ``qualified`` (``schema.table``) under ``prefix``."""
    return f"{prefix}.{qualified}"
