"""Source blocks and row changes for tests that need a change from somewhere.

One PostgreSQL and one MariaDB source block with a test's overrides, and a change of a
table keyed by ``id``: what the contract, translator and lineage tests build by hand.
"""

from __future__ import annotations

from typing import Any

from bizevents.contracts.envelope import ChangeEvent, MySqlPosition, PgPosition, Source
from bizevents.contracts.exceptions import Coordinates

#: a row, or its absence (no ``before`` of an insert, no ``after`` of a delete)
Row = dict[str, Any] | None


def pg_source(
    table: str = "orders",
    *,
    name: str = "pg",
    lsn: int = 0x16B3748,
    tx_id: int = 556,
    ts_ms: int = 1,
    snapshot: str = "false",
) -> Source:
    """A PostgreSQL source block of ``shop.public.<table>``."""
    return Source(
        "postgresql", name, "shop", "public", table, ts_ms, snapshot, PgPosition(lsn, tx_id)
    )


def mysql_source(
    table: str = "orders", *, position: MySqlPosition | None = None, snapshot: str = "false"
) -> Source:
    """A MariaDB source block of ``shop.<table>``."""
    position = position or MySqlPosition("mysql-bin.000001", 4, 0, 1)
    return Source("mysql", "m", "shop", None, table, 1, snapshot, position)


def keyed_event(op: str, before: Row, after: Row, source: Source, at: Coordinates) -> ChangeEvent:
    """A change of a row keyed by ``id``, read at ``at``."""
    key = {"id": (after or before or {})["id"]}
    return ChangeEvent(op, source, before, after, key, coordinates=at)  # type: ignore[arg-type]
