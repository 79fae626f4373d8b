"""Transaction workers that own technical partitions (``transactions.by_partition``)
against a real broker and registry: the test writes the technical topics as a capture
routing ``store.orders`` by ``id`` and ``store.order_items`` by ``order_id`` would (each
change on its order's partition, END with ``partition_counts``), a third or more of the
transactions placing orders on partitions of both members. Every order's OrderPlaced
comes with one event id, its items and its true total, each order's status changes in
commit order; also across a member killed (SIGKILL) before its forward is written,
after it, after its publish, and during a rebalance."""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from bizevents_store.contracts import OrderStatusChanged
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from bizevents.contracts.business import HEADER_SOURCE_TOPIC
from bizevents.contracts.envelope import ChangeEvent, Op, Transaction
from bizevents.contracts.serde import BusinessDeserializer
from bizevents.contracts.technical.routing import partition_for, routing_key
from bizevents.contracts.technical.transaction import (
    TRANSACTION_KEY_AVRO,
    TRANSACTION_VALUE_COUNTED_AVRO,
    TransactionRecord,
    encode_transaction_key,
    encode_transaction_value,
)
from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import Db
from tests.integration.test_transaction_worker import Reader, Worker, _assembling, _dead_letters
from tests.store_technical import (
    order_change,
    order_item_change,
    pending_order,
    registered_order_items_encoder,
    registered_orders_encoder,
)

pytestmark = pytest.mark.integration

N = 4
#: Every pair of partitions: whichever two partitions each member owns, four pairs of six
#: cross the members.
PAIRS = [(p, q) for p in range(N) for q in range(p + 1, N)]
T0 = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
PRICE = Decimal("2.50")


def _partition(order: int) -> int:
    return partition_for(routing_key([order]), N)


def place_mixed(
    count: int, order_on: Callable[[int], int], place: Callable[[list[int], int], None]
) -> list[int]:
    """``count`` transactions, each ``place(orders, lines)``: a third place one order, two
    thirds two orders on a pair of partitions (every pair in turn), of one to three lines
    each; the orders placed (``order_on(p)``: a new order on partition ``p``)."""
    placed: list[int] = []
    for i in range(count):
        if i % 3 == 0:
            orders = [order_on(i % N)]
        else:
            p, q = PAIRS[i % len(PAIRS)]
            orders = [order_on(p), order_on(q)]
        place(orders, 1 + i % 3)
        placed += orders
    return placed


def crossing_share(touched: list[set[int]], held: list[list[int]]) -> float:
    """The share of the transactions (the partitions each ``touched``) that touched
    partitions of two members (the partitions each ``held``)."""
    crossed = [t for t in touched if sum(1 for h in held if t & set(h)) > 1]
    return len(crossed) / len(touched)


class Technical:
    """The technical topics of one server, written as a routing capture writes them."""

    def __init__(self, endpoints: Endpoints, server: str) -> None:
        self.server = server
        self.tx_topic = f"{server}.transaction"
        bootstrap = endpoints.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wanted = [
            NewTopic(f"{server}.store.orders", N),
            NewTopic(f"{server}.store.order_items", N),
            NewTopic(self.tx_topic, 1),
        ]
        for future in admin.create_topics(wanted).values():
            future.result(30)
        registry = SchemaRegistryClient({"url": endpoints.registry_url})
        self.orders = registered_orders_encoder(server, registry)
        self.items = registered_order_items_encoder(server, registry)
        self.key_id = registry.register_schema(
            f"{self.tx_topic}-key", Schema(json.dumps(TRANSACTION_KEY_AVRO), "AVRO")
        )
        self.value_id = registry.register_schema(
            f"{self.tx_topic}-value", Schema(json.dumps(TRANSACTION_VALUE_COUNTED_AVRO), "AVRO")
        )
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.lsn, self.xid, self.next_order = 1_000_000, 500, 1
        self.rows: dict[int, dict[str, Any]] = {}
        #: per order placed: its total and its lines (line_no, product, quantity, price)
        self.truth: dict[int, tuple[Decimal, list[tuple[int, int, int, Decimal]]]] = {}
        #: per transaction: the partitions it touched
        self.touched: list[set[int]] = []

    def order_on(self, partition: int) -> int:
        order = self.next_order
        while _partition(order) != partition:
            order += 1
        self.next_order = order + 1
        return order

    def _order(self, op: Op, before: Any, after: Any) -> tuple[Any, ChangeEvent]:
        self.lsn += 8
        return self.orders, order_change(
            self.server,
            op,
            before,
            after,
            lsn=self.lsn,
            tx_id=self.xid,
        )

    def placing(self, order: int, lines: int) -> list[tuple[Any, ChangeEvent]]:
        row = pending_order(order, T0)
        changes = [self._order("c", None, row)]
        items = []
        for line in range(1, lines + 1):
            self.lsn += 8
            item = order_item_change(
                self.server, order, line, 10 + line, line, PRICE, lsn=self.lsn, tx_id=self.xid
            )
            changes.append((self.items, item))
            items.append((line, 10 + line, line, PRICE))
        total = sum((PRICE * q for _, _, q, _ in items), Decimal("0.00"))
        self.rows[order] = {**row, "total": total}
        changes.append(self._order("u", row, self.rows[order]))
        self.truth[order] = (total, items)
        return changes

    def status(self, order: int, status: str) -> list[tuple[Any, ChangeEvent]]:
        before = self.rows[order]
        self.rows[order] = {**before, "status": status}
        return [self._order("u", before, self.rows[order])]

    def commit(
        self, changes: list[tuple[Any, ChangeEvent]], more: tuple[str, int] | None = None
    ) -> None:
        """One transaction: BEGIN, each change on its order's partition, END with counts
        (with ``more``, one change more of that table on that partition than written)."""
        tx_id = f"{self.xid}:{self.lsn + 100}"
        key = encode_transaction_key(self.key_id, tx_id)
        begin = TransactionRecord("BEGIN", tx_id, 0)
        self._produce(self.tx_topic, key, encode_transaction_value(self.value_id, begin, True), 0)
        tables: dict[str, int] = {}
        counts: dict[tuple[str, int], int] = {}
        for n, (encoder, change) in enumerate(changes, start=1):
            table = change.source.qualified_table
            tables[table] = tables.get(table, 0) + 1
            row = change.after or change.before or {}
            partition = _partition(row["id"] if table == "store.orders" else row["order_id"])
            counts[(table, partition)] = counts.get((table, partition), 0) + 1
            block = Transaction(tx_id, n, tables[table])
            k, v = encoder.encode(replace(change, transaction=block))
            self._produce(f"{self.server}.{table}", k, v, partition)
        if more is not None:
            tables[more[0]] = tables.get(more[0], 0) + 1
            counts[more] = counts.get(more, 0) + 1
        end = TransactionRecord(
            "END",
            tx_id,
            0,
            sum(tables.values()),
            tuple(tables.items()),
            tuple((t, p, n) for (t, p), n in sorted(counts.items())),
        )
        self._produce(self.tx_topic, key, encode_transaction_value(self.value_id, end, True), 0)
        self.producer.flush(30)
        self.touched.append({p for _, p in counts})
        self.xid += 1
        self.lsn += 200

    def _produce(self, topic: str, key: bytes | None, value: bytes, partition: int) -> None:
        self.producer.produce(topic, key=key, value=value, partition=partition)

    def mixed(self, count: int) -> list[int]:
        """``count`` transactions of :func:`place_mixed`; the orders placed."""
        return place_mixed(count, self.order_on, self.place)

    def place(self, orders: list[int], lines: int) -> None:
        self.commit([c for o in orders for c in self.placing(o, lines)])


def _wait_held(workers: list[Worker], group: str) -> list[list[int]]:
    """Once the live ``workers`` together own every partition: what each owns."""
    deadline = time.monotonic() + 90
    while True:
        held = [_assembling(w, group) for w in workers]
        if sorted(p for h in held for p in h) == list(range(N)) and all(held):
            return held
        for w in workers:
            assert w.alive(), w.tail()
        assert time.monotonic() < deadline, [w.tail() for w in workers]
        time.sleep(0.2)


class Members:
    """The members of one group, the technical topics they read, and a reader of their
    OrderPlaced events."""

    def __init__(self, endpoints: Endpoints, tmp_path: Path, stack: ExitStack) -> None:
        self.server = f"bp{uuid.uuid4().hex[:8]}"
        self.group = f"{self.server}-tx"
        self.tmp_path = tmp_path
        self.technical = Technical(endpoints, self.server)
        self.db = cast(Db, SimpleNamespace(endpoints=endpoints, server=self.server))
        self.workers: list[Worker] = []
        self.reader = Reader(self.db)
        stack.callback(self.reader.close)
        stack.callback(self._stop_all)

    def start(self, **settings: str) -> Worker:
        worker = Worker(
            self.db, self.group, f"{self.server}.dlq", self.tmp_path / f"w{len(self.workers)}.log"
        )
        worker.env["BIZEVENTS_TRANSACTIONS__BY_PARTITION"] = "true"
        worker.env["BIZEVENTS_TRANSLATE__SESSION_TIMEOUT_S"] = "6"
        for name, value in settings.items():
            worker.env[f"BIZEVENTS_{name.upper()}"] = value
        self.workers.append(worker.start())
        return worker

    def live(self) -> list[Worker]:
        return [w for w in self.workers if w.alive()]

    def _stop_all(self) -> None:
        for w in self.workers:
            if w.alive():
                w.signal(signal.SIGKILL)

    def wait_placed(self, orders: set[int], timeout: float = 120) -> list[Any]:
        live = self.live()
        assert live
        return self.reader.wait(orders, live[0], timeout=timeout)

    def check(self, events: list[Any], orders: list[int]) -> None:
        """One event id per order, its true total and items; nothing else of this run."""
        by_order: dict[int, set[str]] = {}
        for e in events:
            by_order.setdefault(e.order_id, set()).add(e.lineage.event_id)
            total, items = self.technical.truth[e.order_id]
            assert e.total == total, e.order_id
            assert [(i.line_no, i.product_id, i.quantity, i.unit_price) for i in e.items] == items
        assert set(by_order) == set(orders)
        assert all(len(ids) == 1 for ids in by_order.values()), by_order

    def crossing(self, held: list[list[int]]) -> float:
        return crossing_share(self.technical.touched, held)


def _stack(request: pytest.FixtureRequest, guarantee: str) -> Endpoints:
    """The suite's stack; exactly once, one on Apache Kafka (the embedded broker has no
    transactions)."""
    if guarantee == "exactly_once":
        on: Any = request.getfixturevalue("bizevents_stack_on")
        return cast(Endpoints, on("kafka"))
    return cast(Endpoints, request.getfixturevalue("bizevents_stack"))


@contextmanager
def members(endpoints: Endpoints, tmp_path: Path) -> Iterator[Members]:
    with ExitStack() as stack:
        yield Members(endpoints, tmp_path, stack)


def statuses(endpoints: Endpoints, server: str, orders: set[int]) -> dict[int, list[str]]:
    """Each order's OrderStatusChanged new statuses of this run, in the topic's order."""
    registry = SchemaRegistryClient({"url": endpoints.registry_url})
    decode = BusinessDeserializer(registry, OrderStatusChanged)
    topic = OrderStatusChanged.contract_topic()
    consumer = Consumer(
        {"bootstrap.servers": endpoints.bootstrap_servers, "group.id": "unused",
         "enable.auto.commit": False, "enable.partition.eof": True}
    )  # fmt: skip
    found: dict[int, list[str]] = {o: [] for o in orders}
    seen: set[str] = set()
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        ended: set[int] = set()
        deadline = time.monotonic() + 30
        while len(ended) < len(meta.partitions) and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, str(err)
                    ended.add(m.partition() or 0)
                    continue
                source = dict(m.headers() or []).get(HEADER_SOURCE_TOPIC) or b""
                text = source.decode() if isinstance(source, bytes) else source
                if not text.startswith(f"{server}."):
                    continue
                event = decode(m.value() or b"", topic)
                # a repeat (a member killed before its checkpoint) has the same id
                if event.order_id in orders and event.lineage.event_id not in seen:
                    seen.add(event.lineage.event_id)
                    found[event.order_id].append(str(event.new_status.value))
    finally:
        consumer.close()
    return found


def wait_statuses(
    endpoints: Endpoints, server: str, orders: set[int], count: int, timeout: float = 60
) -> dict[int, list[str]]:
    """:func:`statuses` once every order has ``count`` of them, or at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        seen = statuses(endpoints, server, orders)
        if all(len(s) == count for s in seen.values()) or time.monotonic() > deadline:
            return seen
        time.sleep(1)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_two_members_place_every_order_once_with_its_total(
    request: pytest.FixtureRequest, tmp_path: Path, guarantee: str
) -> None:
    """Two members, orders spread over both, more than a third of the transactions
    across them: every order placed with one id and its true total, and the status
    changes of each order (two transactions later) in commit order; exactly once, the
    forwards go in the Kafka transactions of their partitions."""
    bizevents_stack = _stack(request, guarantee)
    with members(bizevents_stack, tmp_path) as m:
        m.start(translate__processing_guarantee=guarantee)
        m.start(translate__processing_guarantee=guarantee)
        held = _wait_held(m.workers, m.group)
        orders = m.technical.mixed(30)
        changed = orders[:10]
        for status in ("paid", "shipped"):
            m.technical.commit([c for o in changed for c in m.technical.status(o, status)])
        events = m.wait_placed(set(orders))
        assert m.crossing(held) >= 1 / 3, held
        m.check(events, orders)
        assert len(events) == len(orders)  # no member died: each exactly once
        seen = wait_statuses(bizevents_stack, m.server, set(changed), 2)
        assert seen == {o: ["PAID", "SHIPPED"] for o in changed}


def _send(worker: Worker, sig: int) -> None:
    assert worker.process is not None
    worker.process.send_signal(sig)


def _forwarded(endpoints: Endpoints, group: str, partition: int) -> int:
    """How many records the exchange holds for ``partition``."""
    consumer = Consumer({"bootstrap.servers": endpoints.bootstrap_servers, "group.id": "unused"})
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(f"{group}.exchange", partition), timeout=10
        )
    finally:
        consumer.close()
    return int(high - low)


def _until(done: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("point", "guarantee"),
    [
        ("before_forward", "at_least_once"),
        ("after_forward", "at_least_once"),
        ("after_publish", "at_least_once"),
        ("during_rebalance", "at_least_once"),
        ("after_forward", "exactly_once"),
        ("after_publish", "exactly_once"),
    ],
)
def test_a_member_killed_around_a_forward(
    request: pytest.FixtureRequest, tmp_path: Path, point: str, guarantee: str
) -> None:
    """Two members; SIGKILL of the one owning partition p around the forward of its
    slice of a transaction placing orders on p and on the other member's partition q:
    before it read the transaction (so before it forwarded), once its forward is in the
    exchange but before the other slice came back (so before it published), once its
    order's OrderPlaced is out, or while a third member joins. The survivors take p
    over: every order placed with one id and its true total, the crossing one too;
    exactly once, each once (the killed member's open transaction is aborted)."""
    bizevents_stack = _stack(request, guarantee)
    with members(bizevents_stack, tmp_path) as m:
        victim = m.start(translate__processing_guarantee=guarantee)
        survivor = m.start(translate__processing_guarantee=guarantee)
        held = _wait_held([victim, survivor], m.group)
        before = m.technical.mixed(6)
        m.wait_placed(set(before))
        p, q = held[0][0], held[1][0]
        crossing = [m.technical.order_on(p), m.technical.order_on(q)]
        changes = [c for o in crossing for c in m.technical.placing(o, 3)]
        if point == "before_forward":
            _send(victim, signal.SIGSTOP)  # it reads nothing more
            m.technical.commit(changes)
            _send(victim, signal.SIGKILL)
        elif point == "after_forward":
            _send(survivor, signal.SIGSTOP)  # its slice does not come back meanwhile
            already = _forwarded(bizevents_stack, m.group, q)
            m.technical.commit(changes)
            _until(lambda: _forwarded(bizevents_stack, m.group, q) > already, "no forward")
            _send(victim, signal.SIGKILL)
            _send(survivor, signal.SIGCONT)
            assert crossing[0] not in {e.order_id for e in m.reader.poll()}, "published already"
        elif point == "after_publish":
            m.technical.commit(changes)
            _until(lambda: crossing[0] in {e.order_id for e in m.reader.poll()}, "not placed")
            _send(victim, signal.SIGKILL)
        else:
            m.technical.commit(changes)
            m.start(translate__processing_guarantee=guarantee)  # the group rebalances
            time.sleep(0.5)
            _send(victim, signal.SIGKILL)
        victim.process.wait(30)  # type: ignore[union-attr]
        after = m.technical.mixed(9)
        orders = [*before, *crossing, *after]
        events = m.wait_placed(set(orders), timeout=180)
        m.check(events, orders)
        if guarantee == "exactly_once":
            assert len(events) == len(orders)


def test_a_transaction_one_member_gives_up_the_other_gives_up_too(
    bizevents_stack: Endpoints, tmp_path: Path
) -> None:
    """Issue 40: a transaction placing orders on partition p of one member and q of the
    other, whose END counts one order item more on p than capture wrote there. The
    owner of p gives it up once its partitions passed it (an END short of changes) and
    announces it through the exchange; the owner of q gives up its own parts of it,
    naming p, instead of waiting for p's slice with every later transaction of its
    partitions behind it: the orders placed afterwards, on every partition, come out,
    and each part of the short one is dead-lettered once with its reason."""
    with members(bizevents_stack, tmp_path) as m:
        m.start()
        m.start()
        held = _wait_held(m.workers, m.group)
        p, q = held[0][0], held[1][0]
        short = [m.technical.order_on(p), m.technical.order_on(q)]
        changes = [c for o in short for c in m.technical.placing(o, 2)]
        m.technical.commit(changes, more=("store.order_items", p))
        after = m.technical.mixed(9)
        events = m.wait_placed(set(after))
        m.check(events, after)
        dead = _dead_letters(cast(Db, m.db), f"{m.server}.dlq", len(changes) + 1)
    reasons = [reason for _, reason in dead]
    assert len(reasons) == len(changes) + 1, reasons  # each change and the END, once
    assert sum("but only" in r for r in reasons) >= len(changes) // 2, reasons
    gave_up = f"the owner of partition {p} gave transaction "
    assert sum(r.startswith(gave_up) for r in reasons) >= len(changes) // 2, reasons


@pytest.mark.parametrize("by_partition", ["true", "false"])
def test_a_worker_catching_up_holds_back_what_runs_ahead(
    bizevents_stack: Endpoints, tmp_path: Path, by_partition: str
) -> None:
    """A backlog of 150 transactions written before the worker starts, with
    `transactions.max_open` at 60 and batches of 10 records: every order is placed and
    nothing is dead-lettered, by partition and with one member reading everything. The
    client hands out one partition's fetched records before the next one's: without
    holding back the partitions past the oldest open transaction, the worker read a
    whole partition of the backlog before the ENDs that close its transactions (or the
    ENDs first), held them all open, and dead-lettered the oldest as more than 60 open
    at once."""
    with members(bizevents_stack, tmp_path) as m:
        orders = m.technical.mixed(150)
        worker = m.start(
            transactions__max_open="60",
            transactions__max_records="10",
            transactions__by_partition=by_partition,
        )
        events = m.wait_placed(set(orders))
        m.check(events, orders)
        assert '"dead-lettered"' not in worker.log.read_text(), worker.tail()


def test_two_members_catching_up_wait_for_each_other(
    bizevents_stack: Endpoints, tmp_path: Path
) -> None:
    """Two members by partition start on a backlog of 300 transactions, two thirds of
    them across partitions, with `transactions.max_open` at 60: every order is placed
    once and nothing is dead-lettered. A member's crossing transactions wait for the
    other member's slices, so a member ahead holds them open as long as the other is
    behind; once half of `max_open` are open it reads only the exchange (its own
    partitions are past the oldest) until the other catches up, and the one behind
    reads what it lacks. Without holding back the test fails: the members read their
    backlogs at their own pace and dead-letter transactions as more than 60 open."""
    with members(bizevents_stack, tmp_path) as m:
        orders = m.technical.mixed(300)
        settings = {"transactions__max_open": "60", "transactions__max_records": "10"}
        workers = [m.start(**settings), m.start(**settings)]
        events = m.wait_placed(set(orders), timeout=180)
        m.check(events, orders)
        for w in workers:
            assert '"dead-lettered"' not in w.log.read_text(), w.tail()
