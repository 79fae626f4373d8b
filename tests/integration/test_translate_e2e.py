"""End to end: SQL writes in PostgreSQL → ``bizevents capture postgres`` → ``bizevents
translate`` → business events whose content matches the table."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from bizevents_store.contracts import OrderPlaced, OrderStatusChanged
from bizevents_store.load import StoreLoad, create_schema
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.contracts.serde import BusinessDeserializer
from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import (
    Db,
    drop_slots,
    start_cli,
    terminate,
    wait_snapshot_done,
    write_config,
)
from tests.integration.test_translate_worker import Setup, events_from, wait_for

pytestmark = pytest.mark.integration


#: The last order id the store's sequence gave: the load's orders are those after it
#: (other tests' orders of explicit ids, far above the sequence, are not this load's).
LAST_ORDER_ID = (
    "SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('store.orders', 'id')), 0)"
)


def test_store_writes_captured_and_translated_match_the_table(
    bizevents_stack: Endpoints, tmp_path: Path
) -> None:
    """Every order the load writes has its OrderPlaced, and its last OrderStatusChanged
    (orders@2) carries the status the table holds."""
    tag = uuid.uuid4().hex[:8]
    conn = psycopg2.connect(bizevents_stack.postgres_dsn)
    conn.autocommit = True
    create_schema(conn)
    with conn.cursor() as cur:
        cur.execute(LAST_ORDER_ID)
        (base,) = cur.fetchone()
    conn.autocommit = False
    server = f"e2e{tag}"
    db = Db(bizevents_stack, "store", f"e2e_{tag}", f"e2e_{tag}", server, conn)
    config = db.config(["orders"], partitions=4, state_dir=tmp_path / "capture-state")
    config_file = write_config(tmp_path / "capture.toml", config)
    capture_log = tmp_path / "capture.log"
    capture = start_cli(config_file, bizevents_stack, capture_log)
    setup = Setup(
        bizevents_stack,
        server,
        f"{server}.store.orders",
        f"test.dead-letter.{tag}",
        f"test-e2e-{tag}",
        tmp_path,
    )
    worker = None
    try:
        wait_snapshot_done(db, tmp_path / "capture-state", capture, capture_log)
        load = StoreLoad(conn, seed=11)
        for _ in range(400):
            load.step()
        worker = setup.worker("translate")
        with conn.cursor() as cur:
            cur.execute(LAST_ORDER_ID)
            (last,) = cur.fetchone()
            cur.execute(
                "SELECT id, status::text FROM store.orders WHERE id > %s AND id <= %s",
                (base, last),
            )
            table = {int(i): str(s) for i, s in cur.fetchall()}
        conn.commit()
        assert len(table) > 50
        registry = SchemaRegistryClient({"url": bizevents_stack.registry_url})
        read = BusinessDeserializer(registry, OrderPlaced, OrderStatusChanged)
        topics = [OrderPlaced.contract_topic(), OrderStatusChanged.contract_topic()]

        def mismatches() -> dict[int, Any]:
            placed: set[int] = set()
            last: dict[int, tuple[int, str]] = {}
            for m in events_from(bizevents_stack.bootstrap_servers, topics, setup.topic):
                assert m.value is not None
                event = read(m.value, m.topic)
                if isinstance(event, OrderPlaced):
                    placed.add(event.order_id)
                    continue
                assert isinstance(event, OrderStatusChanged)
                seen = last.get(event.order_id)
                # one row's changes share a technical partition: offsets order them
                key = (event.lineage.source_offset, event.new_status.value.lower())
                if seen is None or key > seen:
                    last[event.order_id] = key
            wrong: dict[int, Any] = {}
            for order_id, status in table.items():
                if order_id not in placed:
                    wrong[order_id] = "no OrderPlaced"
                elif status != "pending" and last.get(order_id, (0, "pending"))[1] != status:
                    wrong[order_id] = (status, last.get(order_id))
                elif status == "pending" and order_id in last:
                    wrong[order_id] = ("pending", last[order_id])
            return wrong

        def settled() -> bool:
            return not mismatches()

        try:
            wait_for(settled, 90, "business events matching the table", [worker])
        except AssertionError:
            raise AssertionError(f"mismatches: {list(mismatches().items())[:10]}") from None
    finally:
        if worker is not None:
            assert worker.stop() == 0, worker.tail()
        terminate(capture)
        conn.rollback()
        conn.autocommit = True
        with conn.cursor() as cur:
            drop_slots(cur, db.slot)
            cur.execute(f"DROP PUBLICATION IF EXISTS {db.publication}")
        conn.close()
