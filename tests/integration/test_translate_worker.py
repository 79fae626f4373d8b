"""``bizevents translate`` against the real embedded broker and registry.

Technical records are produced here with the contracts' own Avro encoder (as capture
writes them); workers run as subprocesses (``python -m bizevents translate``);
output topics are read back in assign mode (librdkafka groups misbehave on Tansu).
Business topics are shared by the tests, so each test keeps only the events whose
lineage names its own technical topic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from bizevents_store.contracts import OrderPlaced, OrderShipped, OrderStatusChanged
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.contracts.business import (
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    HEADER_EVENT_ID,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_POSITION,
    HEADER_SOURCE_TOPIC,
    HEADER_TRANSLATOR,
    HEADER_TX_ID,
)
from bizevents.contracts.envelope import ChangeEvent, Op, PgPosition
from bizevents.contracts.serde import BusinessDeserializer
from bizevents.contracts.technical import AvroEncoder
from bizevents.devstack import Endpoints
from bizevents.plumbing.kafka import broker_traits

# the other integration tests take these from here too
from tests.kafka import Message as Message
from tests.kafka import create_topic as create_topic
from tests.kafka import produce as produce
from tests.kafka import read_all as read_all
from tests.store_technical import order_change as store_order_change
from tests.store_technical import registered_orders_encoder

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


# -- helpers (the end-to-end test imports them too) ------------------------------------


def orders_encoder(registry_url: str, server: str) -> AvroEncoder:
    """An encoder whose key and value schemas are registered for the orders topic."""
    return registered_orders_encoder(server, SchemaRegistryClient({"url": registry_url}))


def order_row(order_id: int, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": order_id,
        "customer_id": 100 + order_id % 7,
        "status": status,
        "total": Decimal("19.90") + order_id,
        "currency": "EUR",
        "placed_at": T0,
        "shipped_at": None,
        "tracking_number": None,
        "updated_at": T0,
        **extra,
    }


def order_change(
    server: str,
    op: Op,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    lsn: int,
) -> ChangeEvent:
    return store_order_change(server, op, before, after, lsn=lsn, tx_id=lsn // 10)


def events_from(bootstrap: str, topics: Sequence[str], source_topic: str) -> list[Message]:
    """The business events of ``topics`` whose lineage names ``source_topic``."""
    found: list[Message] = []
    for topic in topics:
        found += [
            m
            for m in read_all(bootstrap, topic)
            if m.headers.get(HEADER_SOURCE_TOPIC) == source_topic.encode()
        ]
    return found


def wait_for_records(
    read: Callable[[], list[Message]],
    count: int,
    timeout: float,
    what: str,
    workers: Sequence[Worker] = (),
) -> list[Message]:
    """What ``read`` reads once it holds at least ``count`` records."""
    found: list[Message] = wait_for(
        lambda: (records := read()) and len(records) >= count and records, timeout, what, workers
    )
    return found


def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str, workers: Sequence[Worker] = ()
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for worker in workers:
            worker.check_alive()
        if time.monotonic() > deadline:
            logs = "\n".join(w.tail() for w in workers)
            raise AssertionError(f"{what} within {timeout}s\n{logs}")
        time.sleep(0.3)


class Worker:
    """``bizevents translate`` as a subprocess with its own log and metrics port."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bizevents", "translate"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        self.metrics_url: str | None = None

    def lines(self) -> list[dict[str, Any]]:
        result = []
        for line in self.log.read_text().splitlines():
            try:
                result.append(json.loads(line))
            except ValueError:
                continue
        return result

    def tail(self) -> str:
        return f"--- {self.log.name}\n" + self.log.read_text()[-4000:]

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"worker exited {self.process.returncode}\n{self.tail()}")

    def assigned(self) -> list[str] | None:
        """The partitions of its latest assignment (None before the first)."""
        found = [x for x in self.lines() if x.get("event") == "partitions assigned"]
        return list(found[-1]["partitions"]) if found else None

    def wait_assigned(self, timeout: float = 40) -> list[str]:
        return list(wait_for(self.assigned, timeout, "no assignment", [self]))

    def metrics(self) -> str:
        if self.metrics_url is None:
            found = [x for x in self.lines() if x.get("event") == "metrics endpoint"]
            assert found, self.tail()
            self.metrics_url = str(found[0]["url"])
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            return str(response.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name + "{"):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.exited(timeout)

    def exited(self, timeout: float = 30) -> int:
        """Its exit status once it ends (its signal sent), killed after ``timeout``."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        return int(self.process.returncode)


@dataclass
class Setup:
    endpoints: Endpoints
    server: str
    topic: str
    dead_letter: str
    group: str
    tmp: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": self.endpoints.bootstrap_servers,
            "BIZEVENTS_REGISTRY__URL": self.endpoints.registry_url,
            "BIZEVENTS_TRANSLATORS": json.dumps({"orders": 2}),
            "BIZEVENTS_TRANSLATE__TOPIC_PREFIX": self.server,
            "BIZEVENTS_TRANSLATE__GROUP_ID": self.group,
            "BIZEVENTS_TRANSLATE__DEAD_LETTER_TOPIC": self.dead_letter,
            "BIZEVENTS_TRANSLATE__METRICS_PORT": "0",
            "BIZEVENTS_TRANSLATE__MAX_POLL_RECORDS": "500",
            "BIZEVENTS_STATE_DIR": str(self.tmp / "state"),
            "BIZEVENTS_LOG_FORMAT": "json",
            **extra,
        }

    def worker(self, name: str = "worker", **extra: str) -> Worker:
        return Worker(self.env(**extra), self.tmp / f"{name}.log")

    @classmethod
    def fresh(cls, endpoints: Endpoints, tmp: Path, short: str, name: str) -> Setup:
        """A setup of its own: server ``<short><tag>``, its orders' topic made with four
        partitions, a dead-letter topic and the group ``test-<name>-<tag>``."""
        tag = uuid.uuid4().hex[:8]
        server = f"{short}{tag}"
        made = cls(
            endpoints,
            server,
            f"{server}.store.orders",
            f"test.dead-letter.{tag}",
            f"test-{name}-{tag}",
            tmp,
        )
        create_topic(endpoints.bootstrap_servers, made.topic, 4)
        return made


def acknowledged(workers: Sequence[Worker], changes: int) -> None:
    """Waits until the workers together have acknowledged ``changes`` changes."""
    wait_for(
        lambda: sum(w.metric("bizevents_translate_acknowledged_total") for w in workers) >= changes,
        120,
        "every change acknowledged",
        workers,
    )


@pytest.fixture
def setup(bizevents_stack: Endpoints, tmp_path: Path) -> Setup:
    return Setup.fresh(bizevents_stack, tmp_path, "tr", "translate")


ORDER_TOPICS = [c.contract_topic() for c in (OrderPlaced, OrderStatusChanged, OrderShipped)]


def wait_for_events(setup: Setup, count: int, timeout: float, worker: Worker) -> list[Message]:
    """The business events of ``setup``'s changes, once there are ``count``."""
    return wait_for_records(
        lambda: events_from(setup.endpoints.bootstrap_servers, ORDER_TOPICS, setup.topic),
        count,
        timeout,
        f"{count} business events",
        [worker],
    )


# -- tests ---------------------------------------------------------------------------------


def test_changes_become_business_events_with_lineage_drops_counted_poison_dead_lettered(
    setup: Setup,
) -> None:
    """Orders changes give OrderPlaced/StatusChanged/Shipped with lineage; a touch is
    dropped and counted; a poison record is dead-lettered and later records flow."""
    bootstrap = setup.endpoints.bootstrap_servers
    encoder = orders_encoder(setup.endpoints.registry_url, setup.server)
    s = setup.server
    placed = order_row(1, "pending")
    paid = order_row(1, "paid", updated_at=T0 + timedelta(minutes=1))
    touched = order_row(1, "paid", updated_at=T0 + timedelta(minutes=2))
    shipped = order_row(1, "shipped", tracking_number="TRK1", shipped_at=T0 + timedelta(hours=1))
    first = [
        encoder.encode(order_change(s, "c", None, placed, 1000)),
        encoder.encode(order_change(s, "u", placed, paid, 1010)),
        encoder.encode(order_change(s, "u", paid, touched, 1020)),  # irrelevant
        (b"", b"not an envelope at all"),  # poison, keyed below like order 1
    ]
    first[3] = (first[0][0], first[3][1])  # same key, so the same partition as order 1
    produce(bootstrap, setup.topic, first)
    # "dead-letter": the poison alone is set aside (the default, "park", would park
    # order 1's later changes behind it: tests/integration/test_parking.py)
    worker = setup.worker(BIZEVENTS_TRANSLATE__ON_ERROR=json.dumps({"orders": "dead-letter"}))
    try:
        worker.wait_assigned()
        produce(
            bootstrap, setup.topic, [encoder.encode(order_change(s, "u", touched, shipped, 1030))]
        )
        events = wait_for_events(setup, 4, 60, worker)
        dead = wait_for(
            lambda: read_all(bootstrap, setup.dead_letter), 30, "a dead letter", [worker]
        )
        wait_for(
            lambda: worker.metric("bizevents_translator_dropped_total", translator="orders@2") >= 1,
            20,
            "the drop counted",
            [worker],
        )
        metrics = {
            name: worker.metric(f"bizevents_translator_{name}_total", translator="orders@2")
            for name in ("consumed", "emitted", "dropped")
        }
        undecodable = worker.metric("bizevents_translate_undecodable_total", topic=setup.topic)
        wait_for(
            lambda: worker.metric("bizevents_translate_acknowledged_total") >= 5,
            20,
            "every record acknowledged",
            [worker],
        )
        lag = worker.metric("bizevents_translator_consumer_lag", translator="orders@2")
        latencies = worker.metric("bizevents_translate_latency_seconds_count")
    finally:
        assert worker.stop() == 0, worker.tail()
    assert len(events) == 4
    registry = SchemaRegistryClient({"url": setup.endpoints.registry_url})
    read = BusinessDeserializer(registry, OrderPlaced, OrderStatusChanged, OrderShipped)
    by_type: dict[str, list[Any]] = {}
    for m in events:
        assert m.value is not None
        event = read(m.value, m.topic)
        by_type.setdefault(type(event).__name__, []).append((event, m))
        # lineage in headers and in the envelope, the same
        assert m.headers[HEADER_EVENT_ID].decode() == event.lineage.event_id
        assert m.headers[HEADER_TRANSLATOR] == b"orders@2"
        assert event.lineage.translator == "orders@2"
        assert event.lineage.source_topic == setup.topic
        assert int(m.headers[HEADER_SOURCE_OFFSET]) == event.lineage.source_offset
        assert int(m.headers[HEADER_SOURCE_PARTITION]) == event.lineage.source_partition
        assert m.headers[HEADER_SOURCE_POSITION].decode() == event.lineage.source_position
        assert m.headers[HEADER_TX_ID].decode() == event.lineage.tx_id
        assert m.key == first[0][0]  # keyed by the source key
        assert event.lineage.replay is False
    assert sorted(by_type) == ["OrderPlaced", "OrderShipped", "OrderStatusChanged"]
    ((placed_event, _),) = by_type["OrderPlaced"]
    assert placed_event.order_id == 1 and placed_event.total == Decimal("20.90")
    changes = sorted(
        (e.lineage.source_offset, e.old_status.value, e.new_status.value)
        for e, _ in by_type["OrderStatusChanged"]
    )
    assert [c[1:] for c in changes] == [("PENDING", "PAID"), ("PAID", "SHIPPED")]
    # the shipment came after the poison record in the same partition: the stream went on
    ((shipped_event, _),) = by_type["OrderShipped"]
    assert shipped_event.tracking_number == "TRK1"
    (poison,) = dead
    assert poison.value == b"not an envelope at all" and poison.key == first[3][0]
    assert poison.headers[HEADER_DLQ_STAGE] == b"decode"
    assert poison.headers[HEADER_DLQ_REASON]
    assert poison.headers[HEADER_SOURCE_TOPIC] == setup.topic.encode()
    assert int(poison.headers[HEADER_SOURCE_OFFSET]) < shipped_event.lineage.source_offset
    assert metrics == {"consumed": 4, "emitted": 4, "dropped": 1}
    assert undecodable == 1
    assert lag == 0  # caught up, from Fetch's high watermark
    assert latencies >= 1


def order_story(server: str, orders: int, start_lsn: int = 10_000) -> list[ChangeEvent]:
    """Each order is placed, then walks pending → paid → shipped (plus a touch)."""
    changes: list[ChangeEvent] = []
    lsn = start_lsn
    rows = {n: order_row(n, "pending") for n in range(1, orders + 1)}
    for row in rows.values():
        lsn += 10
        changes.append(order_change(server, "c", None, row, lsn))
    for status in ("paid", "touch", "shipped"):
        for n in rows:
            before = rows[n]
            if status == "touch":
                after = dict(before, updated_at=before["updated_at"] + timedelta(seconds=1))
            elif status == "shipped":
                after = dict(before, status=status, tracking_number=f"TRK{n}", shipped_at=T0)
            else:
                after = dict(before, status=status)
            lsn += 10
            changes.append(order_change(server, "u", before, after, lsn))
            rows[n] = after
    return changes


def expected_ids(changes: Sequence[ChangeEvent]) -> dict[str, int]:
    """event_id -> source LSN, computed with the translator itself (no Kafka involved)."""
    from bizevents_store.translators import orders_v2

    from bizevents.contracts.change import Change
    from bizevents.translators.lineage import stamp

    ids: dict[str, int] = {}
    for change in changes:
        for event in stamp(orders_v2.translate(Change(change)), change, "orders", 2):
            assert isinstance(change.source.position, PgPosition)
            ids[event.lineage.event_id] = change.source.position.lsn or 0
    return ids


def test_two_workers_share_partitions_and_one_survives_kill_9(setup: Setup) -> None:
    """Two workers split 4 partitions; after kill -9 of one the other takes all of them
    over: every expected event id arrives, duplicates are byte-identical, per-key order holds."""
    bootstrap = setup.endpoints.bootstrap_servers
    encoder = orders_encoder(setup.endpoints.registry_url, setup.server)
    changes = order_story(setup.server, 1500)
    expected = expected_ids(changes)
    records = [encoder.encode(c) for c in changes]
    chunks = [records[i : i + 750] for i in range(0, len(records), 750)]
    produce(bootstrap, setup.topic, chunks[0])
    a = setup.worker("a")
    b = setup.worker("b")
    try:
        wait_for(
            lambda: len(a.assigned() or []) == 2 and len(b.assigned() or []) == 2,
            60,
            "a 2 + 2 split of the partitions",
            [a, b],
        )
        for chunk in chunks[1:4]:
            produce(bootstrap, setup.topic, chunk)
            time.sleep(0.3)
        wait_for(
            lambda: a.metric("bizevents_translator_consumed_total", translator="orders@2") > 0,
            30,
            "worker a translating",
            [a, b],
        )
        a.process.send_signal(signal.SIGKILL)
        a.process.wait(10)
        for chunk in chunks[4:]:
            produce(bootstrap, setup.topic, chunk)
        wait_for(lambda: len(b.assigned() or []) == 4, 60, "b holding all 4 partitions", [b])

        def arrived() -> list[Message] | None:
            found = events_from(bootstrap, ORDER_TOPICS, setup.topic)
            ids = {m.headers[HEADER_EVENT_ID].decode() for m in found}
            return found if ids >= set(expected) else None

        events = wait_for(arrived, 90, f"all {len(expected)} events", [b])
    finally:
        b.stop()
    by_id: dict[str, bytes | None] = {}
    duplicates = 0
    for m in events:
        event_id = m.headers[HEADER_EVENT_ID].decode()
        assert event_id in expected, "an event nobody expected"
        if event_id in by_id:
            duplicates += 1
            assert by_id[event_id] == m.value, "a duplicate with other content"
        by_id[event_id] = m.value
    assert set(by_id) == set(expected)
    # per key, within its output partition, first occurrences follow the source order
    seen: set[str] = set()
    last_lsn: dict[tuple[str, bytes | None], int] = {}
    for m in sorted(events, key=lambda m: (m.topic, m.partition, m.offset)):
        event_id = m.headers[HEADER_EVENT_ID].decode()
        if event_id in seen:
            continue
        seen.add(event_id)
        slot = (m.topic, m.key)
        assert expected[event_id] >= last_lsn.get(slot, 0), "per-key order broken"
        last_lsn[slot] = expected[event_id]
    print(f"{len(expected)} events, {duplicates} duplicates after kill -9")


def test_a_stopped_worker_leaves_its_group_where_the_broker_can_take_it(setup: Setup) -> None:
    """A worker's stop leaves its group only where the broker can take a LeaveGroup
    (``plumbing.kafka.stay_in_group_where_needed``, as the transaction worker's): Tansu
    keeps a member that leaves while its group rebalances as the group's leader for
    ever (docs/broker.md). Its own client's log says whether it left, and the other
    worker takes every partition over: at once on Kafka, on Tansu once the broker
    dropped the stopped one after the session timeout."""
    a = setup.worker("a", BIZEVENTS_LOG_LEVEL="DEBUG")  # the client's log: its LeaveGroup
    b = None
    try:
        wait_for(lambda: len(a.assigned() or []) == 4, 60, "a holding all 4 partitions", [a])
        # a second member: a rebalance, after which a client leaves a group (the broker's
        # first generation is 0, which no client leaves)
        b = setup.worker("b")
        wait_for(
            lambda: len(a.assigned() or []) == 2 and len(b.assigned() or []) == 2,
            60,
            "a 2 + 2 split of the partitions",
            [a, b],
        )
        assert a.stop() == 0, a.tail()
        log = (setup.tmp / "a.log").read_text()
        assert "Stopping heartbeat task" in log, "the client's debug log is not there"
        leaves = broker_traits(setup.endpoints.bootstrap_servers).leaves_groups
        assert ("LeaveGroup request" in log) == leaves
        wait_for(lambda: len(b.assigned() or []) == 4, 60, "b holding all 4 partitions", [b])
    finally:
        a.stop()
        if b is not None:
            b.stop()


def test_a_worker_started_before_the_registry_waits_for_it_and_translates(setup: Setup) -> None:
    """The demo starts the worker while the registry starts: the worker waits for the
    registry to answer (translate.registry_wait_s), then checks its contracts, joins and
    translates; the registry here is a second one, started only once the worker waits."""
    from bizevents.devstack.processes import free_port, port_is_free

    port = free_port("127.0.0.1")
    url = f"http://127.0.0.1:{port}"
    worker = Worker(setup.env(BIZEVENTS_REGISTRY__URL=url), setup.tmp / "early.log")
    registry: subprocess.Popen[bytes] | None = None
    try:
        wait_for(
            lambda: any(x.get("event") == "waiting for the registry" for x in worker.lines()),
            60,
            "the worker saying it waits for the registry",
            [worker],
        )
        assert port_is_free("127.0.0.1", port)  # nothing answered it so far
        with open(setup.tmp / "registry.log", "ab") as out:
            registry = subprocess.Popen(
                [
                    *(sys.executable, "-m", "bizevents.devstack.registry", "--host", "127.0.0.1"),
                    *("--port", str(port), "--data-dir", str(setup.tmp / "registry")),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        worker.wait_assigned()
        encoder = orders_encoder(url, setup.server)
        placed = order_row(7, "pending")
        produce(
            setup.endpoints.bootstrap_servers,
            setup.topic,
            [encoder.encode(order_change(setup.server, "c", None, placed, 2000))],
        )
        events = wait_for(
            lambda: events_from(setup.endpoints.bootstrap_servers, ORDER_TOPICS, setup.topic),
            60,
            "the OrderPlaced of order 7",
            [worker],
        )
        assert [e.headers[HEADER_TRANSLATOR] for e in events] == [b"orders@2"]
        read = BusinessDeserializer(SchemaRegistryClient({"url": url}), OrderPlaced)
        assert events[0].value is not None
        assert read(events[0].value, events[0].topic).order_id == 7
    finally:
        assert worker.stop() == 0, worker.tail()
        if registry is not None:
            registry.terminate()
            registry.wait(30)


def test_a_registry_that_never_answers_fails_start_up_with_a_sentence(setup: Setup) -> None:
    from bizevents.devstack.processes import free_port

    url = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    done = subprocess.run(
        [sys.executable, "-m", "bizevents", "translate"],
        env=setup.env(BIZEVENTS_REGISTRY__URL=url, BIZEVENTS_TRANSLATE__REGISTRY_WAIT_S="0.5"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"the schema registry at {url} did not answer within 0.5 s" in done.stderr
    assert "Traceback" not in done.stderr
