"""The deliberate differences between bizevents capture's records and Debezium's: one
entry per row of the table in docs/technical-envelope.md ("Beside Debezium"), each with
the predicate that a differing field must meet. The equivalence tests hold both true:
every difference found meets its row's predicate, every row is met at least once, and the
rows here are the rows of the document."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from bizevents.contracts.envelope import ChangeEvent, Tombstone
from bizevents.contracts.logical import JsonDocument

REPO = Path(__file__).resolve().parents[2]
ABSENT = "(absent)"
PG = "PostgreSQL"
MARIA = "MariaDB"
BOTH = "both"


@dataclass(frozen=True)
class Row:
    database: str  # "PostgreSQL", "MariaDB" or "both", as the document's column says
    #: ours, theirs and our change event (None for a transaction record's difference)
    holds: Callable[[Any, Any, Any], bool]


def _snapshot(event: ChangeEvent | Tombstone) -> bool:
    return isinstance(event, ChangeEvent) and event.source.snapshot


def _pg(event: ChangeEvent | Tombstone) -> bool:
    return isinstance(event, ChangeEvent) and event.source.connector == "postgresql"


def _update(event: ChangeEvent | Tombstone) -> bool:
    return isinstance(event, ChangeEvent) and event.op == "u"


def _lsn_or_none(theirs: Any, event: ChangeEvent | Tombstone) -> bool:
    # Debezium's incremental snapshot rows have no LSN; an initial snapshot's is its slot's
    return theirs is None if _incremental(event) else type(theirs) is int


def _incremental(event: ChangeEvent | Tombstone) -> bool:
    return isinstance(event, ChangeEvent) and event.source.snapshot_raw == "incremental"


def _ints(ours: Any, theirs: Any) -> bool:
    return type(ours) is int and type(theirs) is int


def _gtid_or_none(ours: Any, theirs: Any, event: ChangeEvent | Tombstone) -> bool:
    # an incremental snapshot row stands at each capture's own watermark; Debezium's
    # initial snapshot rows have no GTID
    if _incremental(event):
        return isinstance(ours, str) and isinstance(theirs, str)
    return isinstance(ours, str) and theirs is None


def _same_tx(ours: Any, theirs: Any) -> bool:
    return (
        isinstance(ours, str)
        and isinstance(theirs, str)
        and ours.split(":")[0] == theirs.split(":")[0]
    )


def _json_as_text(ours: Any, theirs: Any) -> bool:
    return isinstance(ours, JsonDocument) and ours.text == theirs


# Debezium 2+ marks a table's first and last snapshot row; bizevents only the very last
_DBZ_SNAPSHOT = ("first", "first_in_data_collection", "last_in_data_collection", "true", "last")

ROWS: dict[str, Row] = {
    "ts_ms": Row(BOTH, lambda o, t, e: type(o) is int and type(t) is int),
    "source.version": Row(BOTH, lambda o, t, e: o == "bizevents-capture-1" and t[:2] == "3."),
    "source.ts_ns": Row(BOTH, lambda o, t, e: o == ABSENT and type(t) is int),
    "source.sequence": Row(PG, lambda o, t, e: o is None and t.startswith("[")),
    "transaction.id": Row(PG, lambda o, t, e: _same_tx(o, t)),
    "source.snapshot": Row(BOTH, lambda o, t, e: o in ("true", "last") and t in _DBZ_SNAPSHOT),
    "source.lsn": Row(PG, lambda o, t, e: _snapshot(e) and _lsn_or_none(t, e)),
    "source.txId": Row(PG, lambda o, t, e: _snapshot(e) and o is None),
    "source.ts_ms": Row(BOTH, lambda o, t, e: _snapshot(e) and type(t) is int),
    "source.ts_us": Row(
        BOTH,
        lambda o, t, e: type(t) is int and (_snapshot(e) if _pg(e) else o == ABSENT),
    ),
    "after.free": Row(
        PG,
        lambda o, t, e: isinstance(o, Decimal) and o == t and o.as_tuple() != t.as_tuple(),
    ),
    "after.nm": Row(PG, lambda o, t, e: _update(e) and o is not None and t is None),
    "source.connector": Row(MARIA, lambda o, t, e: o == "mysql" and t == "mariadb"),
    "source.pos": Row(MARIA, lambda o, t, e: _incremental(e) and _ints(o, t)),
    "source.gtid": Row(MARIA, lambda o, t, e: _snapshot(e) and _gtid_or_none(o, t, e)),
    "source.server_id": Row(MARIA, lambda o, t, e: _snapshot(e) and t == 0),
    # a DDL statement's transaction: Debezium's MariaDB connector writes its BEGIN, no END
    "BEGIN": Row(MARIA, lambda o, t, e: o is False and t is True),
    # the time of the binlog event before the GTID event: after an idle spell, earlier
    "BEGIN.ts_ms": Row(MARIA, lambda o, t, e: type(o) is int and type(t) is int and t < o),
    "after.j": Row(MARIA, lambda o, t, e: _json_as_text(o, t)),
    "before.j": Row(MARIA, lambda o, t, e: _update(e) and _json_as_text(o, t)),
}

_ROW = re.compile(r"^\| `([^`]+)` \| (PostgreSQL|MariaDB|both) \|")


def documented() -> dict[str, str]:
    """The rows of docs/technical-envelope.md's table: field path -> database."""
    text = (REPO / "docs" / "technical-envelope.md").read_text()
    section = text.split("## Beside Debezium", 1)[1].split("\n## ", 1)[0]
    return {m[1]: m[2] for line in section.splitlines() if (m := _ROW.match(line))}


def rows_for(database: str) -> dict[str, Row]:
    return {p: r for p, r in ROWS.items() if r.database in (database, "both")}
