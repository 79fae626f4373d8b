"""``bizevents topics``: kinds, contracts and translators per topic, and end offsets that
count every record (Fetch's high watermark, not ListOffsets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bizevents.cli.topics import Pinned, describe
from bizevents.devstack import Endpoints
from bizevents.plumbing.kafka import ensure_topics
from tests.capture.capture_helpers import Db, capture_endpoints, database, in_process

REPO = Path(__file__).resolve().parents[2]


def test_describe_classifies_topics() -> None:
    """Envelope schemas are technical, pinned contracts' topics business, and so on."""
    pinned = [
        Pinned("orders@2", ("shop.public.orders",), {"store.order-placed": ("s.OrderPlaced",)}),
        Pinned("lines@1", ("shop.public.orders",), {"s.lines": ("s.Lines",)}, transactional=True),
    ]
    schemas: dict[str, dict[str, Any] | None] = {
        "shop.public.orders": {
            "type": "record",
            "name": "Envelope",
            "namespace": "shop.public.orders",
        },
        "shop.transaction": {
            "type": "record",
            "name": "TransactionMetadataValue",
            "namespace": "io.debezium.connector.common",
        },
        "other.events": {"type": "record", "name": "Thing", "namespace": "x"},
    }
    topics = {
        "shop.public.orders": 2,
        "shop.transaction": 1,
        "store.order-placed": 3,
        "bizevents.dead-letter": 1,
        "other.events": 1,
        "plain": 1,
    }
    ends = {("shop.public.orders", 0): 5, ("shop.public.orders", 1): 7}
    got = {i.topic: i for i in describe(topics, schemas, pinned, ["bizevents.dead-letter"], ends)}
    assert got["shop.public.orders"].kind == "technical"
    assert got["shop.public.orders"].table == "public.orders"
    assert got["shop.public.orders"].translators == ["orders@2", "lines@1"]
    assert got["shop.public.orders"].end_offsets == [5, 7]
    assert got["shop.public.orders"].events == 12
    assert got["shop.transaction"].kind == "transaction"
    assert got["shop.transaction"].translators == ["lines@1"]
    assert got["store.order-placed"].kind == "business"
    assert got["store.order-placed"].contracts == ["s.OrderPlaced"]
    assert got["store.order-placed"].end_offsets == [0, 0, 0]
    assert got["bizevents.dead-letter"].kind == "dead-letter"
    assert (got["other.events"].kind, got["other.events"].contracts) == ("business", ["x.Thing"])
    assert got["plain"].kind == "other"


@pytest.mark.integration
def test_topics_json_against_the_stack(bizevents_stack: Endpoints, tmp_path: Path) -> None:
    """A captured table, its transaction topic and a business topic, with exact ends."""
    with database(bizevents_stack) as db:
        _capture_some(db, tmp_path)
        business = "store.order-placed"
        conf: dict[str, str | int | float | bool] = {
            "bootstrap.servers": bizevents_stack.bootstrap_servers
        }
        ensure_topics(AdminClient(conf), [business, "bizevents.dead-letter"], 3)
        plain = f"plain-{db.server}"
        ensure_topics(AdminClient(conf), [plain], 1)
        producer = Producer({**conf, "linger.ms": 50})
        for batch in range(2):  # two batches of 100: ListOffsets would say 101
            for i in range(100):
                producer.produce(plain, f"{batch}-{i}".encode())
            assert producer.flush(30) == 0
        result = subprocess.run(
            [sys.executable, "-m", "bizevents", "topics", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            env={
                **os.environ,
                "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": bizevents_stack.bootstrap_servers,
                "BIZEVENTS_REGISTRY__URL": bizevents_stack.registry_url,
                "BIZEVENTS_TRANSLATORS": json.dumps({"orders": 2}),
                "BIZEVENTS_TRANSLATE__TOPIC_PREFIX": db.server,
            },
        )
        assert result.returncode == 0, result.stderr
        got = {t["topic"]: t for t in json.loads(result.stdout)}
        technical = got[db.topic("orders")]
        assert technical["kind"] == "technical"
        assert technical["table"] == f"{db.schema}.orders"
        assert technical["partitions"] == 2
        assert technical["events"] == 5
        tx = got[f"{db.server}.transaction"]
        assert (tx["kind"], tx["events"]) == ("transaction", 4)
        placed = got[business]
        assert placed["kind"] == "business"
        assert placed["contracts"] == ["store.orders.OrderPlaced"]
        assert placed["translators"] == ["orders@2"]
        assert got[plain]["end_offsets"] == [200]
        assert got["bizevents.dead-letter"]["kind"] == "dead-letter"


def _capture_some(db: Db, tmp_path: Path) -> None:
    db.sql(f"CREATE TABLE {db.schema}.orders (id int PRIMARY KEY)")
    with in_process(
        db.config(["orders"], partitions=2), capture_endpoints(db.endpoints, tmp_path)
    ) as run:
        run.wait_snapshot()
        db.sql(f"INSERT INTO {db.schema}.orders SELECT generate_series(1, 4)")
        db.sql(f"UPDATE {db.schema}.orders SET id = id WHERE id = 1")
        run.wait_acked(db.wal_lsn())
