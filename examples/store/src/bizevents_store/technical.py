"""store.orders as capture publishes it: the technical schema tests and benches write.

Tests and benchmarks that produce technical records without running capture use
this, so the envelopes they write have the columns and types capture would give
(see schema.sql).
"""

from __future__ import annotations

from typing import Final

from bizevents_store.translators import DB_ORDER_STATUSES
from contracts.logical import ColumnType, Field, Kind
from contracts.technical import TableSchema

_TIMESTAMPTZ: Final = ColumnType(Kind.ZONED_TIMESTAMP)

ORDER_KEY: Final = (Field("id", ColumnType(Kind.INT64), optional=False),)
ORDER_VALUE: Final = (
    Field("id", ColumnType(Kind.INT64), optional=False),
    Field("customer_id", ColumnType(Kind.INT64), optional=False),
    Field("status", ColumnType(Kind.ENUM, labels=DB_ORDER_STATUSES), optional=False),
    Field("total", ColumnType(Kind.DECIMAL, scale=2, precision=12), optional=False),
    Field("currency", ColumnType(Kind.STRING), optional=False),
    Field("placed_at", _TIMESTAMPTZ, optional=False),
    Field("shipped_at", _TIMESTAMPTZ),
    Field("tracking_number", ColumnType(Kind.STRING)),
    Field("updated_at", _TIMESTAMPTZ, optional=False),
)


def orders_table(server: str) -> TableSchema:
    """``<server>.store.orders`` with its key and value columns."""
    return TableSchema(
        server=server,
        schema="store",
        table="orders",
        key_fields=ORDER_KEY,
        value_fields=ORDER_VALUE,
    )
