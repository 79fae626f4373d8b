"""Debezium's topics as input: Debezium 3.6.1's PostgreSQL connector in Kafka Connect
standalone writes the store's technical topics (JSON with schemas) into the stack's
Apache Kafka, bizevents capture writes the same changes beside them, and ``bizevents
translate`` runs the store's translators over each: the business events are the same.
So does ``bizevents replay`` (Spark, local[2]) of each row translator over both.

Event ids come from a change's identity: for a streamed change its server, table, op,
LSN and key; for a snapshot read its server, table and whole row. Debezium's ``source``
block carries the same ``name`` (its ``topic.prefix``, bizevents' ``server``) and, for a
streamed change, the same ``lsn`` (docs/technical-envelope.md's table has no ``lsn`` row
for streamed changes), so every id agrees here: the store's translators emit from
snapshot reads (``customers``) only by the row, and from streamed changes by the LSN.
Where the two do differ (``source.lsn`` of an incremental snapshot row, null in
Debezium's) no store translator emits: ``customers`` reads snapshot rows by content.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import fastavro
import psycopg2
import pytest
from bizevents_store.contracts import (
    CustomerAddressChanged,
    CustomerRegistered,
    OrderCancelled,
    OrderPlaced,
    OrderShipped,
    OrderStatusChanged,
    ProductPriceChanged,
)
from bizevents_store.load import StoreLoad, create_schema
from click.testing import CliRunner
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.capture.config import CaptureConfig
from bizevents.cli import main
from bizevents.contracts.business import HEADER_EVENT_ID, HEADER_SOURCE_TOPIC
from bizevents.contracts.serde import BusinessDeserializer
from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import capture_endpoints, in_process
from tests.integration.test_translate_worker import Worker, read_all, wait_for
from tests.peers import harness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TABLES = ("store.customers", "store.products", "store.orders", "store.order_items")
CONTRACTS = (
    CustomerRegistered,
    CustomerAddressChanged,
    ProductPriceChanged,
    OrderPlaced,
    OrderStatusChanged,
    OrderShipped,
    OrderCancelled,
)
ROW_TRANSLATORS = {"customers": 1, "products": 1, "orders": 2}


@dataclass
class Captured:
    """The same store changes on two sets of topics: bizevents' and Debezium's."""

    endpoints: Endpoints
    server: str
    ours: str  # bizevents capture's topic prefix
    theirs: str  # Debezium's (its topic.prefix, the server)
    folder: Path

    def replay_env(self, state: str) -> dict[str, str]:
        """A replay's settings: this stack, its state in ``folder / state``, warnings only."""
        return {
            "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": self.endpoints.bootstrap_servers,
            "BIZEVENTS_REGISTRY__URL": self.endpoints.registry_url,
            "BIZEVENTS_STATE_DIR": str(self.folder / state),
            "BIZEVENTS_LOG_LEVEL": "WARNING",
        }


def _database(endpoints: Endpoints, name: str) -> str:
    admin = psycopg2.connect(endpoints.postgres_dsn)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    admin.close()
    u = urlsplit(endpoints.postgres_dsn)
    return urlunsplit(u._replace(path=f"/{name}"))


def _drop(endpoints: Endpoints, name: str) -> None:
    admin = psycopg2.connect(endpoints.postgres_dsn)
    admin.autocommit = True
    with admin.cursor() as cur:
        deadline = time.monotonic() + 30
        while True:
            cur.execute(
                "SELECT slot_name, active FROM pg_replication_slots WHERE database = %s", (name,)
            )
            slots = cur.fetchall()
            if not any(active for _, active in slots) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for slot, _ in slots:
            cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.close()


def _count(endpoints: Endpoints, topic: str) -> int:
    try:
        return len(read_all(endpoints.bootstrap_servers, topic, timeout=10))
    except KeyError:  # not created yet
        return 0


@pytest.fixture(scope="module")
def captured(
    bizevents_stack_on: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Captured]:
    reason = harness.missing()
    if reason is not None:
        pytest.fail(reason)
    endpoints: Endpoints = bizevents_stack_on("kafka")
    folder = tmp_path_factory.mktemp("debezium-topics")
    tag = uuid.uuid4().hex[:8]
    name = f"dbz_{tag}"
    dsn = _database(endpoints, name)
    server = f"dbz{tag}"
    conn = psycopg2.connect(dsn)
    connect = None
    try:
        create_schema(conn)
        load = StoreLoad(conn, seed=5)
        load.seed_catalogue(10)
        for _ in range(10):
            load.register_customer()  # read by both initial snapshots
        config = CaptureConfig(
            server=server,
            topic_prefix=f"bz{server}",
            dsn=dsn,
            tables=TABLES,
            slot=f"bz_{tag}",
            publication=f"bz_{tag}",
            heartbeat_interval_s=1.0,
        )
        dbz = harness.connect_connector_properties(
            harness.postgres_properties(dsn, server, f"dbz_{tag}", f"dbz_{tag}", list(TABLES))
        )
        worker = harness.connect_worker_properties(endpoints.bootstrap_servers, folder)
        connect = harness.start_connect(worker, dbz, folder / "connect")
        ends = capture_endpoints(endpoints, folder / "state")
        ends = type(ends)(dsn, ends.kafka, ends.registry, ends.state_dir)
        with in_process(config, ends) as run:
            run.wait_snapshot()
            wait_for(
                lambda: (
                    _count(endpoints, f"{server}.store.customers") == 10 or connect.check_alive()
                ),
                120,
                "Debezium's initial snapshot",
            )
            for _ in range(300):
                load.step()
            with conn.cursor() as cur:
                cur.execute("SELECT pg_current_wal_insert_lsn()::text")
                (lsn,) = cur.fetchone()
            conn.commit()
            hi, lo = lsn.split("/")
            run.wait_acked((int(hi, 16) << 32) + int(lo, 16))
            run.stop()
        for table in TABLES:
            want = _count(endpoints, f"bz{server}.{table}")
            wait_for(
                lambda t=table, n=want: (
                    _count(endpoints, f"{server}.{t}") >= n or connect.check_alive()
                ),
                120,
                f"Debezium's {table}",
            )
        yield Captured(endpoints, server, f"bz{server}", server, folder)
    finally:
        if connect is not None:
            connect.stop()
        conn.close()
        _drop(endpoints, name)


def _env(c: Captured, prefix: str, group: str, translators: dict[str, int]) -> dict[str, str]:
    return {
        **os.environ,
        "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": c.endpoints.bootstrap_servers,
        "BIZEVENTS_REGISTRY__URL": c.endpoints.registry_url,
        "BIZEVENTS_TRANSLATORS": json.dumps(translators),
        "BIZEVENTS_TRANSLATE__TOPIC_PREFIX": prefix,
        "BIZEVENTS_TRANSLATE__GROUP_ID": group,
        "BIZEVENTS_TRANSLATE__DEAD_LETTER_TOPIC": f"{group}.dlq",
        "BIZEVENTS_TRANSACTIONS__GROUP_ID": f"{group}-tx",
        "BIZEVENTS_STATE_DIR": str(c.folder / group),
        "BIZEVENTS_LOG_FORMAT": "json",
    }


def _events(c: Captured, prefix: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """The business events translated from ``prefix``'s topics: content by event id."""
    registry = SchemaRegistryClient({"url": c.endpoints.registry_url})
    read = BusinessDeserializer(registry, *CONTRACTS)
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    sources = {f"{prefix}.{t}".encode() for t in TABLES}
    for contract in CONTRACTS:
        topic = contract.contract_topic()
        try:
            messages = read_all(c.endpoints.bootstrap_servers, topic, timeout=10)
        except KeyError:
            continue
        for m in messages:
            if m.headers.get(HEADER_SOURCE_TOPIC) not in sources:
                continue
            assert m.value is not None
            event = read(m.value, m.topic)
            content = event.model_dump(mode="json", exclude={"lineage"})
            found[m.headers[HEADER_EVENT_ID].decode()] = (topic, content)
    return found


def test_translate_reads_debeziums_topics_as_it_reads_its_own(
    captured: Captured,
) -> None:
    workers = [
        Worker(
            _env(captured, prefix, f"dbz-{side}-{captured.server}", ROW_TRANSLATORS),
            captured.folder / f"translate-{side}.log",
        )
        for side, prefix in (("ours", captured.ours), ("theirs", captured.theirs))
    ]
    try:

        def settled() -> tuple[dict[str, Any], dict[str, Any]] | None:
            ours, theirs = _events(captured, captured.ours), _events(captured, captured.theirs)
            return (ours, theirs) if ours and len(ours) == len(theirs) else None

        wait_for(settled, 120, "as many business events from each", workers)
        time.sleep(2)  # none late
        ours, theirs = _events(captured, captured.ours), _events(captured, captured.theirs)
    finally:
        for w in workers:
            assert w.stop() == 0, w.tail()
    assert len(ours) > 100, len(ours)
    kinds = {topic for topic, _ in ours.values()}
    assert {CustomerRegistered.contract_topic(), OrderPlaced.contract_topic()} <= kinds
    assert OrderStatusChanged.contract_topic() in kinds
    assert set(ours) == set(theirs), "event ids differ"
    different = {i: (ours[i], theirs[i]) for i in ours if ours[i] != theirs[i]}
    assert not different, list(different.items())[:3]


def test_a_transaction_translator_is_told_at_start_up_what_debeziums_topics_lack(
    captured: Captured,
) -> None:
    """orders@3 assembles whole transactions; Debezium's PostgreSQL topics give each
    record its own transaction id, so the worker says so before it joins its group and
    stops; on bizevents' own topics of the same changes it starts."""
    pinned = {"orders": 3}
    refused = Worker(
        _env(captured, captured.theirs, f"dbz-tx-theirs-{captured.server}", pinned),
        captured.folder / "translate-tx-theirs.log",
    )
    started = Worker(
        _env(captured, captured.ours, f"dbz-tx-ours-{captured.server}", pinned),
        captured.folder / "translate-tx-ours.log",
    )
    try:
        assert refused.process.wait(120) != 0
        topics = f"{captured.theirs}.store.order_items, {captured.theirs}.store.orders"
        said = refused.log.read_text()
        assert f"orders@3 cannot have whole transactions from {topics}: " in said, said
        assert "Traceback" not in said
        assert "assigned" not in said  # at start-up, before any record
        wait_for(
            lambda: any(x.get("event") == "assembling" for x in started.lines()),
            60,
            "the transaction worker on bizevents' topics joins its group",
            [started],
        )
    finally:
        refused.stop()
        assert started.stop() == 0, started.tail()


def _replayed(c: Captured, out: Path) -> dict[str, dict[str, tuple[str, dict[str, Any]]]]:
    """The events the replay wrote under ``out``, content by event id, per source prefix."""
    registry = SchemaRegistryClient({"url": c.endpoints.registry_url})
    read = BusinessDeserializer(registry, *CONTRACTS)
    prefixes = {f"{p}.{t}": p for p in (c.ours, c.theirs) for t in TABLES}
    found: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {c.ours: {}, c.theirs: {}}
    for path in sorted(out.rglob("*.avro")):
        with path.open("rb") as handle:
            records: list[dict[str, Any]] = list(fastavro.reader(handle))  # type: ignore[arg-type]
        for r in records:
            assert r["event_id"], f"a dead letter in {path.name}"
            headers = {h["key"]: h["value"] for h in r["headers"]}
            prefix = prefixes[headers[HEADER_SOURCE_TOPIC].decode()]
            event = read(r["value"], r["topic"])
            content = event.model_dump(mode="json", exclude={"lineage"})
            found[prefix][r["event_id"]] = (r["topic"], content)
    return found


def test_replay_reads_debeziums_topics_as_it_reads_its_own(captured: Captured) -> None:
    """``bizevents replay`` (Spark, local[2]) of each row translator over both sets of
    topics: the events from Debezium's are those from bizevents', ids and content."""
    env = {**os.environ, **captured.replay_env("replay-state")}
    out = captured.folder / "replayed"
    topics = f"{captured.ours}.store.*,{captured.theirs}.store.*"
    for name, version in ROW_TRANSLATORS.items():
        command = ["replay", "--topics", topics, "--translator", f"{name}@{version}"]
        command += ["--to", f"path:{out / name}", "--master", "local[2]", "--no-progress", "--json"]
        done = subprocess.run(
            [sys.executable, "-m", "bizevents", *command],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads(done.stdout)
        assert (summary["dead_letters"], summary["undecodable"]) == (0, 0), summary
    replayed = _replayed(captured, out)
    ours, theirs = replayed[captured.ours], replayed[captured.theirs]
    assert len(ours) > 100, len(ours)
    kinds = {topic for topic, _ in ours.values()}
    assert {
        CustomerRegistered.contract_topic(),
        ProductPriceChanged.contract_topic(),
        OrderPlaced.contract_topic(),
        OrderStatusChanged.contract_topic(),
    } <= kinds, kinds
    assert set(ours) == set(theirs), "event ids differ"
    different = {i: (ours[i], theirs[i]) for i in ours if ours[i] != theirs[i]}
    assert not different, list(different.items())[:3]


def test_a_transaction_replay_is_told_before_spark_what_debeziums_topics_lack(
    captured: Captured,
) -> None:
    """The live worker's start-up check, in the replay: orders@3 over Debezium's topics
    exits 1 with the worker's sentence before Spark starts (it used to run and dead-letter
    the changes, emitting nothing)."""
    env = captured.replay_env("replay-tx-state")
    out = captured.folder / "replayed-tx"
    topics = f"{captured.theirs}.store.orders,{captured.theirs}.store.order_items"
    result = CliRunner().invoke(
        main,
        ["replay", "--topics", topics, "--translator", "orders@3", "--to", f"path:{out}"],
        env=env,
    )
    assert result.exit_code == 1, result.output
    said = f"orders@3 cannot have whole transactions from {captured.theirs}.store.order_items, "
    assert said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not list(out.rglob("*.avro"))
