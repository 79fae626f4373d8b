"""The transaction assembler: complete transactions in commit order, duplicates dropped,
and each bad case (never ended, counts that do not match, no transaction block, limits)
dead-lettered with its reason."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bizevents.contracts.envelope import ChangeEvent, PgPosition, Source, Transaction
from bizevents.contracts.technical.transaction import TransactionRecord
from bizevents.translators.assembly import (
    Abandoned,
    Assembler,
    AssemblyLimits,
    Checkpoint,
    Part,
    Ready,
    commit_position,
)
from bizevents.translators.records import SourceRecord

READS = frozenset({"s.orders", "s.items"})


class Log:
    """Parts with increasing offsets, as the repartition topic would hold them."""

    def __init__(self) -> None:
        self.offset = 0

    def _origin(self, topic: str) -> SourceRecord:
        self.offset += 1
        return SourceRecord(topic, 0, self.offset, b"k", b"v")

    def change(
        self, tx: str | None, order: int, table: str = "s.orders", dc: int = 1, op: str = "c"
    ) -> Part:
        schema, name = table.split(".")
        event = ChangeEvent(
            op,  # type: ignore[arg-type]
            Source("postgresql", "srv", "db", schema, name, 0, position=PgPosition(order)),
            after={"id": order},
            key={"id": order},
            transaction=None if tx is None else Transaction(tx, order, dc),
        )
        origin = self._origin(f"srv.{table}")
        return Part(origin.offset, origin, change=event)

    def end(self, tx: str, **counts: int) -> Part:
        collections = tuple((f"s.{t}", n) for t, n in counts.items())
        record = TransactionRecord("END", tx, 0, sum(counts.values()), collections)
        origin = self._origin("srv.transaction")
        return Part(origin.offset, origin, record=record)

    def begin(self, tx: str) -> Part:
        origin = self._origin("srv.transaction")
        return Part(origin.offset, origin, record=TransactionRecord("BEGIN", tx, 0))


def _feed(assembler: Assembler, parts: list[Part]) -> list[Ready | Abandoned]:
    out: list[Ready | Abandoned] = []
    for p in parts:
        out += assembler.feed(p)
    return out


def _assembler(**limits: int) -> Assembler:
    return Assembler(READS.__contains__, AssemblyLimits(**limits))


def test_complete_in_commit_order_whatever_the_arrival() -> None:
    """Changes before or after the END, across tables: released once, sorted by order."""
    log = Log()
    parts = [
        log.change("1:10", 2, "s.items"),
        log.begin("1:10"),
        log.end("1:10", orders=2, items=1, other=5),  # other: not read, not awaited
        log.change("1:10", 3, "s.orders", dc=2),
        log.change("1:10", 1, "s.orders"),
    ]
    a = _assembler()
    out = _feed(a, parts)
    assert len(out) == 1 and isinstance(out[0], Ready)
    assert out[0].tx_id == "1:10"
    assert [p.order for p in out[0].parts] == [1, 2, 3]
    assert a.open_transactions == 0
    assert a.commit_offset(99) == 99


def test_released_in_end_order() -> None:
    """A later transaction complete first waits for the earlier one (commit order)."""
    log = Log()
    a = _assembler()
    out = _feed(
        a,
        [
            log.end("1:10", orders=1),
            log.end("2:20", orders=1),
            log.change("2:20", 1),
        ],
    )
    assert out == []
    first_offset = 1
    assert a.commit_offset(99) == first_offset
    out = a.feed(log.change("1:10", 1))
    assert [o.tx_id for o in out] == ["1:10", "2:20"]


def test_interleaved_transactions_never_mixed() -> None:
    """Parts of many transactions shuffled together: each released with its own parts."""
    log = Log()
    rng = random.Random(5)
    txs = {f"{i}:{100 + i}": rng.randint(1, 6) for i in range(30)}
    changes = [log.change(t, n) for t, count in txs.items() for n in range(1, count + 1)]
    rng.shuffle(changes)
    ends = [log.end(t, orders=n) for t, n in txs.items()]
    mixed = changes + ends
    rng.shuffle(mixed)
    # ENDs keep their order (one partition), the changes go anywhere around them
    ordered_ends = iter(ends)
    parts = [next(ordered_ends) if p.record is not None else p for p in mixed]
    out = _feed(_assembler(), parts)
    assert [o.tx_id for o in out] == list(txs)
    for o in out:
        assert isinstance(o, Ready)
        assert {p.tx_id for p in o.parts} == {o.tx_id}
        assert [p.order for p in o.parts] == list(range(1, txs[str(o.tx_id)] + 1))


def test_duplicates_dropped_before_and_after_release() -> None:
    """A change or END seen twice counts once; parts of a released transaction are dropped."""
    log = Log()
    a = _assembler()
    c1 = log.change("1:10", 1)
    out = _feed(a, [c1, c1, log.change("1:10", 1), log.end("1:10", orders=2)])
    assert out == []
    out = _feed(a, [log.change("1:10", 2), log.end("1:10", orders=2), log.change("1:10", 2)])
    assert len(out) == 1 and len(out[0].parts) == 2
    assert a.stats.duplicates == 4
    assert a.open_transactions == 0


def test_checkpoint_drops_what_was_released_before_a_restart() -> None:
    """After a restart from a checkpoint, parts of released transactions are duplicates,
    by commit position (PostgreSQL ids) or by the remembered ids (others)."""
    log = Log()
    a = _assembler()
    _feed(a, [log.change("1:10", 1), log.end("1:10", orders=1)])
    _feed(a, [log.change("gtid-7", 1), log.end("gtid-7", orders=1)])
    restarted = Assembler(READS.__contains__, checkpoint=a.checkpoint())
    assert a.checkpoint() == Checkpoint(10, ("1:10", "gtid-7"))
    out = _feed(
        restarted,
        [log.change("0:5", 1), log.change("1:10", 1), log.end("gtid-7", orders=1)],
    )
    assert out == [] and restarted.stats.duplicates == 3
    assert restarted.open_transactions == 0


def test_never_ending_transaction_is_dead_lettered() -> None:
    """No END while max_wait later transactions ended: every part of it, with the reason,
    and a part of it that comes later follows."""
    log = Log()
    a = _assembler(max_wait=2)
    out = _feed(a, [log.change("1:10", 1), log.change("1:10", 2)])
    for i in range(2, 5):
        out += _feed(a, [log.change(f"{i}:{i * 10}", 1), log.end(f"{i}:{i * 10}", orders=1)])
    dead = [o for o in out if isinstance(o, Abandoned)]
    assert len(dead) == 1
    assert dead[0].tx_id == "1:10"
    assert [p.order for p in dead[0].parts] == [1, 2]
    assert "never ended" in dead[0].reason
    assert [o.tx_id for o in out if isinstance(o, Ready)] == ["2:20", "3:30", "4:40"]
    late = a.feed(log.change("1:10", 3))
    assert isinstance(late[0], Abandoned) and "came later" in late[0].reason


def test_end_counting_more_than_arrived_goes_once_every_partition_passed_it() -> None:
    """An END whose changes never all arrive holds later transactions until every
    technical partition read has shown a later transaction; then it goes, END too."""
    log = Log()
    sources = {("srv.s.orders", 0), ("srv.s.items", 0)}
    a = Assembler(READS.__contains__, sources=sources)
    out = _feed(a, [log.change("1:10", 1), log.end("1:10", orders=2)])
    out += _feed(a, [log.change("2:20", 1), log.end("2:20", orders=1)])
    assert out == []  # items has shown nothing later yet: the change may still come
    out = _feed(a, [log.change("3:30", 1, "s.items"), log.end("3:30", items=1)])
    assert isinstance(out[0], Abandoned)
    assert "counts {s.orders: 2}" in out[0].reason and "only {s.orders: 1}" in out[0].reason
    assert [p.record is not None for p in out[0].parts] == [False, True]  # the END too
    assert [o.tx_id for o in out[1:]] == ["2:20", "3:30"]


@pytest.mark.parametrize("tx_id", ["{i}:{i}0", "0-1-{i}"], ids=["postgresql", "mariadb"])
def test_catching_up_never_mistakes_late_changes_for_missing_ones(tx_id: str) -> None:
    """Every END first (the transaction topic far ahead), then the changes: each
    transaction released once, complete, in commit order, whatever max_wait says
    (PostgreSQL ids and MariaDB GTIDs carry the commit position; the fault suite's
    MariaDB runs lost transactions to max_wait when a partition ran behind)."""
    log = Log()
    sources = {("srv.s.orders", 0)}
    a = Assembler(READS.__contains__, AssemblyLimits(max_wait=1), sources=sources)
    ids = [tx_id.format(i=i) for i in range(1, 40)]
    out = _feed(a, [log.end(t, orders=2) for t in ids])
    out += _feed(a, [log.change(t, n) for t in ids for n in (1, 2)])
    assert all(isinstance(o, Ready) for o in out)
    assert [o.tx_id for o in out] == ids


def test_ids_without_a_position_fall_back_to_max_wait() -> None:
    """GTID-like ids: a short END goes once max_wait transactions wait behind it, a
    transaction without END once max_wait later ones ended."""
    log = Log()
    a = _assembler(max_wait=1)
    out = _feed(a, [log.change("g-1", 1), log.end("g-1", orders=2), log.change("g-0", 1)])
    out += _feed(a, [log.change("g-2", 1), log.end("g-2", orders=1)])
    assert out == []
    out = _feed(a, [log.change("g-3", 1), log.end("g-3", orders=1)])
    reasons = [o.reason for o in out if isinstance(o, Abandoned)]
    assert any("g-1" in r and "max_wait" in r for r in reasons), reasons
    assert any("g-0 never ended" in r for r in reasons), reasons
    assert [o.tx_id for o in out if isinstance(o, Ready)] == ["g-2", "g-3"]


def test_more_changes_than_the_end_counts() -> None:
    """More changes than the END counts: dead-lettered at once, with both counts."""
    log = Log()
    out = _feed(
        _assembler(), [log.change("1:10", 1), log.change("1:10", 2), log.end("1:10", orders=1)]
    )
    assert len(out) == 1 and isinstance(out[0], Abandoned)
    assert "more arrived" in out[0].reason


def test_change_without_transaction_block() -> None:
    """Dead-lettered with the reason; a snapshot read is released alone."""
    log = Log()
    a = _assembler()
    out = _feed(a, [log.change(None, 1), log.change(None, 2, op="r")])
    assert isinstance(out[0], Abandoned) and "no transaction block" in out[0].reason
    assert isinstance(out[1], Ready) and out[1].tx_id is None
    assert (a.stats.untracked, a.stats.snapshot_reads) == (1, 1)


def test_memory_limits() -> None:
    """Too many changes in one transaction, or too many open: dead-lettered, named."""
    log = Log()
    a = _assembler(max_changes=2)
    out = _feed(a, [log.change("1:10", n) for n in (1, 2, 3)])
    assert isinstance(out[0], Abandoned) and "more than 2 changes" in out[0].reason
    b = _assembler(max_open=2)
    out = _feed(b, [log.change(f"{i}:{i}", 1) for i in (1, 2, 3)])
    assert len(out) == 1 and isinstance(out[0], Abandoned) and out[0].tx_id == "1:1"
    assert "more than 2 transactions" in out[0].reason
    assert b.open_transactions == 2


def test_commit_position() -> None:
    assert commit_position("571:53195829") == 53195829
    assert commit_position("3E11FA47-71CA-11E1-9E33-C80AA9429562:23") is None
    # MariaDB: the sequence number of domain 0; other domains' are not comparable
    assert commit_position("0-1-3348") == 3348
    assert commit_position("0-7-3349") == 3349  # another server (a new primary), same domain
    assert commit_position("1-1-5") is None
    assert commit_position("0-1-") is None


@settings(max_examples=60)
@given(st.data())
def test_any_arrival_order_releases_each_transaction_once(data: st.DataObject) -> None:
    """Shuffled parts with duplicates: each transaction released exactly once, complete,
    in END order, and the commit offset never passes an open transaction."""
    log = Log()
    sizes = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=8))
    ids = [f"{i}:{1000 + i}" for i in range(len(sizes))]
    changes = [
        log.change(t, n) for t, size in zip(ids, sizes, strict=True) for n in range(1, size + 1)
    ]
    ends = [log.end(t, orders=size) for t, size in zip(ids, sizes, strict=True)]
    pool = changes + data.draw(st.lists(st.sampled_from(changes), max_size=5)) if changes else []
    order = data.draw(st.permutations(pool + ends))
    ends_iter = iter(ends)
    parts = [next(ends_iter) if p.record is not None else p for p in order]
    a = _assembler()
    out = []
    fed: list[Part] = []
    for arrival, p in enumerate(parts):
        part = Part(arrival, p.origin, p.change, p.record)  # offsets in arrival order
        out += a.feed(part)
        fed.append(part)
        held = [x.offset for x in fed if x.tx_id in a._open]
        assert a.commit_offset(arrival + 1) == min(held, default=arrival + 1)
    assert [o.tx_id for o in out] == ids
    assert all(isinstance(o, Ready) for o in out)
    assert [len(o.parts) for o in out] == sizes


@pytest.mark.parametrize("status", ["BEGIN"])
def test_begin_alone_holds_nothing(status: str) -> None:
    log = Log()
    a = _assembler()
    assert a.feed(log.begin("1:10")) == []
    assert a.open_transactions == 0


def test_finish_at_the_end_of_the_input() -> None:
    """Replay's end: an END short of changes is dead-lettered; a transaction whose END
    lies beyond the ranges read is left out (counted), not dead-lettered."""
    log = Log()
    a = _assembler()
    out = _feed(a, [log.change("1:10", 1), log.end("1:10", orders=2), log.change("2:20", 1)])
    assert out == []
    dead, left_out = a.finish()
    assert left_out == 1
    assert len(dead) == 1 and isinstance(dead[0], Abandoned) and dead[0].tx_id == "1:10"
    assert "arrived in the ranges read" in dead[0].reason
    assert a.open_transactions == 0


def test_oldest_position_is_the_oldest_open_ended_or_not() -> None:
    """The commit position of the oldest open transaction: one waiting for its END, or
    the head of the END queue waiting for changes, whichever committed first; none once
    all are released, or while an id without a position is open."""
    log = Log()
    assembler = _assembler()
    assert assembler.oldest_position() is None
    _feed(assembler, [log.change("7:70", 1), log.end("5:50", orders=1)])
    assert assembler.oldest_position() == 50  # the END's changes are still to come
    _feed(assembler, [log.change("5:50", 1)])
    assert assembler.oldest_position() == 70  # 5:50 released; 7:70 has no END yet
    out = _feed(assembler, [log.end("7:70", orders=1)])
    assert [o.tx_id for o in out if isinstance(o, Ready)] == ["7:70"]
    assert assembler.oldest_position() is None
    _feed(assembler, [log.change("9:90", 1), log.change("uuid:3", 1)])
    assert assembler.oldest_position() is None
