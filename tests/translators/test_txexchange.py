"""Members that own technical partitions (``transactions.by_partition``), without a
broker: the slices of a transaction across partitions are forwarded once the END and
the slice are in, a member takes only the ENDs of transactions touching its partitions,
an exchanged slice that has not come yet is waited for, and two members reading only
their own partitions and the exchange, in any interleaving, publish every event of the
store's transactions once, as one member reading everything does, in per-key order;
with kills and a member taking over partitions checkpointed at different places, every
event still comes out and nothing is dead-lettered."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from bizevents_store.translators import orders_v3
from hypothesis import given, settings
from hypothesis import strategies as st

from bizevents.contracts.envelope import ChangeEvent
from bizevents.contracts.serde import BusinessSerializer
from bizevents.contracts.technical.routing import partition_for, routing_key
from bizevents.contracts.technical.transaction import TransactionRecord
from bizevents.testing import change
from bizevents.translators import txshare
from bizevents.translators.assembly import Abandoned, Assembler, Checkpoint, Part, Ready
from bizevents.translators.metrics import WorkerStats
from bizevents.translators.records import OutRecord, SourceRecord
from bizevents.translators.settings import RuntimeSettings
from bizevents.translators.txcheckpoint import TP, Point, Progress
from bizevents.translators.txexchange import (
    HEADER_GIVEN_UP,
    HEADER_ORIGIN,
    REASON_LIMIT,
    Slices,
    given_up,
    origin,
)
from bizevents.translators.txplan import TxPlan
from bizevents.translators.txshare import Share
from bizevents.translators.txversions import TxVersions
from tests.envelopes import in_transaction, store_order
from tests.translators.test_routing import _placing
from tests.translators.txharness import EXCHANGE, TX_TOPIC, make_plan

N = 4
MEMBERS = (frozenset({0, 1}), frozenset({2, 3}))


def _partition(event: ChangeEvent) -> int:
    """Where capture routing ``store.orders`` by ``id`` and items by ``order_id`` writes it."""
    row = event.after or event.before or {}
    order = row["id"] if event.source.table == "orders" else row["order_id"]
    return partition_for(routing_key([order]), N)


def _orders_on(partitions: frozenset[int], start: int) -> int:
    """The first order id from ``start`` that capture routes to one of ``partitions``."""
    order = start
    while partition_for(routing_key([order]), N) not in partitions:
        order += 1
    return order


@dataclass
class Store:
    """The topics: technical partitions, the transaction topic, the exchange; what each
    technical record decodes to, by its coordinates."""

    logs: dict[TP, list[SourceRecord]] = field(default_factory=dict)
    decoded: dict[tuple[str, int, int], Any] = field(default_factory=dict)
    #: Every transaction whole, in commit order (what one member reading all releases).
    whole: list[Ready] = field(default_factory=list)

    def write(self, topic: str, partition: int, value: Any, key: bytes | None) -> Part:
        log = self.logs.setdefault((topic, partition), [])
        record = SourceRecord(topic, partition, len(log), key, b"raw")
        log.append(record)
        self.decoded[(topic, partition, record.offset)] = value
        if isinstance(value, TransactionRecord):
            return Part(record.offset, record, record=value)
        return Part(record.offset, record, change=value)


def store_transactions(count: int, seed: int) -> Store:
    """``count`` transactions: a third place one order, a third two orders on partitions
    of different members, a third two orders anywhere and a status change of an earlier
    order; each change written where capture routes it, then the END with its counts."""
    rng = random.Random(seed)
    store = Store()
    for p in range(N):
        store.logs[(EXCHANGE, p)] = []
    order, placed = 1, list[int]()
    for i in range(count):
        tx_id = f"9:{1000 + i}"
        kind = i % 3
        if kind == 1:
            first = _orders_on(MEMBERS[0], order)
            second = _orders_on(MEMBERS[1], max(first, order) + 1)
            orders = [first, second] if rng.random() < 0.5 else [second, first]
        else:
            first = _orders_on(frozenset(range(N)), order)
            orders = [first] if kind == 0 else [first, first + 1]
        order = max(orders) + 1
        changes = [c for o in orders for c in _placing(o, rng.randint(1, 3))]
        if kind == 2 and placed:
            earlier = rng.choice(placed)
            row = store_order(earlier)
            changes.append(change("store.orders", "u", before=row, after={**row, "status": "paid"}))
        placed += orders
        parts = []
        for n, c in enumerate(changes, start=1):
            event = in_transaction(c.event, tx_id, n)  # type: ignore[attr-defined]
            key = repr(sorted((event.key or {}).items())).encode()
            topic = f"shop.{event.source.qualified_table}"
            parts.append(store.write(topic, _partition(event), event, key))
        tables: dict[str, int] = {}
        per_partition: dict[tuple[str, int], int] = {}
        for part in parts:
            assert part.change is not None
            table = part.change.source.qualified_table
            tables[table] = tables.get(table, 0) + 1
            where = (table, part.origin.partition)
            per_partition[where] = per_partition.get(where, 0) + 1
        record = TransactionRecord(
            "END",
            tx_id,
            0,
            len(parts),
            tuple(tables.items()),
            tuple((t, p, n) for (t, p), n in sorted(per_partition.items())),
        )
        end = store.write(TX_TOPIC, 0, record, tx_id.encode())
        store.whole.append(Ready(tx_id, tuple(parts), end))
    return store


class Node:
    """One member owning ``owned``: it reads its partitions, the transaction topic and
    its exchange partitions, as the worker's batch does (decode, slices, assembler,
    share), and forwards what its slices complete."""

    def __init__(
        self,
        plan: TxPlan,
        owned: frozenset[int],
        store: Store,
        points: dict[int, Point] | None = None,
    ) -> None:
        versions = TxVersions(RuntimeSettings(), "tx", plan, WorkerStats("tx"))
        self.share = Share(plan, versions)
        self.share.owned = owned
        mine = {v: (points or {}).get(v, Point()) for v in owned}
        self.assembler, self.next = self.share.start(mine, dict.fromkeys(plan.read_of(owned), 0))
        self.read = Progress(self.next)
        self.store = store
        self.published: list[OutRecord] = []

    def checkpoint(self) -> dict[int, Point]:
        """Each owned partition's checkpoint, as the worker records it after a batch."""
        offsets = self.read.offsets(self.assembler.commit_offset(self.read.seq + 1))
        return self.share.points_after(offsets, self.assembler.checkpoint())

    def step(self, rng: random.Random) -> bool:
        """Read a few records of one partition with something unread; False when none."""
        logs = self.store.logs
        waiting = [tp for tp, at in self.next.items() if at < len(logs[tp])]
        if not waiting:
            return False
        tp = rng.choice(waiting)
        start = self.next[tp]
        records = logs[tp][start : start + rng.randint(1, 4)]
        self.next[tp] = self.read.next[tp] = start + len(records)
        slices = self.share.slices
        assert slices is not None
        outcomes: list[Any] = []
        for r in records:
            seq = self.read.arrived(tp, r.offset)
            notice = given_up(r) if tp[0] == EXCHANGE else None
            if notice is not None:
                outcomes += self.share.hear(notice, self.assembler)
                continue
            read = self.share.exchanged(r) if tp[0] == EXCHANGE else r
            if read is None:
                continue
            value = self.store.decoded[(read.topic, read.partition, read.offset)]
            if isinstance(value, TransactionRecord):
                part = Part(seq, read, record=value)
            else:
                part = Part(seq, read, change=value)
            if slices.take(part):
                outcomes += self.assembler.feed(part)
        result, _ = self.share.translate(outcomes)
        self.published += result.records
        for sends in self.share.forwards(outcomes).values():
            for topic, q, key, value_bytes, headers in sends:
                log = logs[(topic, q)]
                log.append(SourceRecord(topic, q, len(log), key, value_bytes, list(headers)))
        return True


def reference(plan: TxPlan, store: Store) -> list[OutRecord]:
    """What one member reading everything publishes: each transaction whole."""
    assembler = Assembler(plan.core.reads)
    out: list[OutRecord] = []
    for ready in store.whole:
        for part in [*ready.parts, ready.end]:
            assert part is not None
            for outcome in assembler.feed(part):
                assert isinstance(outcome, Ready)
                out += plan.core.translate(outcome)
    return out


def _by_key(records: Sequence[OutRecord]) -> dict[bytes | None, list[str]]:
    found: dict[bytes | None, list[str]] = {}
    for r in records:
        found.setdefault(r.key, []).append(r.event_id)
    return found


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_two_members_publish_every_event_once_in_key_order(
    serializer: BusinessSerializer, seed: int
) -> None:
    """Two members each reading only its partitions, the transaction topic and its
    exchange partitions, interleaved at random: every event of the whole transactions
    once (same id, same value: OrderPlaced with its items and true total), each key's
    events in commit order, and a third of the transactions crossed the members."""
    plan = make_plan([orders_v3], serializer, N, by_partition=True)
    store = store_transactions(30, seed)
    crossing = sum(
        1
        for r in store.whole
        if all(any(p.origin.partition in m for p in r.parts) for m in MEMBERS)
    )
    assert crossing >= len(store.whole) // 3
    nodes = [Node(plan, owned, store) for owned in MEMBERS]
    rng = random.Random(seed)
    while any([node.step(rng) for node in rng.sample(nodes, len(nodes))]):
        pass
    published = [r for node in nodes for r in node.published]
    expected = reference(plan, store)
    assert all(not r.dead_letter for r in published)
    assert sorted((r.event_id, r.value) for r in published) == sorted(
        (r.event_id, r.value) for r in expected
    )
    mine = {key: ids for node in nodes for key, ids in _by_key(node.published).items()}
    assert mine == _by_key(expected)


def _short_on(store: Store, member: frozenset[int]) -> tuple[Ready, int]:
    """The first transaction across the members, its END made to count one change more
    on one of ``member``'s partitions than capture wrote there (its slice is short)."""
    ready = next(
        r
        for r in store.whole
        if all(any(p.origin.partition in m for p in r.parts) for m in MEMBERS)
    )
    assert ready.end is not None and ready.end.record is not None
    end = ready.end.record
    assert end.partition_counts is not None and end.data_collections is not None
    at = min(p.origin.partition for p in ready.parts if p.origin.partition in member)
    table = next(t for t, p, _ in end.partition_counts if p == at)
    counts = tuple(
        (t, p, c + 1 if (t, p) == (table, at) else c) for t, p, c in end.partition_counts
    )
    tables = tuple((t, c + 1 if t == table else c) for t, c in end.data_collections)
    assert end.event_count is not None
    longer = TransactionRecord("END", end.id, 0, end.event_count + 1, tables, counts)
    where = ready.end.origin
    store.decoded[(where.topic, where.partition, where.offset)] = longer
    return ready, at


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_a_transaction_one_owner_gives_up_is_given_up_by_the_others(
    serializer: BusinessSerializer, seed: int
) -> None:
    """Issue 40: a transaction across the members whose END counts one change more on a
    partition of the first member than arrived there. That member gives it up once its
    partitions passed it, and announces it through the exchange: the other member
    dead-letters its own parts of it, naming the partition that gave it up, instead of
    waiting for the slice for ever with every later transaction behind it. Every other
    transaction's events come out once, in key order."""
    plan = make_plan([orders_v3], serializer, N, by_partition=True)
    store = store_transactions(30, seed)
    expected_all = reference(plan, store)
    short, at = _short_on(store, MEMBERS[0])
    gone = {r.event_id for r in plan.core.translate(short)}
    nodes = [Node(plan, owned, store) for owned in MEMBERS]
    rng = random.Random(seed)
    while any([node.step(rng) for node in rng.sample(nodes, len(nodes))]):
        pass
    reasons = {
        i: [dict(r.headers)["bizevents.dlq.reason"].decode() for r in n.published if r.dead_letter]
        for i, n in enumerate(nodes)
    }
    assert reasons[0] and all("but only" in why and short.tx_id in why for why in reasons[0])
    assert reasons[1] and all(
        why.startswith(f"the owner of partition {at} gave transaction {short.tx_id} up")
        for why in reasons[1]
    )
    dead = [r for n in nodes for r in n.published if r.dead_letter]
    # each change of it once, by the member owning its partition (and the END once)
    assert len(dead) == len(short.parts) + 1
    assert {dict(r.headers)["bizevents.transaction.id"] for r in dead} == {short.tx_id.encode()}
    events = [r for n in nodes for r in n.published if not r.dead_letter]
    expected = [r for r in expected_all if r.event_id not in gone]
    assert sorted((r.event_id, r.value) for r in events) == sorted(
        (r.event_id, r.value) for r in expected
    )
    by_key = {
        key: ids
        for node in nodes
        for key, ids in _by_key([r for r in node.published if not r.dead_letter]).items()
    }
    assert by_key == _by_key(expected)


def test_a_given_up_slice_is_announced_to_the_other_partitions_once() -> None:
    """Issue 40: the owner of partitions 0 and 1 gives up a transaction its END says
    touched 0, 1 and 3: one notice from partition 0 to 1 and 3 (to its own 1 too, as
    forwards go, whoever owns them by then), key the id, value the reason; a later part
    of it given up, and a transaction another owner gave up, announce nothing."""
    slices = Slices(frozenset({0, 1}), lambda t: True, EXCHANGE, 100)
    end = _end("9:5", [("store.order_items", 0, 2), ("store.order_items", 1, 1), ("x.y", 3, 1)])
    assert slices.take(end)
    assert slices.take(_item("9:5", 1, 0))
    slices.drain()
    slices.settle([Abandoned("9:5", (), "short")])
    (notices,) = slices.drain().values()
    assert notices == [(EXCHANGE, q, b"9:5", b"short", [(HEADER_GIVEN_UP, b"0")]) for q in (1, 3)]
    copy = SourceRecord(EXCHANGE, 1, 0, b"9:5", b"short", [(HEADER_GIVEN_UP, b"0")])
    notice = given_up(copy)
    assert notice is not None and (notice.tx_id, notice.reason, notice.partition) == (
        "9:5",
        "short",
        0,
    )
    slices.settle([Abandoned("9:5", (), "short (a part that came later)")])
    assert slices.drain() == {}
    assert slices.take(_end("9:6", [("store.order_items", 0, 1), ("store.order_items", 2, 1)]))
    slices.hear(given_up(SourceRecord(EXCHANGE, 0, 1, b"9:6", b"x", [(HEADER_GIVEN_UP, b"2")])))  # type: ignore[arg-type]
    slices.settle([Abandoned("9:6", (), "the owner of partition 2 gave transaction 9:6 up: x")])
    assert slices.drain() == {}
    long = given_up(SourceRecord(EXCHANGE, 0, 4, b"9:8", b"x" * 10**6, [(HEADER_GIVEN_UP, b"1")]))
    assert long is not None and long.reason == "x" * REASON_LIMIT
    # a forwarded change is no notice, nor is a notice whose bytes do not read as one
    assert given_up(SourceRecord(EXCHANGE, 0, 2, b"k", b"v", [(HEADER_ORIGIN, b"t:0:1")])) is None
    assert given_up(SourceRecord(EXCHANGE, 0, 3, b"9:7", b"v", [(HEADER_GIVEN_UP, b"x")])) is None


def test_an_assembler_gives_up_what_another_owner_gave_up() -> None:
    """Issue 40: an open transaction given up from outside is dead-lettered and the
    transactions behind it released; one not seen yet has its parts dead-lettered as
    they come; one released already is left alone."""
    assembler = Assembler(lambda t: True)
    assert assembler.feed(_item("9:5", 1, 0)) == []
    assert assembler.feed(_end("9:5", [("store.order_items", 0, 2)])) == []
    assert assembler.feed(_item("9:6", 1, 0)) == []
    assert assembler.feed(_end("9:6", [("store.order_items", 0, 1)])) == []
    gone, ready = assembler.abandon("9:5", "elsewhere")
    assert isinstance(gone, Abandoned) and gone.reason == "elsewhere" and len(gone.parts) == 2
    assert isinstance(ready, Ready) and ready.tx_id == "9:6"
    assert assembler.abandon("9:6", "late") == []
    assert assembler.abandon("9:7", "before") == []
    (later,) = assembler.feed(_item("9:7", 1, 0))
    assert isinstance(later, Abandoned) and later.reason == "before (a part that came later)"


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_member_taking_over_partitions_checkpointed_apart_publishes_every_event(
    serializer: BusinessSerializer, seed: int
) -> None:
    """Issue 40: members owning 0, 1 and {2, 3} record their checkpoints after some of
    their batches; the first two are killed at a random point, and one member takes 0
    and 1 over from checkpoints at different places (kills and re-forwards, at least
    once). Every event of the whole transactions comes out (some twice, as at least
    once publishes again what followed a checkpoint), the first of each in key order,
    and nothing is dead-lettered: parts read again of a transaction that one of the
    partitions released are duplicates, not transactions that never ended."""
    plan = make_plan([orders_v3], serializer, N, by_partition=True)
    store = store_transactions(30, seed)
    rng = random.Random(seed)
    state: dict[int, Point] = {}
    nodes = [Node(plan, frozenset({v}), store) for v in (0, 1)]
    others = Node(plan, MEMBERS[1], store)
    published: list[OutRecord] = []
    kill_at, steps = rng.randint(20, 120), 0
    while True:
        live = [*nodes, others]
        moved = False
        for node in rng.sample(live, len(live)):
            if node.step(rng):
                moved = True
                if rng.random() < 0.5:
                    state.update(node.checkpoint())
        steps += 1
        if steps == kill_at:
            for node in nodes:
                published += node.published
            nodes = [Node(plan, MEMBERS[0], store, state)]
        elif not moved and steps > kill_at:
            break
    published += [r for node in [*nodes, others] for r in node.published]
    assert [r for r in published if r.dead_letter] == []
    first: dict[tuple[str, bytes | None], OutRecord] = {}
    for r in published:
        first.setdefault((r.event_id, r.value), r)
    expected = reference(plan, store)
    assert sorted((r.event_id, r.value) for r in first.values()) == sorted(
        (r.event_id, r.value) for r in expected
    )
    assert _by_key(list(first.values())) == _by_key(expected)


def _end(tx_id: str, counts: Sequence[tuple[str, int, int]]) -> Part:
    tables: dict[str, int] = {}
    for table, _, n in counts:
        tables[table] = tables.get(table, 0) + n
    total = sum(tables.values())
    record = TransactionRecord("END", tx_id, 0, total, tuple(tables.items()), tuple(counts))
    return Part(99, SourceRecord(TX_TOPIC, 0, 99, None, b"END"), record=record)


def _item(tx_id: str, n: int, partition: int) -> Part:
    event = in_transaction(_placing(7, 3)[n].event, tx_id, n + 1)  # type: ignore[attr-defined]
    return Part(n, SourceRecord("shop.store.order_items", partition, n, b"k", b"v"), change=event)


def test_a_slice_is_forwarded_once_its_end_and_changes_are_in() -> None:
    slices = Slices(frozenset({0}), lambda t: t == "store.order_items", EXCHANGE, 100)
    end = _end("9:5", [("store.order_items", 0, 2), ("store.order_items", 3, 1), ("x.y", 1, 4)])
    assert slices.take(_item("9:5", 1, 0))
    assert slices.take(end)
    assert slices.drain() == {}  # one change of the slice still to come
    assert slices.take(_item("9:5", 2, 0))
    (forwards,) = slices.drain().values()
    # to partition 3 only (x.y is not read), the original bytes and coordinates
    assert [(t, q, k, v) for t, q, k, v, _ in forwards] == [(EXCHANGE, 3, b"k", b"v")] * 2
    copy = SourceRecord(EXCHANGE, 3, 0, b"k", b"v", list(forwards[1][4]))
    assert copy.headers[-1][0] == HEADER_ORIGIN
    assert origin(copy) == SourceRecord("shop.store.order_items", 0, 2, b"k", b"v", [])
    slices.take(_item("9:5", 2, 0))  # read again: forwarded already
    assert slices.drain() == {}


def test_an_end_elsewhere_is_not_taken_and_one_partition_forwards_nothing() -> None:
    slices = Slices(frozenset({0}), lambda t: True, EXCHANGE, 100)
    assert not slices.take(_end("9:6", [("store.order_items", 2, 1)]))
    assert slices.take(_item("9:7", 1, 0))
    assert slices.take(_end("9:7", [("store.order_items", 0, 1)]))
    assert slices.drain() == {}


def test_an_exchanged_slice_is_waited_for_past_the_local_partitions() -> None:
    """Every partition the member reads has passed the transaction, one slice is
    elsewhere: it waits for the exchange (a member reading everything would give the
    transaction up as short), and releases it whole when the slice comes."""
    assembler = Assembler(
        lambda t: True,
        sources=[("shop.store.order_items", 0)],
        local=lambda tx_id: frozenset({0}),
    )
    assert assembler.feed(_item("9:5", 1, 0)) == []
    assert (
        assembler.feed(_end("9:5", [("store.order_items", 0, 1), ("store.order_items", 3, 1)]))
        == []
    )
    assert assembler.feed(_item("9:6", 1, 0)) == []
    (ready,) = assembler.feed(_item("9:5", 2, 3))
    assert isinstance(ready, Ready) and len(ready.parts) == 2


def test_a_partition_released_before_waits_for_its_slice_by_the_exchange() -> None:
    """Owned partition 0's checkpoint released 9:4 and 9:5, partition 3's did not (taken
    over from members that had got to different places): 9:4, on 0 alone, is not
    taken; 9:5 is, for 3, with nothing forwarded from 0 (its owner forwarded it before
    releasing it), and it waits for 0's slice from the exchange though both partitions
    read have passed it (0's reading starts past it)."""
    slices = Slices(
        frozenset({0, 3}), lambda t: True, EXCHANGE, 100, lambda v, tx: v == 0 and tx < "9:6"
    )
    sources = [("shop.store.order_items", 0), ("shop.store.order_items", 3)]
    assembler = Assembler(lambda t: True, sources=sources, local=slices.local)
    assert not slices.take(_end("9:4", [("store.order_items", 0, 1)]))
    end = _end("9:5", [("store.order_items", 0, 1), ("store.order_items", 3, 1)])
    assert slices.take(end)
    assert assembler.feed(end) == []
    for part in (_item("9:5", 2, 3), _item("9:6", 1, 0), _item("9:6", 2, 3)):
        assert slices.take(part)
        assert assembler.feed(part) == []
    assert list(slices.drain()) == [3]  # 3's slice to 0, none of 0's
    (ready,) = assembler.feed(_item("9:5", 1, 0))  # from the exchange
    assert isinstance(ready, Ready) and ready.tx_id == "9:5" and len(ready.parts) == 2


def test_a_forward_to_a_partition_read_here_is_not_decoded_again(
    serializer: BusinessSerializer,
) -> None:
    """A member owning partitions 0 and 3 forwards 3's slices to 0 too (its checkpoints
    may pass a transaction at different places): the copy of a change at or past where
    it started reading partition 3 is not decoded (it reads that change itself); one
    from before that start is, as its slice; one of a partition it does not read is."""
    plan = make_plan([orders_v3], serializer, N, by_partition=True)
    share = Share(plan, TxVersions(RuntimeSettings(), "tx", plan, WorkerStats("tx")))
    share.owned = frozenset({0, 3})
    start = {tp: 5 for tp in plan.read_of(share.owned)}
    share.start({0: Point(), 3: Point()}, start)
    topic = "shop.store.order_items"

    def copy(partition: int, offset: int) -> SourceRecord:
        where = f"{topic}:{partition}:{offset}".encode()
        return SourceRecord(EXCHANGE, 0, 9, b"k", b"v", [(HEADER_ORIGIN, where)])

    assert share.exchanged(copy(3, 5)) is None
    assert share.exchanged(copy(3, 6)) is None
    assert share.exchanged(copy(3, 4)) == SourceRecord(topic, 3, 4, b"k", b"v", [])
    assert share.exchanged(copy(1, 7)) == SourceRecord(topic, 1, 7, b"k", b"v", [])


def test_a_slice_forwarded_to_two_partitions_owned_here_is_decoded_once(
    serializer: BusinessSerializer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction on partitions 0, 1 and 3: partition 1's owner forwards its slice to 0
    and to 3. A member owning both gets each change twice and decodes it once (the
    second copy would be dropped as a duplicate); after a new start, or once the copy is
    forgotten (the newest ``COPIES_KEPT``), it decodes it again."""
    monkeypatch.setattr(txshare, "COPIES_KEPT", 2)
    plan = make_plan([orders_v3], serializer, N, by_partition=True)
    share = Share(plan, TxVersions(RuntimeSettings(), "tx", plan, WorkerStats("tx")))
    share.owned = frozenset({0, 3})
    share.start({0: Point(), 3: Point()}, {tp: 0 for tp in plan.read_of(share.owned)})
    topic = "shop.store.order_items"

    def copy(to: int, offset: int) -> SourceRecord:
        where = f"{topic}:1:{offset}".encode()
        return SourceRecord(EXCHANGE, to, 9, b"k", b"v", [(HEADER_ORIGIN, where)])

    assert share.exchanged(copy(0, 7)) == SourceRecord(topic, 1, 7, b"k", b"v", [])
    assert share.exchanged(copy(3, 7)) is None
    assert share.exchanged(copy(3, 8)) is not None
    assert share.exchanged(copy(0, 8)) is None
    assert share.exchanged(copy(0, 9)) is not None  # 7 forgotten: two are kept
    assert share.exchanged(copy(3, 7)) is not None
    share.start({0: Point(), 3: Point()}, {tp: 0 for tp in plan.read_of(share.owned)})
    assert share.exchanged(copy(3, 9)) is not None


def _taken_over(serializer: BusinessSerializer, parts: list[Part]) -> tuple[Share, list[Any]]:
    """A member that took over partitions 0 and 2, whose checkpoints released up to 9:20
    and 9:10, fed ``parts`` (those it takes): its share and the outcomes."""
    plan = make_plan([orders_v3], serializer, N, by_partition=True)
    share = Share(plan, TxVersions(RuntimeSettings(), "tx", plan, WorkerStats("tx")))
    share.owned = frozenset({0, 2})
    mine = {v: Point(released=Checkpoint(position)) for v, position in ((0, 20), (2, 10))}
    assembler, _ = share.start(mine, dict.fromkeys(plan.read_of(share.owned), 0))
    outcomes: list[Any] = []
    for part in parts:
        if share.take(part):
            outcomes += assembler.feed(part)
    return share, outcomes


def test_parts_of_a_transaction_released_at_their_partition_are_not_dead_lettered(
    serializer: BusinessSerializer,
) -> None:
    """Issue 40: a member takes over partitions 0 and 2, whose checkpoints released up to
    9:20 and 9:10. 9:15 was on 0 and 1: its END is not taken (the partition of this
    member it touches released it), and 0's parts of it, read again from 0's checkpoint,
    are given up as never ended once a later END comes: they are duplicates, not dead
    letters. A part of a transaction 0 did not release is still dead-lettered."""
    parts = [
        _item("9:15", 1, 0),
        _end("9:15", [("store.order_items", 0, 1), ("store.order_items", 1, 1)]),
        _item("9:25", 1, 0),  # never ends
        _item("9:30", 2, 2),
        _end("9:30", [("store.order_items", 2, 1)]),
    ]
    share, outcomes = _taken_over(serializer, parts)
    given_up = [o for o in outcomes if isinstance(o, Abandoned)]
    assert [o.tx_id for o in given_up] == ["9:15", "9:25"]
    result, _ = share.translate(outcomes)
    dead = [r for r in result.records if r.dead_letter]
    assert [dict(r.headers)["bizevents.dlq.reason"] for r in dead] == [
        b"transaction 9:25 never ended: the END of a transaction committed after it "
        b"arrived, and none of its own"
    ]


def _begin(tx_id: str) -> Part:
    record = TransactionRecord("BEGIN", tx_id, 0, None, (), None)
    return Part(98, SourceRecord(TX_TOPIC, 0, 98, None, b"BEGIN"), record=record)


def test_a_copy_of_the_begin_of_a_transaction_given_up_is_not_dead_lettered(
    serializer: BusinessSerializer,
) -> None:
    """The fault suite's MariaDB run by partition: a member took over partitions 0 and
    2 (checkpoints released up to 9:20 and 9:10); a copy of 9:14's change on 0 (capture
    re-sends after a reconnect) waited and was given up as never ended, dropped as a
    duplicate (0 released 9:14). Then the copy of 9:14's BEGIN came: a part after the
    giving up, whose home (its id's hash) is partition 2, which had not released 9:14:
    dead-lettered, though the transaction's events were all out. A BEGIN carries no
    change: one coming after its transaction was given up is nothing to set aside."""
    import zlib

    assert zlib.crc32(b"9:14") % N == 2  # the BEGIN's home is partition 2
    parts = [
        _item("9:14", 1, 0),  # a copy: 0 released 9:14
        _item("9:30", 2, 2),
        _end("9:30", [("store.order_items", 2, 1)]),
        _begin("9:14"),  # the copy of its BEGIN, after the giving up
        _end("9:25", [("store.order_items", 1, 1)]),  # another member's, not taken
    ]
    share, outcomes = _taken_over(serializer, parts)
    assert [o.tx_id for o in outcomes if isinstance(o, Abandoned)] == ["9:14"]
    result, _ = share.translate(outcomes)
    assert [r for r in result.records if r.dead_letter] == []
    assert [o.tx_id for o in outcomes if isinstance(o, Ready)] == ["9:30"]
