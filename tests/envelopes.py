"""Source blocks and row changes for tests that need a change from somewhere.

One PostgreSQL and one MariaDB source block with a test's overrides, a change of a
table keyed by ``id``, an event's lineage and an order of the example store: what the
contract, translator and consumer tests build by hand.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from bizevents.contracts.business import Lineage
from bizevents.contracts.envelope import ChangeEvent, MySqlPosition, PgPosition, Source, Transaction
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


def in_transaction(event: ChangeEvent, tx_id: str, n: int) -> ChangeEvent:
    """``event`` as the ``n``-th change of transaction ``tx_id`` (capture's metadata)."""
    return replace(event, transaction=Transaction(tx_id, n, n))


#: when the example store's orders were placed
PLACED = datetime(2026, 11, 24, 8, 0, tzinfo=UTC)


def store_order(order: int = 7) -> dict[str, Any]:
    """A pending, empty order of the example store (``store.orders``)."""
    return {
        "id": order,
        "customer_id": 3,
        "status": "pending",
        "total": Decimal("0.00"),
        "currency": "EUR",
        "placed_at": PLACED,
        "tracking_number": None,
        "shipped_at": None,
        "updated_at": PLACED,
    }


#: the lineage of an event translated from a PostgreSQL change of ``public.orders``
LINEAGE = Lineage(
    event_id="e-1",
    translator="orders@1",
    source_topic="pg.public.orders",
    source_partition=0,
    source_offset=42,
    source_position="0/16B3748",
)
