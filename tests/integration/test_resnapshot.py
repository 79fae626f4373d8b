"""Re-snapshots that consumers never see twice: the store's ``customers@1`` translates
snapshot reads; its customers are read again by ``bizevents capture snapshot``, by
``bizevents verify --repair`` and by the initial snapshot of a re-created slot, and the
consumer kit hands each state of each row to its handler once (docs/consuming.md)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from bizevents_store.contracts import CustomerRegistered
from bizevents_store.load import create_schema
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.consumers import BusinessConsumer, Delivery
from bizevents.contracts.binary import zigzag
from bizevents.contracts.business import HEADER_EVENT_ID, HEADER_SNAPSHOT
from bizevents.contracts.serde import BusinessDeserializer
from bizevents.devstack import Endpoints
from bizevents.plumbing.settings import KafkaSettings, RegistrySettings
from tests.capture.capture_helpers import (
    REPO,
    Db,
    InProcess,
    capture_endpoints,
    cli_env,
    in_process,
    write_config,
)
from tests.capture.test_verify import records_by_id, snapshots_run, verify, wait_repaired
from tests.integration.test_translate_worker import Setup, events_from, wait_for

pytestmark = pytest.mark.integration

TOPIC = CustomerRegistered.contract_topic()


def caught_up(bootstrap: str, group: str, topic: str) -> bool:
    """Whether ``group`` committed every partition of ``topic`` to its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = [TopicPartition(topic, p) for p in meta.partitions]
        for tp in consumer.committed(parts, timeout=10):
            _, end = consumer.get_watermark_offsets(tp, timeout=10)
            if end > 0 and tp.offset < end:
                return False
        return True
    finally:
        consumer.close()


def settle(run: InProcess, db: Db) -> None:
    """Until capture has no snapshot under way for 2 s and acknowledged the WAL's end."""
    quiet_since = time.monotonic()
    deadline = quiet_since + 90
    while time.monotonic() - quiet_since < 2:
        if run.runner.ledger.queue:
            quiet_since = time.monotonic()
        assert time.monotonic() < deadline, "capture's snapshots did not run out"
        time.sleep(0.1)
    run.wait_acked(db.wal_lsn())


def test_resnapshots_repairs_and_a_new_slot_give_consumers_each_state_once(
    bizevents_stack: Endpoints, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    conn = psycopg2.connect(bizevents_stack.postgres_dsn)
    conn.autocommit = True
    create_schema(conn)
    mine: list[int] = []
    with conn.cursor() as cur:
        for n in range(3):
            cur.execute(
                "INSERT INTO store.customers (email, full_name, street, city, postal_code, "
                "country) VALUES (%s, %s, '1 Main St', 'Oslo', '0150', 'NO') RETURNING id",
                (f"rs{tag}-{n}@example.com", f"Resnapshot {n}"),
            )
            mine.append(int(cur.fetchone()[0]))
    changed, repaired, _ = mine
    server = f"rs{tag}"
    db = Db(bizevents_stack, "store", f"rs_{tag}", f"rs_{tag}", server, conn)
    config = db.config(["customers"], partitions=2)
    config_file = write_config(tmp_path / "capture.toml", config)
    technical = f"{server}.store.customers"
    bootstrap = bizevents_stack.bootstrap_servers
    setup = Setup(bizevents_stack, server, technical, f"test.dl.{tag}", f"test-rs-{tag}", tmp_path)
    worker = None
    endpoints = capture_endpoints(bizevents_stack, tmp_path / "capture-state")
    try:
        with in_process(config, endpoints) as run:
            run.wait_snapshot()
            worker = setup.worker("translate", BIZEVENTS_TRANSLATORS=json.dumps({"customers": 1}))
            # 1. an on-demand snapshot of the table, by the CLI
            before = snapshots_run(run)
            asked = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bizevents",
                    "capture",
                    "snapshot",
                    str(config_file),
                    "--where",
                    f"id >= {mine[0]}",
                    "store.customers",
                ],
                env=cli_env(bizevents_stack),
                capture_output=True,
                text=True,
                timeout=120,
                cwd=REPO,
            )
            assert asked.returncode == 0, asked.stdout + asked.stderr
            wait_repaired(run, before)
            # a row changed (a column the translator does not read): its next read is a
            # new state, under a new id
            db.sql("UPDATE store.customers SET loyalty_score = 7 WHERE id = %s", (changed,))
            settle(run, db)
            # 2. a repair: the topic loses a row (a tombstone), verify --repair reads it again
            key, _ = next(
                k for k in records_by_id(db, technical).values() if k[0][5:] == zigzag(repaired)
            )
            producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
            producer.produce(technical, None, key)
            producer.flush(10)
            before = snapshots_run(run)
            fixed = verify(config_file, db, "--table", "store.customers", "--repair")
            assert fixed.returncode == 1 and "repair: signal" in fixed.stdout, (
                fixed.stdout + fixed.stderr
            )
            wait_repaired(run, before)
            settle(run, db)
            run.stop()
        # 3. the slot is lost and re-created: capture snapshots the table again
        db.drop_slot()
        with in_process(config, endpoints) as run:
            run.wait_snapshot()
            settle(run, db)
            run.stop()
        wait_for(lambda: caught_up(bootstrap, setup.group, technical), 120, "translated", [worker])
    finally:
        if worker is not None:
            worker.stop()
        db.sql(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s AND active_pid IS NULL",
            (db.slot,),
        )
        db.sql(f"DROP PUBLICATION IF EXISTS {db.publication}")

    # what the translator wrote: every read of one content of a row under one id
    read = BusinessDeserializer(
        SchemaRegistryClient({"url": bizevents_stack.registry_url}), CustomerRegistered
    )
    ids: dict[int, list[str]] = defaultdict(list)
    marks = set()
    for m in events_from(bootstrap, [TOPIC], technical):
        event = read(m.value or b"", TOPIC)
        assert isinstance(event, CustomerRegistered)
        if event.customer_id in mine:
            marks.add(m.headers.get(HEADER_SNAPSHOT))
            ids[event.customer_id].append(m.headers[HEADER_EVENT_ID].decode())
    assert len(ids[repaired]) >= 4, ids  # initial, CLI, repair, new slot
    assert len(set(ids[repaired])) == 1, ids
    assert len(set(ids[changed])) == 2, ids  # before and after its change
    assert len(ids[mine[2]]) >= 3 and len(set(ids[mine[2]])) == 1, ids
    assert marks == {b"true"}

    # what a consumer applies: each state of each row once
    handled: list[tuple[int, str]] = []
    expected = {c: len(set(i)) for c, i in ids.items()}
    copies = sum(len(i) for i in ids.values())

    def handle(delivery: Delivery[Any]) -> None:
        # the store's other customers (other tests' rows in the shared database) are
        # snapshotted too; this test counts its own
        if delivery.lineage.source_topic == technical and delivery.event.customer_id in mine:
            assert delivery.snapshot
            handled.append((delivery.event.customer_id, delivery.event_id))

    consumer = BusinessConsumer(
        [TOPIC],
        handle,
        contracts=[CustomerRegistered],
        group_id=f"test-rs-consumer-{tag}",
        kafka=KafkaSettings(bootstrap_servers=bootstrap),
        registry=RegistrySettings(url=bizevents_stack.registry_url),
    )

    def done() -> bool:
        return len(handled) >= sum(expected.values()) and consumer.stats.duplicates >= copies - len(
            handled
        )

    async def run_consumer() -> None:
        task = asyncio.ensure_future(consumer.run())
        deadline = asyncio.get_running_loop().time() + 90
        while not done():
            assert not task.done(), task.exception()
            assert asyncio.get_running_loop().time() < deadline, (handled, consumer.stats)
            await asyncio.sleep(0.05)
        await asyncio.sleep(1)  # anything more that would (wrongly) arrive
        consumer.stop()
        await asyncio.wait_for(task, 30)

    asyncio.run(run_consumer())
    by_customer: dict[int, list[str]] = defaultdict(list)
    for customer, event_id in handled:
        by_customer[customer].append(event_id)
    assert {c: len(i) for c, i in by_customer.items()} == expected, handled
    assert all(len(set(i)) == len(i) for i in by_customer.values()), handled
