"""The transaction worker end to end: the store's orders placed in PostgreSQL, captured
with transaction metadata, assembled and translated by orders@3 into exactly one
OrderPlaced per order, with its items and true total; also across a worker killed, and
a rebalance, mid-transaction, and with concurrent transactions interleaved."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from bizevents_store.contracts import OrderPlaced
from bizevents_store.load import create_schema
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.contracts.business import HEADER_SOURCE_TOPIC, HEADER_TRANSLATOR
from bizevents.contracts.envelope import ChangeEvent, Source
from bizevents.contracts.serde import BusinessDeserializer
from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import Db, capture_endpoints, database, in_process

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@contextmanager
def store_db(endpoints: Endpoints) -> Iterator[Db]:
    """A test's slot and publication, the store's tables, a customer and three products."""
    with database(endpoints) as made:
        create_schema(made.conn)
        made.sql(
            "INSERT INTO store.customers (email, full_name) VALUES (%s, 'T') "
            "ON CONFLICT (email) DO NOTHING",
            ("tx-worker@example.com",),
        )
        for sku, price in (("TXA", "2.50"), ("TXB", "4.59"), ("TXC", "1622.10")):
            made.sql(
                "INSERT INTO store.products (sku, name, price) VALUES (%s, %s, %s) "
                "ON CONFLICT (sku) DO NOTHING",
                (sku, sku, price),
            )
        yield made


@pytest.fixture
def db(bizevents_stack: Endpoints) -> Iterator[Db]:
    with store_db(bizevents_stack) as made:
        yield made


def _ids(db: Db) -> tuple[int, list[int]]:
    customer = db.sql("SELECT id FROM store.customers WHERE email = 'tx-worker@example.com'")
    products = db.sql(
        "SELECT id FROM store.products WHERE sku IN ('TXA', 'TXB', 'TXC') ORDER BY sku"
    )
    return customer[0][0], [p[0] for p in products]


#: The store's load, once an order is in: an item at its product's price (order, line,
#: quantity, product), then the order's total (order, order). PostgreSQL's and MariaDB's.
ITEM_INSERT = (
    "INSERT INTO store.order_items SELECT %s, %s, id, %s, price FROM store.products WHERE id = %s"
)
TOTAL_UPDATE = (
    "UPDATE store.orders SET total = (SELECT SUM(quantity * unit_price) "
    "FROM store.order_items WHERE order_id = %s) WHERE id = %s"
)


def fill_order(
    execute: Callable[[str, Any], Any], order: int, lines: list[tuple[int, int]]
) -> None:
    """As the store's load does after the order's insert: its items (product, quantity),
    then its total."""
    for n, (product, qty) in enumerate(lines, start=1):
        execute(ITEM_INSERT, (order, n, qty, product))
    execute(TOTAL_UPDATE, (order, order))


def place(cur: Any, customer: int, lines: list[tuple[int, int]]) -> int:
    """As the store's load does: the order with total 0, its items, then the total."""
    cur.execute(
        "INSERT INTO store.orders (customer_id, total) VALUES (%s, 0) RETURNING id", (customer,)
    )
    order = int(cur.fetchone()[0])
    fill_order(cur.execute, order, lines)
    return order


def place_orders(
    db: Db, customer: int, products: list[int], count: int, most_lines: int
) -> list[int]:
    """``count`` orders, each in a transaction of its own: order n has
    ``n % most_lines + 1`` lines."""
    return place_each(
        db,
        customer,
        [[(products[(n + i) % 3], i + 1) for i in range(n % most_lines + 1)] for n in range(count)],
    )


def place_each(db: Db, customer: int, orders: list[list[tuple[int, int]]]) -> list[int]:
    """Each order's lines (product, quantity) placed in a transaction of its own: the
    orders' ids."""
    placed = []
    with db.conn.cursor() as cur:
        for lines in orders:
            cur.execute("BEGIN")
            placed.append(place(cur, customer, lines))
            cur.execute("COMMIT")
    return placed


def truth(
    db: Db, orders: list[int]
) -> dict[int, tuple[Decimal, list[tuple[int, int, int, Decimal]]]]:
    out = {}
    for order in orders:
        total = db.sql("SELECT total FROM store.orders WHERE id = %s", (order,))[0][0]
        items = db.sql(
            "SELECT line_no, product_id, quantity, unit_price FROM store.order_items "
            "WHERE order_id = %s ORDER BY line_no",
            (order,),
        )
        out[order] = (total, [tuple(i) for i in items])
    return out


@contextmanager
def capturing(
    db: Db, tmp_path: Path, tables: tuple[str, ...] = ("store.orders", "store.order_items")
) -> Iterator[Any]:
    config = db.config(list(tables), partitions=3)
    with in_process(config, capture_endpoints(db.endpoints, tmp_path / "capture")) as run:
        run.wait_snapshot()
        yield run


class Worker:
    """``bizevents translate --transactions`` in a subprocess."""

    def __init__(self, db: Db, group: str, dlq: str, log: Path) -> None:
        self.env = {
            **os.environ,
            "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": db.endpoints.bootstrap_servers,
            "BIZEVENTS_REGISTRY__URL": db.endpoints.registry_url,
            "BIZEVENTS_TRANSLATORS": json.dumps({"orders": 3}),
            "BIZEVENTS_TRANSLATE__TOPIC_PREFIX": db.server,
            "BIZEVENTS_TRANSLATE__DEAD_LETTER_TOPIC": dlq,
            "BIZEVENTS_TRANSACTIONS__GROUP_ID": group,
            "BIZEVENTS_TRANSACTIONS__MAX_RECORDS": "40",
            "BIZEVENTS_LOG_FORMAT": "json",
        }
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, transactions_only: bool = True) -> Worker:
        """``translate --transactions``, or ``translate`` (every pinned translator)."""
        argv = ["--transactions"] if transactions_only else []
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bizevents", "translate", *argv],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        return self

    def signal(self, sig: int) -> None:
        assert self.process is not None
        self.process.send_signal(sig)
        self.process.wait(60)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self) -> str:
        return self.log.read_text()[-4000:] if self.log.exists() else ""

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """``bizevents *args`` with this worker's settings (dlq, shadow, promote, ...)."""
        return subprocess.run(
            [sys.executable, "-m", "bizevents", *args],
            env=self.env,
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=timeout,
        )


class Reader:
    """OrderPlaced events of orders@3 from this test's capture, read in assign mode."""

    def __init__(self, db: Db) -> None:
        self.db = db
        registry = SchemaRegistryClient({"url": db.endpoints.registry_url})
        self.decode = BusinessDeserializer(registry, OrderPlaced)
        self.consumer = Consumer(
            {
                "bootstrap.servers": db.endpoints.bootstrap_servers,
                "group.id": "unused",
                "enable.auto.commit": False,
            }
        )
        topic = "store.order-placed"
        self.events: list[OrderPlaced] = []
        self._assigned = False
        self.topic = topic

    def poll(self) -> list[OrderPlaced]:
        if not self._assigned:
            meta = self.consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
            if meta is None or not meta.partitions:
                return self.events
            self.consumer.assign([TopicPartition(self.topic, p, 0) for p in meta.partitions])
            self._assigned = True
        for m in self.consumer.consume(500, 0.2):
            err = m.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, str(err)
                continue
            # the topic is shared with other tests on this broker, whose events may name
            # schema ids of another registry: pick this test's by their lineage headers
            headers = dict(m.headers() or [])
            source = (headers.get(HEADER_SOURCE_TOPIC) or b"").decode()
            if headers.get(HEADER_TRANSLATOR) != b"orders@3" or not source.startswith(
                f"{self.db.server}."
            ):
                continue
            event = self.decode(m.value() or b"", self.topic)
            assert event.lineage.translator == "orders@3"
            self.events.append(event)
        return self.events

    def wait(self, orders: set[int], worker: Worker, timeout: float = 90) -> list[OrderPlaced]:
        deadline = time.monotonic() + timeout
        while {e.order_id for e in self.poll()} < orders:
            assert worker.alive(), worker.tail()
            assert time.monotonic() < deadline, (
                f"{len({e.order_id for e in self.events} & orders)} of {len(orders)} orders "
                f"placed; worker log: {worker.tail()}"
            )
        time.sleep(1.5)  # any duplicate that would (wrongly) follow
        self.poll()
        return [e for e in self.events if e.order_id in orders]

    def close(self) -> None:
        self.consumer.close()


def _check(events: list[OrderPlaced], expected: dict[int, Any]) -> None:
    by_order: dict[int, list[OrderPlaced]] = {}
    for e in events:
        by_order.setdefault(e.order_id, []).append(e)
    for order, (total, items) in expected.items():
        got = by_order[order]
        assert len({e.lineage.event_id for e in got}) == 1, f"order {order}: several ids"
        event = got[0]
        assert event.total == total, order
        assert [
            (i.line_no, i.product_id, i.quantity, i.unit_price) for i in event.items
        ] == items, order
        assert event.lineage.tx_id is not None


def test_orders_placed_with_items_and_totals_interleaved(db: Db, tmp_path: Path) -> None:
    """Twenty orders, four pairs of them written by two connections interleaved: one
    OrderPlaced each with its own items and the total the transaction set."""
    customer, products = _ids(db)
    with running_workers(db, tmp_path, 1) as (_group, (worker,), reader, run):
        orders = []
        with db.conn.cursor() as cur:
            for n in range(12):
                cur.execute("BEGIN")
                orders.append(
                    place(
                        cur,
                        customer,
                        [(products[n % 3], n % 4 + 1), (products[(n + 1) % 3], 1)],
                    )
                )
                cur.execute("COMMIT")
        other = psycopg2.connect(db.endpoints.postgres_dsn)
        try:
            for n in range(4):  # two open transactions at once, committed crosswise
                a, b = db.conn.cursor(), other.cursor()
                a.execute("BEGIN")
                b.execute("BEGIN")
                oa = place(a, customer, [(products[0], 1)])
                ob = place(b, customer, [(products[1], 2), (products[2], 1), (products[0], 5)])
                a.execute(
                    "INSERT INTO store.order_items SELECT %s, 9, id, 1, price "
                    "FROM store.products WHERE id = %s",
                    (oa, products[2]),
                )
                a.execute(
                    "UPDATE store.orders SET total = total + "
                    "(SELECT price FROM store.products WHERE id = %s) WHERE id = %s",
                    (products[2], oa),
                )
                (b if n % 2 else a).execute("COMMIT")
                (a if n % 2 else b).execute("COMMIT")
                orders += [oa, ob]
        finally:
            other.close()
        run.wait_acked(db.wal_lsn())
        events = reader.wait(set(orders), worker)
        _check(events, truth(db, orders))
        assert len(events) == len(orders)  # not one more


def _at_end(db: Db, topic: str) -> Any:
    """A consumer of every partition of ``topic``, read to its end (the test's own small
    topic): its next record is the first one written after this returns."""
    consumer = Consumer(
        {
            "bootstrap.servers": db.endpoints.bootstrap_servers,
            "group.id": "unused",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 5,
        }
    )
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    at_end: set[int] = set()
    while len(at_end) < len(meta.partitions):
        for m in consumer.consume(500, 1.0):
            if m.error() is not None:
                at_end.add(m.partition() or 0)
    return consumer


def _mid_transaction(
    db: Db, reader: Reader, worker: Worker, group: str, lines: int
) -> tuple[int, list[int]]:
    """Orders placed and translated, then one big order whose transaction the worker is
    in the middle of when this returns (some of its items captured, which the workers
    read as they come; no event yet: the callers check)."""
    customer, products = _ids(db)
    small = place_each(db, customer, [[(products[n], n + 1)] for n in range(3)])
    reader.wait(set(small), worker)
    # Seen as soon as capture writes the big transaction's first item (a watching
    # consumer, not a watermark query per loop: that took long enough for the worker to
    # read the whole transaction first).
    watch = _at_end(db, f"{db.server}.store.order_items")
    try:
        with db.conn.cursor() as cur:
            cur.execute("BEGIN")
            big = place(cur, customer, [(products[n % 3], 1 + n % 5) for n in range(lines)])
            cur.execute("COMMIT")
        deadline = time.monotonic() + 60
        while not any(m.error() is None for m in watch.consume(1, 0.005)):
            assert worker.alive(), worker.tail()
            assert time.monotonic() < deadline, "capture wrote nothing of the big transaction"
    finally:
        watch.close()
    return big, small


def _expected_id(db: Db, event: OrderPlaced) -> str:
    """The id the row path (orders@1) gives the OrderPlaced of the technical record the
    event's lineage names: the order's INSERT, from which orders@3 says it stems."""
    from bizevents_store.translators import orders_v1

    from bizevents.contracts.serde import BusinessSerializer
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.plumbing.registry import schema_lookup
    from bizevents.translators.pipeline import Pipeline, SourceRecord

    lineage = event.lineage
    consumer = Consumer({"bootstrap.servers": db.endpoints.bootstrap_servers, "group.id": "unused"})
    try:
        where = TopicPartition(
            lineage.source_topic, lineage.source_partition, lineage.source_offset
        )
        consumer.assign([where])
        (m,) = consumer.consume(1, 10)
    finally:
        consumer.close()
    assert m.error() is None and m.offset() == lineage.source_offset, m.error()
    client = SchemaRegistryClient({"url": db.endpoints.registry_url})
    pipeline = Pipeline([orders_v1], AutoDecoder(schema_lookup(client)), BusinessSerializer(client))
    record = SourceRecord(
        lineage.source_topic, lineage.source_partition, lineage.source_offset, m.key(), m.value()
    )
    (out,) = pipeline.process([record]).records
    return out.event_id


def test_worker_killed_mid_transaction(db: Db, tmp_path: Path) -> None:
    """kill -9 while a big transaction is half assembled: the next worker gives exactly
    one OrderPlaced for it (and for each earlier order), with the deterministic id."""
    group = f"tx-{uuid.uuid4().hex[:8]}"
    first = Worker(db, group, f"{group}.dlq", tmp_path / "first.log")
    reader = Reader(db)
    with capturing(db, tmp_path) as run:
        first.start()
        try:
            big, small = _mid_transaction(db, reader, first, group, lines=3000)
            first.signal(signal.SIGKILL)
            assert big not in {e.order_id for e in reader.poll()}, "not killed mid-transaction"
            run.wait_acked(db.wal_lsn())
            second = Worker(db, group, f"{group}.dlq", tmp_path / "second.log").start()
            try:
                events = reader.wait({big, *small}, second)
            finally:
                second.signal(signal.SIGTERM)
        finally:
            reader.close()
            if first.alive():
                first.signal(signal.SIGKILL)
    _check(events, truth(db, [big, *small]))
    assert [e.order_id for e in events].count(big) == 1
    for e in events:
        assert e.lineage.event_id == _expected_id(db, e)


@contextmanager
def running_workers(
    db: Db, tmp_path: Path, count: int = 2, prefix: str = "tx"
) -> Iterator[tuple[str, list[Worker], Reader, Any]]:
    """The store's tables captured and ``count`` workers of one group started: the group,
    the workers, a reader of the orders' events and the capture run; on leaving the
    reader is closed and the workers still alive are told to stop."""
    group = f"{prefix}-{uuid.uuid4().hex[:8]}"
    workers = [
        Worker(db, group, f"{group}.dlq", tmp_path / f"w{i}.log") for i in range(1, count + 1)
    ]
    reader = Reader(db)
    with capturing(db, tmp_path) as run:
        for worker in workers:
            worker.start()
        try:
            yield group, workers, reader, run
        finally:
            reader.close()
            for worker in workers:
                if worker.alive():
                    worker.signal(signal.SIGTERM)


def test_rebalance_mid_transaction(db: Db, tmp_path: Path) -> None:
    """Two workers share the group; the one that publishes a big order's business key
    leaves while that transaction is half read: every order still has one event id, the
    big one's complete."""
    customer, products = _ids(db)
    with running_workers(db, tmp_path) as (group, workers, reader, run):
        first, second, target = _owner_of_next_big(db, workers, group)
        small = place_each(db, customer, [[(products[n], n + 1)] for n in range(3)])
        reader.wait(set(small), second)
        # the owner is stopped while the big order is written whole into Kafka; it
        # is told to leave as it resumes: it reads a batch or two (40 records each)
        # of the 1,501 changes, then leaves the group mid-transaction
        assert first.process is not None
        first.process.send_signal(signal.SIGSTOP)
        with db.conn.cursor() as cur:
            cur.execute("BEGIN")
            big = place(cur, customer, [(products[n % 3], 1 + n % 5) for n in range(1500)])
            cur.execute("COMMIT")
        run.wait_acked(db.wal_lsn())
        assert _assembly_partition(big) == target
        assert big not in {e.order_id for e in reader.poll()}, "placed by a non-owner"
        first.process.send_signal(signal.SIGTERM)
        first.process.send_signal(signal.SIGCONT)
        first.process.wait(60)
        assert first.process.returncode == 0, first.tail()
        events = reader.wait({big, *small}, second)
    _check(events, truth(db, [big, *small]))
    ids = {
        e.order_id: {x.lineage.event_id for x in events if x.order_id == e.order_id} for e in events
    }
    assert all(len(v) == 1 for v in ids.values())
    big_event = next(e for e in events if e.order_id == big)
    assert len(big_event.items) == 1500


def test_bad_input_is_dead_lettered_with_its_reason(db: Db, tmp_path: Path) -> None:
    """Through the live worker: a change with no transaction block, a transaction that
    never ends and an END counting more than arrived each reach the dead-letter topic
    with the reason; the real orders around them are placed as usual."""
    from confluent_kafka import Producer

    from bizevents.contracts.envelope import ChangeEvent, PgPosition, Source, Transaction
    from bizevents.contracts.logical import ColumnType, Field, Kind
    from bizevents.contracts.technical import JsonEncoder, TableSchema
    from bizevents.contracts.technical.transaction import (
        TransactionRecord,
        transaction_connect_json,
    )

    customer, products = _ids(db)
    group = f"tx-{uuid.uuid4().hex[:8]}"
    dlq = f"{group}.dlq"
    worker = Worker(db, group, dlq, tmp_path / "worker.log")
    worker.env["BIZEVENTS_TRANSACTIONS__MAX_WAIT"] = "2"
    reader = Reader(db)
    producer = Producer({"bootstrap.servers": db.endpoints.bootstrap_servers})
    ids = Field("id", ColumnType(Kind.INT64), optional=False)
    encoder = JsonEncoder(TableSchema(db.server, "store", "orders", (ids,), (ids,)), False)

    def send(order: int, tx: Transaction | None) -> None:
        source = Source("postgresql", db.server, "db", "store", "orders", 0, position=PgPosition(1))
        key, value = encoder.encode(
            ChangeEvent("c", source, None, {"id": order}, {"id": order}, 0, tx)
        )
        producer.produce(f"{db.server}.store.orders", value, key)

    with capturing(db, tmp_path) as run:
        worker.start()
        try:
            send(900_001, None)
            send(900_002, Transaction("gtid-never", 1, 1))
            send(900_003, Transaction("gtid-short", 1, 1))
            assert producer.flush(30) == 0
            # before the END: the worker has read the changes (the first is dead-lettered)
            _wait_copied(db, dlq, b'"id":900001', 1, worker)
            end = TransactionRecord("END", "gtid-short", 0, 2, (("store.orders", 2),))
            producer.produce(f"{db.server}.transaction", transaction_connect_json(end, False))
            assert producer.flush(30) == 0
            orders = place_each(db, customer, [[(products[n % 3], 1)] for n in range(4)])
            run.wait_acked(db.wal_lsn())
            events = reader.wait(set(orders), worker)
            _check(events, truth(db, orders))
            dead = _dead_letters(db, dlq, 4)
        finally:
            reader.close()
            if worker.alive():
                worker.signal(signal.SIGTERM)
    reasons = sorted(reason for _, reason in dead)
    assert any("no transaction block" in r for r in reasons), reasons
    assert any("gtid-never never ended" in r for r in reasons), reasons
    short = [r for r in reasons if "gtid-short" in r]
    assert len(short) == 2 and "only {store.orders: 1}" in short[0], reasons  # change and END


def _wait_copied(db: Db, topic: str, marker: bytes, n: int, worker: Worker) -> None:
    """Until ``topic`` (one of the worker's outputs) holds ``n`` records whose value has
    ``marker``."""
    consumer = Consumer({"bootstrap.servers": db.endpoints.bootstrap_servers, "group.id": "x"})
    seen = 0
    deadline = time.monotonic() + 60
    try:
        while seen < n:
            assert worker.alive() and time.monotonic() < deadline, worker.tail()
            if not consumer.assignment():
                meta = consumer.list_topics(timeout=10).topics.get(topic)
                if meta is None or not meta.partitions:
                    time.sleep(0.2)
                    continue
                consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
            seen += sum(
                1
                for m in consumer.consume(100, 0.2)
                if m.error() is None and marker in (m.value() or b"")
            )
    finally:
        consumer.close()


def _dead_letters(db: Db, topic: str, n: int) -> list[tuple[bytes | None, str]]:
    consumer = Consumer({"bootstrap.servers": db.endpoints.bootstrap_servers, "group.id": "x"})
    out: list[tuple[bytes | None, str]] = []
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            for m in consumer.consume(100, 0.5):
                if m.error() is None:
                    found = m.headers()
                    pairs = found.items() if isinstance(found, dict) else found or []
                    reason = dict(pairs).get("bizevents.dlq.reason") or b""
                    text = reason.decode() if isinstance(reason, bytes) else reason
                    out.append((m.value(), text))
    finally:
        consumer.close()
    return out


def _assembling(worker: Worker, group: str) -> list[int]:
    """The assembly-log partitions ``worker`` said it held last."""
    held: list[int] = []
    for line in worker.log.read_text().splitlines():
        if '"assembling"' in line:
            record = json.loads(line)
            if record.get("log") == f"{group}.assembly":
                held = list(record["partitions"])
    return held


def _assembly_partition(order: int) -> int:
    """Where orders@3's transactions of ``order`` are assembled (4 partitions)."""
    from bizevents_store.translators import orders_v3

    from bizevents.translators.assembly import Part
    from bizevents.translators.pipeline import SourceRecord
    from bizevents.translators.routing import owner

    source = Source("postgresql", "s", "db", "store", "orders", 0)
    change = ChangeEvent("c", source, None, {"id": order}, {"id": order}, 0)
    return owner(orders_v3, Part(0, SourceRecord("t", 0, 0, b"", b""), change=change), 4)


def _owner_of_next_big(db: Db, workers: list[Worker], group: str) -> tuple[Worker, Worker, int]:
    """Once both workers own virtual partitions: (the one that will publish the order
    :func:`_mid_transaction` places big, the other, that order's partition)."""
    deadline = time.monotonic() + 60
    while not all(_assembling(worker, group) for worker in workers):
        assert time.monotonic() < deadline, [w.tail() for w in workers]
        time.sleep(0.2)
    with db.conn.cursor() as cur:
        cur.execute("SELECT last_value, is_called FROM store.orders_id_seq")
        last, called = cur.fetchone()
    db.conn.commit()
    following = int(last) + 1 if called else int(last)
    target = _assembly_partition(following + 3)  # after _mid_transaction's three
    owner = next(w for w in workers if target in _assembling(w, group))
    return owner, next(w for w in workers if w is not owner), target


def test_two_workers_share_the_assembly(db: Db, tmp_path: Path) -> None:
    """Two workers of one group: both assemble (the assembly log's partitions are split
    between them), and every order's OrderPlaced comes once, with its items and true
    total."""
    customer, products = _ids(db)
    with running_workers(db, tmp_path) as (group, workers, reader, run):
        orders = place_each(
            db,
            customer,
            [[(products[n % 3], n % 4 + 1), (products[(n + 1) % 3], 1)] for n in range(24)],
        )
        run.wait_acked(db.wal_lsn())
        events = reader.wait(set(orders), workers[0])
        held = [_assembling(worker, group) for worker in workers]
    _check(events, truth(db, orders))
    assert len(events) == len(orders)  # once each, not one more
    assert all(held) and sorted(held[0] + held[1]) == [0, 1, 2, 3], held
    assert {_assembly_partition(o) for o in orders} == {0, 1, 2, 3}  # every member had work


def test_one_of_two_workers_killed_mid_transaction(db: Db, tmp_path: Path) -> None:
    """Two workers; kill -9 of the one that assembles a big order while its transaction
    is half copied: the survivor takes its partitions over and every order's OrderPlaced
    has one event id and its true total, the big one exactly once."""
    customer, products = _ids(db)
    with running_workers(db, tmp_path) as (group, workers, reader, run):
        victim, survivor, target = _owner_of_next_big(db, workers, group)
        big, small = _mid_transaction(db, reader, survivor, group, lines=3000)
        assert _assembly_partition(big) == target, big
        victim.signal(signal.SIGKILL)
        assert big not in {e.order_id for e in reader.poll()}, "not killed mid-transaction"
        run.wait_acked(db.wal_lsn())
        more = place_each(db, customer, [[(products[n % 3], n + 1)] for n in range(8)])
        run.wait_acked(db.wal_lsn())
        events = reader.wait({big, *small, *more}, survivor, timeout=120)
    _check(events, truth(db, [big, *small, *more]))
    assert [e.order_id for e in events].count(big) == 1
    assert len(next(e for e in events if e.order_id == big).items) == 3000
    for e in events:
        assert e.lineage.event_id == _expected_id(db, e)


def _scrape(url: str) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("#") and " " in line:
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found


def test_one_worker_runs_row_and_transaction_translators(db: Db, tmp_path: Path) -> None:
    """``bizevents translate`` with a row translator (customers@1) and a transaction
    translator (orders@3) pinned: one process, one start-up, one metrics endpoint; the
    orders are placed whole (true totals) and the customers registered."""
    customer, products = _ids(db)
    group = f"tx-{uuid.uuid4().hex[:8]}"
    worker = Worker(db, group, f"{group}.dlq", tmp_path / "worker.log")
    worker.env["BIZEVENTS_TRANSLATORS"] = json.dumps({"orders": 3, "customers": 1})
    worker.env["BIZEVENTS_TRANSLATE__GROUP_ID"] = f"{group}.rows"
    worker.env["BIZEVENTS_TRANSLATE__METRICS_PORT"] = "0"
    reader = Reader(db)
    tables = ("store.customers", "store.orders", "store.order_items")
    with capturing(db, tmp_path, tables) as run:
        try:
            with db.conn.cursor() as cur:  # the customers topic exists before the worker
                cur.execute(
                    "INSERT INTO store.customers (email, full_name) VALUES (%s, 'One')",
                    (f"{group}@example.com",),
                )
            db.conn.commit()
            run.wait_acked(db.wal_lsn())
            worker.start(transactions_only=False)  # every pinned translator
            orders = place_each(db, customer, [[(products[n % 3], n + 1)] for n in range(6)])
            run.wait_acked(db.wal_lsn())
            events = reader.wait(set(orders), worker)
            url = next(
                json.loads(line)["url"]
                for line in worker.log.read_text().splitlines()
                if '"metrics endpoint"' in line
            )
            deadline = time.monotonic() + 30
            while True:
                metrics = _scrape(url)
                emitted = {
                    ref: sum(
                        v
                        for k, v in metrics.items()
                        if k.startswith("bizevents_translator_emitted_total")
                        and f'translator="{ref}"' in k
                    )
                    for ref in ("customers@1", "orders@3")
                }
                if emitted["customers@1"] >= 1 and emitted["orders@3"] >= len(orders):
                    break
                assert time.monotonic() < deadline, (emitted, worker.tail())
                time.sleep(0.5)
            log = worker.log.read_text()
        finally:
            reader.close()
            if worker.alive():
                worker.signal(signal.SIGTERM)
    _check(events, truth(db, orders))
    assert len(events) == len(orders)
    assert '"translating"' in log and '"translating transactions"' in log  # one process
    assert worker.process is not None and worker.process.returncode == 0, worker.tail()
