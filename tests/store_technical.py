"""store.orders and store.order_items as capture publishes them: the technical schemas
tests and benches write.

Tests and benchmarks that produce technical records without running capture use
this, so the envelopes they write have the columns and types capture would give
(see schema.sql).
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

from bizevents_store.translators import DB_ORDER_STATUSES

from bizevents.contracts.envelope import ChangeEvent, Op, PgPosition, Row, Source
from bizevents.contracts.logical import ColumnType, Field, Kind
from bizevents.contracts.technical import AvroEncoder, TableSchema

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

ORDER_ITEM_KEY: Final = (
    Field("order_id", ColumnType(Kind.INT64), optional=False),
    Field("line_no", ColumnType(Kind.INT32), optional=False),
)
ORDER_ITEM_VALUE: Final = (
    *ORDER_ITEM_KEY,
    Field("product_id", ColumnType(Kind.INT64), optional=False),
    Field("quantity", ColumnType(Kind.INT32), optional=False),
    Field("unit_price", ColumnType(Kind.DECIMAL, scale=2, precision=12), optional=False),
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


def registered_orders_encoder(server: str, registry: Any) -> AvroEncoder:
    """An encoder for ``<server>.store.orders``, its schemas registered (registered_encoder)."""
    return registered_encoder(orders_table(server), registry)


def registered_order_items_encoder(server: str, registry: Any) -> AvroEncoder:
    """An encoder for ``<server>.store.order_items``, its schemas registered."""
    table = TableSchema(server, "store", "order_items", ORDER_ITEM_KEY, ORDER_ITEM_VALUE)
    return registered_encoder(table, registry)


def registered_encoder(table: TableSchema, registry: Any) -> AvroEncoder:
    """An encoder for ``table`` whose key and value schemas are registered under
    ``<topic>-key`` / ``<topic>-value`` (``registry``: a SchemaRegistryClient)."""
    from confluent_kafka.schema_registry import Schema

    schemas = AvroEncoder(table, 0, 0).schemas
    assert schemas.key is not None
    topic = table.namespace
    key_id = registry.register_schema(f"{topic}-key", Schema(json.dumps(schemas.key), "AVRO"))
    value_id = registry.register_schema(f"{topic}-value", Schema(json.dumps(schemas.value), "AVRO"))
    return AvroEncoder(table, key_id, value_id)


def order_change(
    server: str,
    op: Op,
    before: Row | None,
    after: Row | None,
    *,
    lsn: int,
    tx_id: int,
    ts_ms: int = 1_714_564_800_000,
) -> ChangeEvent:
    """One change of ``store.orders`` as capture would describe it."""
    row = after or before
    assert row is not None
    source = Source(
        connector="postgresql",
        name=server,
        db="store",
        schema="store",
        table="orders",
        ts_ms=ts_ms,
        position=PgPosition(lsn=lsn, tx_id=tx_id),
    )
    return ChangeEvent(
        op=op, source=source, before=before, after=after, key={"id": row["id"]}, ts_ms=ts_ms
    )


def pending_order(order_id: int, at: datetime) -> Row:
    """A ``store.orders`` row as the store's load inserts it: pending, total 0, placed
    and updated ``at``."""
    return {
        "id": order_id,
        "customer_id": 7,
        "status": "pending",
        "total": Decimal("0.00"),
        "currency": "EUR",
        "placed_at": at,
        "shipped_at": None,
        "tracking_number": None,
        "updated_at": at,
    }


def order_item_change(
    server: str,
    order_id: int,
    line: int,
    product_id: int,
    quantity: int,
    unit_price: Decimal,
    *,
    lsn: int,
    tx_id: int,
) -> ChangeEvent:
    """The insert of one ``store.order_items`` row as capture would describe it (its
    timestamps 0)."""
    source = Source(
        "postgresql", server, "store", "store", "order_items", 0,
        position=PgPosition(lsn, tx_id),
    )  # fmt: skip
    row = {
        "order_id": order_id,
        "line_no": line,
        "product_id": product_id,
        "quantity": quantity,
        "unit_price": unit_price,
    }
    return ChangeEvent("c", source, None, row, {"order_id": order_id, "line_no": line}, 0)
