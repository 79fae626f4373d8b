"""The store's business events read from Node: kafkajs and @kafkajs/confluent-schema-
registry, installed from npm by the test set-up (``npm ci`` against package-lock.json)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from bizevents_store.contracts import OrderPlaced
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.contracts.business import Lineage, lineage_headers, with_lineage
from bizevents.contracts.serde import BusinessSerializer
from bizevents.devstack import Endpoints
from bizevents.plumbing.kafka import ensure_topics

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """tests/node/node_modules as package-lock.json pins it (``npm ci`` when it differs)."""
    npm = shutil.which("npm")
    node = shutil.which("node")
    assert npm and node, "node and npm are needed for the Node consumer test (Debian: nodejs npm)"
    lock = (HERE / "package-lock.json").read_bytes()
    installed = HERE / "node_modules" / ".package-lock.json"
    stamp = HERE / "node_modules" / ".bizevents-lock"
    if not (installed.exists() and stamp.exists() and stamp.read_bytes() == lock):
        result = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, f"npm ci failed: {result.stderr[-2000:]}"
        stamp.write_bytes(lock)
    return HERE / "node_modules"


def test_kafkajs_reads_order_placed(
    bizevents_stack: Endpoints, node_modules: Path, unique_topic: Callable[[str], str]
) -> None:
    """Every OrderPlaced arrives in Node with its exact decimal total, its fields, its
    timestamp in microseconds and its event_id in the headers."""
    topic = unique_topic("order-placed")
    conf: dict[str, str | int | float | bool] = {
        "bootstrap.servers": bizevents_stack.bootstrap_servers
    }
    ensure_topics(AdminClient(conf), [topic], 3)
    serialize = BusinessSerializer(SchemaRegistryClient({"url": bizevents_stack.registry_url}))
    producer = Producer(conf)
    totals = [Decimal("0.00"), Decimal("4.59"), Decimal("1622.10"), Decimal("9999999999.99")]
    totals += [Decimal(f"{n}.{n % 100:02d}") for n in range(1, 17)]
    placed = datetime(2026, 11, 24, 8, 0, 0, 123456, tzinfo=UTC)
    sent = {}
    for i, total in enumerate(totals):
        event = with_lineage(
            OrderPlaced(
                order_id=1000 + i,
                customer_id=7,
                total=total,
                currency="EUR",
                placed_at=placed + timedelta(seconds=i),
            ),
            Lineage(
                event_id=f"id-{i}",
                translator="orders@3",
                source_topic="shop.public.orders",
                source_partition=0,
                source_offset=i,
                source_position=f"0/{i:X}",
                tx_id=f"{700 + i}:{i}",
            ),
        )
        key = str(1000 + i).encode()
        producer.produce(
            topic, serialize(event, topic), key, headers=list(lineage_headers(event.lineage))
        )
        sent[event.order_id] = event
    assert producer.flush(30) == 0

    result = subprocess.run(
        [
            shutil.which("node") or "node",
            str(HERE / "read_events.js"),
            bizevents_stack.bootstrap_servers,
            bizevents_stack.registry_url,
            topic,
            unique_topic("node-group"),
            str(len(sent)),
        ],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=HERE,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    read = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(read) == len(sent)
    for item in read:
        event = item["event"]
        want = sent[event["order_id"]]
        assert event["total"] == str(want.total)  # exact, as text
        assert event["currency"] == "EUR"
        assert event["customer_id"] == 7
        micros = (want.placed_at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
        assert event["placed_at"] == micros
        assert event["lineage"]["event_id"] == want.lineage.event_id
        assert item["headers"]["bizevents.event_id"] == want.lineage.event_id
        assert item["headers"]["bizevents.translator"] == "orders@3"
        assert item["headers"]["bizevents.source.tx_id"] == want.lineage.tx_id


def test_kafkajs_reads_the_live_order_placed_with_true_totals(
    bizevents_stack: Endpoints, node_modules: Path, tmp_path: Path
) -> None:
    """Orders placed in PostgreSQL, captured, translated by orders@3 under the
    transaction worker, read in Node: each with the total and lines the database holds."""
    from tests.integration.test_transaction_worker import (
        _ids,
        place_orders,
        running_workers,
        store_db,
        truth,
    )

    with store_db(bizevents_stack) as db:
        customer, products = _ids(db)
        with running_workers(db, tmp_path, 1, "tx-node") as (group, (worker,), reader, run):
            orders = place_orders(db, customer, products, 5, 3)
            run.wait_acked(db.wal_lsn())
            reader.wait(set(orders), worker)
        expected = truth(db, orders)
        result = subprocess.run(
            [
                shutil.which("node") or "node",
                str(HERE / "read_events.js"),
                bizevents_stack.bootstrap_servers,
                bizevents_stack.registry_url,
                "store.order-placed",
                f"{group}-node",
                str(len(orders)),
                f"{db.server}.",
            ],
            capture_output=True,
            text=True,
            timeout=150,
            cwd=HERE,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    read = [json.loads(line)["event"] for line in result.stdout.splitlines()]
    assert sorted(e["order_id"] for e in read) == sorted(orders)
    for event in read:
        total, items = expected[event["order_id"]]
        assert event["total"] == str(total) and Decimal(event["total"]) > 0
        assert [
            (i["line_no"], i["product_id"], i["quantity"], i["unit_price"]) for i in event["items"]
        ] == [(a, b, c, str(d)) for a, b, c, d in items]
