"""Hostile records never stop a partition: a worker on the embedded stack fed a record of
a schema nested 100 deep (registered after its topic's gate was made) and 1,000 records
of random bytes inside a registered schema's frame keeps translating the records around
them; each record of random bytes is dead-lettered with its reason."""

from __future__ import annotations

import io
import json
import random
from datetime import timedelta
from typing import Any

import fastavro
import pytest
from bizevents_store.contracts import OrderPlaced, OrderShipped, OrderStatusChanged
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from bizevents.contracts.business import (
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    HEADER_SOURCE_OFFSET,
)
from bizevents.contracts.serde import BusinessDeserializer
from tests.integration.test_translate_worker import (
    T0,
    Setup,
    order_change,
    order_row,
    orders_encoder,
    produce,
    read_all,
    setup,
    wait_for_events,
    wait_for_records,
)

pytestmark = pytest.mark.integration

__all__ = ["setup"]  # the fixture, shared with the worker's tests

RANDOM_RECORDS = 1000
LEVELS = 100


def _deep_schema(value_schema: dict[str, Any]) -> dict[str, Any]:
    """The orders envelope whose row gains a column of records nested ``LEVELS`` deep."""
    deep: Any = "long"
    for i in range(LEVELS):
        deep = {"type": "record", "name": f"Level{i}", "fields": [{"name": "inner", "type": deep}]}
    schema = json.loads(json.dumps(value_schema))
    before = next(f for f in schema["fields"] if f["name"] == "before")
    row = next(b for b in before["type"] if isinstance(b, dict))
    row["fields"].append({"name": "deep", "type": ["null", deep], "default": None})
    return schema


def _deep_value(schema: dict[str, Any], schema_id: int, normal: bytes, old: Any) -> bytes:
    """A normal record's envelope, its rows given the deep column, framed with the deep
    schema's id."""
    datum = fastavro.schemaless_reader(io.BytesIO(normal[5:]), fastavro.parse_schema(old), None)
    inner: Any = 7
    for _ in range(LEVELS):
        inner = {"inner": inner}
    for side in ("before", "after"):
        if datum[side] is not None:
            datum[side]["deep"] = inner
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), datum)
    return b"\x00" + schema_id.to_bytes(4, "big") + buffer.getvalue()


def test_hostile_records_are_dead_lettered_and_the_partition_goes_on(setup: Setup) -> None:
    bootstrap = setup.endpoints.bootstrap_servers
    encoder = orders_encoder(setup.endpoints.registry_url, setup.server)
    s = setup.server
    placed = order_row(1, "pending")
    paid = order_row(1, "paid", updated_at=T0 + timedelta(minutes=1))
    shipped = order_row(1, "shipped", tracking_number="TRK1", shipped_at=T0 + timedelta(hours=1))
    key, first = encoder.encode(order_change(s, "c", None, placed, 1000))
    _, normal_paid = encoder.encode(order_change(s, "u", placed, paid, 1010))
    registry = SchemaRegistryClient({"url": setup.endpoints.registry_url})
    value_id = int.from_bytes(first[1:5], "big")
    deep = _deep_schema(encoder.schemas.value)
    deep_id = registry.register_schema(f"{setup.topic}-value", Schema(json.dumps(deep), "AVRO"))
    assert deep_id != value_id
    deep_paid = _deep_value(deep, deep_id, normal_paid, encoder.schemas.value)
    noise = random.Random(26)
    garbage = [
        b"\x00" + value_id.to_bytes(4, "big") + noise.randbytes(noise.randrange(0, 200))
        for _ in range(RANDOM_RECORDS)
    ]
    _, last = encoder.encode(order_change(s, "u", paid, shipped, 1030))
    # one key: one partition, in this order; the first record makes the topic's gate
    produce(
        bootstrap,
        setup.topic,
        [(key, first), (key, deep_paid), *((key, g) for g in garbage), (key, last)],
    )
    # "dead-letter": each hostile record alone is set aside (the default, "park", would
    # park the key's last record behind them: docs/parking.md)
    worker = setup.worker(BIZEVENTS_TRANSLATE__ON_ERROR=json.dumps({"orders": "dead-letter"}))
    try:
        worker.wait_assigned()
        events = wait_for_events(setup, 4, 90, worker)
        dead = wait_for_records(
            lambda: read_all(bootstrap, setup.dead_letter),
            RANDOM_RECORDS,
            60,
            f"{RANDOM_RECORDS} dead letters",
            [worker],
        )
        worker.check_alive()
    finally:
        assert worker.stop() == 0, worker.tail()
    read = BusinessDeserializer(registry, OrderPlaced, OrderStatusChanged, OrderShipped)
    translated = sorted(
        (int(m.headers[HEADER_SOURCE_OFFSET]), type(read(m.value, m.topic)).__name__)
        for m in events
        if m.value is not None
    )
    # the deep record (offset 1) is read as fastavro reads it and translated; the last
    # record, after the 1,000 of random bytes, too (its shipment also changes the status)
    assert translated == [
        (0, "OrderPlaced"),
        (1, "OrderStatusChanged"),
        (RANDOM_RECORDS + 2, "OrderShipped"),
        (RANDOM_RECORDS + 2, "OrderStatusChanged"),
    ], worker.tail()
    assert len(dead) == RANDOM_RECORDS
    assert sorted(int(m.headers[HEADER_SOURCE_OFFSET]) for m in dead) == list(
        range(2, RANDOM_RECORDS + 2)
    )
    assert {m.value for m in dead} == set(garbage) and all(m.key == key for m in dead)
    for m in dead:
        assert m.headers[HEADER_DLQ_STAGE] == b"decode"
        reason = m.headers[HEADER_DLQ_REASON].decode()
        assert reason and "Traceback" not in reason, reason


ORDER_TOPICS = [c.contract_topic() for c in (OrderPlaced, OrderStatusChanged, OrderShipped)]
