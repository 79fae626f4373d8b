"""Replay through orders@3: whole transactions assembled in Spark give the same events,
with the same ids, as the live transaction worker, marked as replayed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bizevents_store.contracts import OrderPlaced, OrderStatus, OrderStatusChanged
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.contracts.serde import BusinessDeserializer
from bizevents.devstack import Endpoints
from bizevents.replay.exceptions import ReplayConfigError
from bizevents.replay.spec import Bound, Output, ReplaySpec
from bizevents.replay.transactions import TransactionReplay
from tests.capture.capture_helpers import Db
from tests.integration.test_transaction_worker import (
    _expected_id,
    _ids,
    capturing,
    place,
    store_db,
    truth,
)
from tests.replay.conftest import stack_settings

pytestmark = pytest.mark.integration


@pytest.fixture
def db(bizevents_stack: Endpoints) -> Iterator[Db]:
    with store_db(bizevents_stack) as made:
        yield made


def _read(db: Db, topic: str) -> list[Any]:
    registry = SchemaRegistryClient({"url": db.endpoints.registry_url})
    decode = BusinessDeserializer(registry, OrderPlaced, OrderStatusChanged)
    consumer = Consumer(
        {
            "bootstrap.servers": db.endpoints.bootstrap_servers,
            "group.id": "unused",
            "enable.partition.eof": True,
        }
    )
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        at_end: set[int] = set()
        out = []
        while len(at_end) < len(parts):
            for m in consumer.consume(500, 1.0):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF
                    at_end.add(m.partition() or 0)
                    continue
                out.append(decode(m.value() or b"", topic))
        return out
    finally:
        consumer.close()


def test_replay_of_whole_transactions(db: Db, tmp_path: Path, spark: Any) -> None:
    """Orders placed in transactions, then replayed through orders@3 in Spark: one
    OrderPlaced per order with its items and total, the live path's id, replay set."""
    customer, products = _ids(db)
    with capturing(db, tmp_path) as run:
        orders = []
        with db.conn.cursor() as cur:
            for n in range(10):
                cur.execute("BEGIN")
                lines = [(products[(n + i) % 3], i + 1) for i in range(n % 4 + 1)]
                orders.append(place(cur, customer, lines))
                cur.execute("COMMIT")
            cur.execute(f"UPDATE store.orders SET status = 'paid' WHERE id = {orders[0]}")
        run.wait_acked(db.wal_lsn())
    target = f"replay-tx-{uuid.uuid4().hex[:8]}"
    settings = stack_settings(
        db.endpoints, tmp_path / "state", translate={"topic_prefix": db.server}
    ).runtime()
    spec = ReplaySpec(
        topics=f"{db.server}.store.*",
        translator="orders@3",
        output=Output.parse(f"topic:{target}"),
    )
    summary = TransactionReplay(spec, settings, spark=spark).run()
    assert summary.dead_lettered == 0 and summary.left_out == 0
    read = _read(db, target)
    (paid,) = [e for e in read if isinstance(e, OrderStatusChanged)]
    assert (paid.order_id, paid.new_status) == (orders[0], OrderStatus.PAID)
    events = [e for e in read if isinstance(e, OrderPlaced)]
    assert sorted(e.order_id for e in events) == sorted(orders)
    expected = truth(db, orders)
    for e in events:
        total, items = expected[e.order_id]
        assert e.total == total
        assert [(i.line_no, i.product_id, i.quantity, i.unit_price) for i in e.items] == items
        assert e.lineage.replay is True
        assert e.lineage.event_id == _expected_id(db, e)


def test_unsupported_options_are_named(settings: Any) -> None:
    """--from with a transaction translator: one sentence, before Spark starts."""
    spec = ReplaySpec(
        topics="x.store.*",
        translator="orders@3",
        output=Output.parse("replay"),
        start=Bound(offset=5),
    )
    with pytest.raises(ReplayConfigError, match="--from is not supported yet"):
        TransactionReplay(spec, settings.runtime()).prepare()
