"""Holding back what runs ahead while catching up (``txpacing.Frontier``): once half of
``max_open`` transactions are open, the partitions past the oldest open transaction wait,
so a member catching up a backlog never holds more than ``max_open`` open, whatever the
client hands out first; and without holding back the same reading gives transactions up."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from bizevents.contracts.envelope import ChangeEvent, PgPosition, Source, Transaction
from bizevents.contracts.technical.transaction import TransactionRecord
from bizevents.translators.assembly import Abandoned, Assembler, AssemblyLimits, Part, Ready
from bizevents.translators.metrics import WorkerStats
from bizevents.translators.records import SourceRecord
from bizevents.translators.txcheckpoint import TP
from bizevents.translators.txpacing import Frontier
from bizevents.translators.txproducer import read_held

TX_TOPIC: TP = ("srv.transaction", 0)
SOURCES: list[TP] = [("srv.s.orders", p) for p in range(3)]


def backlog(touched: list[list[int]]) -> dict[TP, deque[Part]]:
    """Per partition, in commit order, the parts of one transaction per entry of
    ``touched`` (a change on each partition it lists), as a capture writes them."""
    log: dict[TP, deque[Part]] = {tp: deque() for tp in [*SOURCES, TX_TOPIC]}
    for i, partitions in enumerate(touched):
        tx = f"{500 + i}:{1000 + 10 * i}"
        for order, p in enumerate(partitions, 1):
            tp = SOURCES[p]
            event = ChangeEvent(
                "c",
                Source("postgresql", "srv", "db", "s", "orders", 0, position=PgPosition(order)),
                after={"id": i},
                key={"id": i},
                transaction=Transaction(tx, order, order),
            )
            origin = SourceRecord(tp[0], tp[1], len(log[tp]), b"k", b"v")
            log[tp].append(Part(origin.offset, origin, change=event))
        end = TransactionRecord("END", tx, 0, len(partitions), (("s.orders", len(partitions)),))
        origin = SourceRecord(TX_TOPIC[0], 0, len(log[TX_TOPIC]), b"k", b"v")
        log[TX_TOPIC].append(Part(origin.offset, origin, record=end))
    return log


def catch_up(
    log: dict[TP, deque[Part]],
    frontier: Frontier | None,
    choose: st.DataObject | None,
    batch: int,
    max_open: int = 10**6,
) -> tuple[list[Ready | Abandoned], int]:
    """A member reads ``log`` in batches of at most ``batch`` parts of one partition
    among those ``frontier`` does not hold back, its assembler giving up the oldest
    beyond ``max_open``: the first of an order of preference ``choose`` draws (as a
    client handing out one partition's whole fetch before the next one's does), or at
    times any, ``choose`` drawing; without ``choose``, the transaction topic first,
    then each technical partition. Returns what it released and the most open."""
    assembler = Assembler(
        {"s.orders"}.__contains__, AssemblyLimits(max_open=max_open), sources=SOURCES
    )
    out: list[Ready | Abandoned] = []
    most = 0
    preferred = [TX_TOPIC, *SOURCES]
    if choose is not None:
        preferred = choose.draw(st.permutations(preferred))
    while any(log.values()):
        left = [tp for tp in preferred if log[tp]]
        read, most_records = None, batch
        if frontier is not None:
            read, most_records = frontier.turn(assembler, [TX_TOPIC, *SOURCES], batch)
        # the client hands out records of partitions with some left
        readable = [tp for tp in left if read is None or tp in read]
        assert readable, "the member would wait for parts that cannot come"
        tp = readable[0]
        if choose is not None and choose.draw(st.booleans()):
            tp = choose.draw(st.sampled_from(readable))
        n = most_records if choose is None else choose.draw(st.integers(1, most_records))
        for _ in range(min(n, len(log[tp]))):
            part = log[tp].popleft()
            out += assembler.feed(part)
            most = max(most, assembler.open_transactions)
        if frontier is not None:
            frontier.read(tp, part.tx_id)
    return out, most


def _check(out: list[Ready | Abandoned], transactions: int) -> None:
    assert not [o for o in out if isinstance(o, Abandoned)], out
    released = [o.tx_id for o in out if isinstance(o, Ready)]
    assert len(released) == transactions and len(set(released)) == transactions


@settings(max_examples=100, deadline=None)
@given(
    touched=st.lists(
        st.lists(st.integers(0, 2), min_size=1, max_size=4), min_size=45, max_size=120
    ),
    data=st.data(),
)
def test_a_member_catching_up_never_holds_more_than_max_open(
    touched: list[list[int]], data: st.DataObject
) -> None:
    """Whatever partition the client hands out next and however much of it (at most a
    batch), among those not held back: every transaction is released once, in commit
    order, none given up, and never more than ``max_open`` open."""
    touched = [sorted(t) for t in touched]
    max_open, batch = 20, 3
    frontier = Frontier([*SOURCES, TX_TOPIC], max_open)
    out, most = catch_up(backlog(touched), frontier, data, batch)
    _check(out, len(touched))
    assert most <= max_open
    released = [str(o.tx_id) for o in out if isinstance(o, Ready)]
    assert released == sorted(released, key=lambda t: int(t.split(":")[1]))


def test_without_holding_back_whole_partitions_give_transactions_up() -> None:
    """The transaction topic read whole first, then each technical partition: 100 ENDs
    open at once with max_open 20, and the oldest are given up though their changes
    were coming; holding back, the same order of preference releases them all."""
    touched = [[i % 3, (i + 1) % 3] for i in range(100)]
    out, most = catch_up(backlog(touched), None, None, 50)
    assert most == 100  # the ENDs first: every transaction open
    out, _ = catch_up(backlog(touched), None, None, 50, max_open=20)
    assert sum(isinstance(o, Abandoned) for o in out) >= 80, out
    out, most = catch_up(backlog(touched), Frontier([*SOURCES, TX_TOPIC], 20), None, 3, 20)
    _check(out, 100)
    assert most <= 20


def test_nothing_held_below_half_of_max_open_or_without_positions() -> None:
    """Fewer than half of ``max_open`` open: everything is read, a whole batch; from
    half, the partitions past the oldest open transaction wait and a turn reads no more
    records than may still open; an id without a commit position open (MySQL's GTIDs):
    everything is read (``max_open`` alone applies)."""
    frontier = Frontier([*SOURCES, TX_TOPIC], 4)
    exchange = ("g.exchange", 0)
    assigned = [*SOURCES, TX_TOPIC, exchange]
    assembler = Assembler({"s.orders"}.__contains__, AssemblyLimits(max_open=4), sources=SOURCES)
    log = backlog([[0], [1], [2]])
    assembler.feed(log[SOURCES[0]][0])
    frontier.read(SOURCES[0], "500:1000")
    frontier.read(SOURCES[1], "600:9000")
    assert frontier.turn(assembler, assigned, 50) == (None, 50)  # one open, fewer than 2
    assembler.feed(log[SOURCES[1]][0])
    assert assembler.oldest_position() == 1000
    read, most = frontier.turn(assembler, assigned, 50)
    assert read == [SOURCES[0], SOURCES[2], TX_TOPIC, exchange]  # 1 is past 1000
    assert most == 2  # two more may open before 4
    end = TransactionRecord("END", "uuid:7", 0, 1, (("s.orders", 1),))
    origin = SourceRecord(TX_TOPIC[0], 0, 0, b"k", b"v")
    assembler.feed(Part(0, origin, record=end))
    assert assembler.oldest_position() is None
    assert frontier.turn(assembler, assigned, 50) == (None, 50)
    assert frontier.turn(None, assigned, 50) == (None, 50)  # nothing assembled yet


def test_the_read_asks_the_client_for_what_is_not_held_and_shows_it() -> None:
    """``read_held`` asks the client for the partitions not held back, at most the
    records a turn may read, and leaves the open transactions and the partitions held
    in the worker's figures (its metrics)."""

    class Client:  # the two calls of aiokafka's consumer read_held makes
        def __init__(self) -> None:
            self.asked: list[tuple[tuple[TP, ...], int]] = []

        def assignment(self) -> set[TP]:
            return {*SOURCES, TX_TOPIC}

        async def getmany(
            self, *partitions: TP, timeout_ms: int, max_records: int
        ) -> dict[TP, list[object]]:
            self.asked.append((tuple(sorted(partitions)), max_records))
            return {}

    frontier = Frontier([*SOURCES, TX_TOPIC], 4)
    assembler = Assembler({"s.orders"}.__contains__, AssemblyLimits(max_open=4), sources=SOURCES)
    log = backlog([[0], [1]])
    stats, client = WorkerStats("g"), Client()
    asyncio.run(read_held(client, frontier, assembler, stats, 50))
    assert client.asked == [((), 50)] and (stats.tx_open, stats.tx_held) == (0, 0)
    for tp in SOURCES[:2]:
        assembler.feed(log[tp][0])
    frontier.read(SOURCES[0], "500:1000")
    frontier.read(SOURCES[1], "501:1010")
    asyncio.run(read_held(client, frontier, assembler, stats, 50))
    assert client.asked[-1] == (tuple(sorted([SOURCES[0], SOURCES[2], TX_TOPIC])), 2)
    assert (stats.tx_open, stats.tx_held) == (2, 1)


def test_a_transaction_first_in_commit_order_that_waits_a_minute_says_for_what() -> None:
    """A member reading only partition 0: a transaction across partitions 0 and 1 whose
    END and own change came waits for partition 1's slice; once it has waited a minute
    the frontier says so (and again a minute later), and nothing once it is released."""
    assembler = Assembler(
        {"s.orders"}.__contains__,
        sources=SOURCES[:1],
        local=lambda tx_id: frozenset({0}),
    )
    log = backlog([[0, 1]])
    end = log[TX_TOPIC][0]
    assert end.record is not None
    counts = (("s.orders", 0, 1), ("s.orders", 1, 1))
    end = replace(end, record=replace(end.record, partition_counts=counts))
    frontier = Frontier([*SOURCES, TX_TOPIC], 100)
    assert frontier.stalled(assembler, 0.0) is None  # nothing open
    assert assembler.feed(log[SOURCES[0]][0]) == []
    assert frontier.stalled(assembler, 1.0) is None  # waiting from now
    assert frontier.stalled(assembler, 60.0) is None
    said = frontier.stalled(assembler, 61.5)
    assert said == ("transaction 500:1000 waits for its END (1 changes in)", 60.5)
    assert assembler.feed(end) == []  # its END: now it waits for partition 1
    assert frontier.stalled(assembler, 62.0) is None  # the same transaction first...
    said = frontier.stalled(assembler, 122.0)  # ... a minute after it was said
    assert said is not None
    assert said[0] == (
        "transaction 500:1000 waits for changes: partition 1 0 of 1 (through the exchange)"
    )
    assert frontier.stalled(assembler, 150.0) is None
    assert frontier.stalled(assembler, 182.5) is not None
    (ready,) = assembler.feed(log[SOURCES[1]][0])  # the slice, as the exchange brings it
    assert isinstance(ready, Ready)
    assert frontier.stalled(assembler, 300.0) is None


def test_waiting_names_an_unended_transaction_and_an_end_short_of_changes() -> None:
    assembler = Assembler({"s.orders"}.__contains__)
    log = backlog([[0, 0], [1]])
    assert assembler.feed(log[SOURCES[1]][0]) == []  # the second's change, no END
    assert assembler.first_open() == "501:1010"
    assert assembler.feed(log[SOURCES[0]][0]) == []  # the first's, commit position lower
    assert assembler.first_open() == "500:1000"
    assert assembler.feed(log[TX_TOPIC][0]) == []  # its END: 2 changes, 1 in
    assert assembler.first_open() == "500:1000"
    assert assembler.waiting("500:1000") == (
        "the END of transaction 500:1000 counts {s.orders: 2} of the tables read, and "
        "{s.orders: 1} arrived"
    )
    assert assembler.waiting("501:1010") == "transaction 501:1010 waits for its END (1 changes in)"
