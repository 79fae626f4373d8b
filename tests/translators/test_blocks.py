"""A fetched block through the row worker's runner, with fakes of Faust's app, consumer and
producer: translated, sent one batch per output partition, acknowledged in fetch order;
a peer that does not answer retried, a terminal failure stopping the worker; exactly once,
each block committed only where its partition's last commit ended."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import pytest
from faust.types import TP
from hypothesis import given, settings
from hypothesis import strategies as st

from bizevents.plumbing.errors import TerminalError, TransientError
from bizevents.plumbing.kafka import partition_for
from bizevents.translators import blocks
from bizevents.translators._faust import RecordBlock
from bizevents.translators.blocks import BlockRunner
from bizevents.translators.metrics import WorkerStats
from bizevents.translators.records import Counts, OutRecord, Result
from tests.translators.test_faust import FakeConsumer
from tests.translators.test_produce import _Producer

TP0 = TP("shop.public.things", 0)


@dataclass
class Record:
    offset: int
    timestamp: int = 0


class Consumer(FakeConsumer):
    """Faust's consumer holding ``TP0``, whose group committed ``committed`` there, and
    that records its seeks."""

    def __init__(self, committed: int = 0) -> None:
        super().__init__()
        self.committed = committed
        self.asked: list[TP] = []
        self.seeks: list[dict[TP, int]] = []

    def highwater(self, tp: TP) -> int:
        return 100

    def assignment(self) -> set[TP]:
        return {TP0}

    async def committed_positions(self, tps: set[TP]) -> dict[TP, int]:
        self.asked.extend(sorted(tps))
        return {tp: self.committed for tp in tps}

    async def seek_wait(self, partitions: dict[TP, int]) -> None:
        self.seeks.append(dict(partitions))


class App:
    """Faust's app: a crash is recorded, and the app crashed from then on."""

    in_transaction = False
    should_stop = False

    def __init__(self) -> None:
        self.consumer = Consumer()
        self.consumer_generation_id = self.consumer.app.consumer_generation_id
        self.producer = _Wrapped()
        self.crashes: list[BaseException] = []

    @property
    def crashed(self) -> bool:
        return bool(self.crashes)

    async def crash(self, exc: BaseException) -> None:
        self.crashes.append(exc)


class _Wrapped:
    """Faust's producer, whose aiokafka producer the runner appends batches to."""

    def __init__(self) -> None:
        self._producer = _Partitioned(room=100)


class _Partitioned(_Producer):
    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1, 2}


def translated(topic: str, partition: int, records: Any) -> Result:
    """Each record one event, keyed by its offset, and counted."""
    out = [OutRecord("things", b"%d" % r.offset, b"v", [], "things@1", "e") for r in records]
    return Result(out, {"things@1": Counts(consumed=len(records), emitted=len(records))})


def runner(processor: Any, app: App | None = None) -> BlockRunner:
    return BlockRunner(app or App(), processor, WorkerStats("g"), max_inflight=4)


async def handled(run: BlockRunner, *fetched: RecordBlock) -> None:
    """The blocks handed in, in fetch order, and every one settled."""
    for block in fetched:
        await run.handle(block)
    await run.drain()


def test_blocks_are_sent_per_key_partition_and_acknowledged_in_order() -> None:
    run = runner(translated)
    first = RecordBlock(TP0, [Record(0), Record(1)], 1)
    second = RecordBlock(TP0, [Record(2), Record(3), Record(4)], 1)
    asyncio.run(handled(run, first, second))
    sent = run.app.producer._producer.sent
    by_partition: dict[int, list[bytes | None]] = {}
    for topic, partition, values in sent:
        assert topic == "things"
        by_partition.setdefault(partition, []).extend(values)
    assert sum(len(v) for v in by_partition.values()) == 5
    expected = {partition_for(b"%d" % o, 3) for o in range(5)}
    assert set(by_partition) == expected
    assert run.app.consumer.committable(TP0) == 5
    assert run.stats.acknowledged == 5 and run.stats.counts["things@1"].emitted == 5
    assert run.stats.lag[("shop.public.things", 0)] == 100 - 4 - 1


def test_a_peer_that_does_not_answer_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocks, "RETRY_BACKOFF_S", (0.0,))
    calls: list[int] = []

    def flaky(topic: str, partition: int, records: Any) -> Result:
        calls.append(1)
        if len(calls) < 3:
            raise TransientError("the registry does not answer")
        return translated(topic, partition, records)

    run = runner(flaky)
    asyncio.run(handled(run, RecordBlock(TP0, [Record(0)], 1)))
    assert len(calls) == 3 and run.stats.acknowledged == 1


def test_a_terminal_failure_stops_the_worker_without_acknowledging() -> None:
    def fails(topic: str, partition: int, records: Any) -> Result:
        raise TerminalError("translate.on_error = fail")

    app = App()
    run = runner(fails, app)
    with pytest.raises(TerminalError):
        asyncio.run(handled(run, RecordBlock(TP0, [Record(0)], 1)))
    assert [str(e) for e in app.crashes] == ["translate.on_error = fail"]
    assert run.stats.acknowledged == 0 and app.consumer.committable(TP0) is None


class _Transactional(_Partitioned):
    """A transactional producer: what it committed, by transaction, and the offsets sent."""

    def __init__(self) -> None:
        super().__init__(room=100)
        self.committed: list[tuple[list[bytes | None], dict[TP, int]]] = []
        self._open: list[bytes | None] = []
        self._offsets: dict[TP, int] = {}

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> Any:
        self._open += batch.records
        return await super().send_batch(batch, topic, partition=partition)

    async def send_offsets_to_transaction(self, offsets: dict[TP, int], group: str) -> None:
        self._offsets = dict(offsets)

    async def commit_transaction(self) -> None:
        self.committed.append((self._open, self._offsets))
        self._open, self._offsets = [], {}

    async def abort_transaction(self) -> None:
        self._open, self._offsets = [], {}

    async def begin_transaction(self) -> None:
        pass


class ExactlyOnce(App):
    """Exactly once: one transactional producer for ``TP0``'s partition."""

    in_transaction = True

    def __init__(self, committed: int = 0) -> None:
        super().__init__()
        self.consumer = Consumer(committed)
        self.transactional = _Transactional()
        self.producer._trn_locks = {"app-0-0": asyncio.Lock()}  # type: ignore[attr-defined]
        self.producer._transaction_producers = {"app-0-0": self.transactional}  # type: ignore[attr-defined]
        self.conf = type("Conf", (), {"id": "app"})()
        self.assignor = type("Assignor", (), {"group_for_topic": staticmethod(lambda t: 0)})()


def fetched(start: int, end: int, *offsets: int, generation: int = 1) -> RecordBlock:
    """A block fetched from position ``start`` to ``end`` holding ``offsets``."""
    return RecordBlock(TP0, [Record(o) for o in offsets], generation, start, end)


def committed_keys(app: ExactlyOnce) -> list[tuple[list[bytes | None], int]]:
    return [(values, offsets[TP0]) for values, offsets in app.transactional.committed]


def test_exactly_once_commits_each_block_where_the_previous_ended_across_gaps() -> None:
    """Offsets between blocks may be compacted away or transaction markers: a block that
    starts at the position where the previous one ended continues it."""
    app = ExactlyOnce(committed=5)
    run = runner(translated, app)
    asyncio.run(handled(run, fetched(5, 9, 6, 8), fetched(9, 12, 11)))
    assert [offset for _, offset in committed_keys(app)] == [9, 12]
    assert app.consumer.seeks == [] and app.consumer.asked == [TP0]  # asked once
    assert run.stats.acknowledged == 3


def test_exactly_once_commits_nothing_past_a_block_that_was_never_translated() -> None:
    """The generation's first block must start at the broker's committed offset, and each
    next one where the last commit ended: a block that does not (one before it was
    dropped or aborted while the worker went on: the fault suite lost 252 events so) is
    dropped, its partition sought back, and the blocks fetched before the seek are
    dropped in turn until the block read again comes."""
    app = ExactlyOnce(committed=0)
    run = runner(translated, app)
    asyncio.run(handled(run, fetched(202, 300, 202, 299)))  # 0..201 never translated
    assert app.transactional.committed == [] and app.consumer.seeks == [{TP0: 0}]
    asyncio.run(handled(run, fetched(300, 310, 305), fetched(0, 202, 0, 201)))
    assert app.consumer.seeks == [{TP0: 0}, {TP0: 0}]
    asyncio.run(handled(run, fetched(202, 300, 202, 299)))  # read again, in order
    assert [offset for _, offset in committed_keys(app)] == [202, 300]
    assert [values for values, _ in committed_keys(app)] == [[b"v", b"v"], [b"v", b"v"]]
    assert run.stats.acknowledged == 4


def test_exactly_once_a_new_generation_asks_the_broker_again() -> None:
    """Another member may have committed the partition meanwhile: the first block of a
    new generation is checked against the broker's committed offset, not this member's
    last commit; a block of an earlier generation is dropped without a seek (the
    rebalance sought back)."""
    app = ExactlyOnce(committed=0)
    run = runner(translated, app)
    asyncio.run(handled(run, fetched(0, 10, 0, 9)))
    app.consumer_generation_id = 2
    app.consumer.committed = 50
    asyncio.run(handled(run, fetched(10, 20, 10, 19), fetched(50, 60, 50, 59, generation=2)))
    assert [offset for _, offset in committed_keys(app)] == [10, 60]
    assert app.consumer.seeks == []
    assert app.consumer.asked == [TP0, TP0]


def cancelled_at(call: int) -> Any:
    """:func:`translated`, whose ``call``-th call is cancelled."""
    calls: list[int] = []

    def processor(topic: str, partition: int, records: Any) -> Result:
        calls.append(1)
        if len(calls) == call:
            raise asyncio.CancelledError
        return translated(topic, partition, records)

    return processor


def test_exactly_once_a_cancelled_block_is_read_again() -> None:
    """A cancellation inside a block's transaction aborts it while the worker goes on
    (Faust restarts the agent): the partition is sought back to the block."""
    app = ExactlyOnce(committed=0)
    run = runner(cancelled_at(1), app)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(handled(run, fetched(0, 5, 0, 4)))
    assert app.transactional.committed == [] and app.consumer.seeks == [{TP0: 0}]
    asyncio.run(handled(run, fetched(5, 9, 8), fetched(0, 5, 0, 4), fetched(5, 9, 8)))
    assert [offset for _, offset in committed_keys(app)] == [5, 9]


def test_at_least_once_a_cancelled_block_is_read_again_before_any_later_is_acknowledged() -> None:
    """At least once, the same: a block cancelled while the worker goes on is never
    acknowledged, and the next block, fetched before the seek back, must not be
    acknowledged from where the block before the cancelled one ended."""
    app = App()
    run = runner(cancelled_at(2), app)

    async def scenario() -> None:
        await run.handle(fetched(0, 2, 0, 1))
        with pytest.raises(asyncio.CancelledError):
            await run.handle(fetched(2, 4, 2, 3))
        assert app.consumer.seeks == [{TP0: 2}]
        await handled(run, fetched(4, 6, 4, 5))  # fetched before the seek
        assert app.consumer.committable(TP0) == 2
        assert app.consumer.seeks == [{TP0: 2}, {TP0: 2}]
        await handled(run, fetched(2, 4, 2, 3), fetched(4, 6, 4, 5))

    asyncio.run(scenario())
    assert app.consumer.committable(TP0) == 6 and run.stats.acknowledged == 6


def test_a_stopping_worker_drops_its_blocks_without_asking_its_consumer_thread() -> None:
    """A crash stops the consumer's thread: a block handed in then must not wait for the
    committed offset or a seek that will never come (the stop of a worker stopped by
    ``on_error = "fail"`` hung so)."""
    app = App()
    app.crashes.append(RuntimeError("crashed"))
    run = runner(translated, app)
    asyncio.run(handled(run, fetched(0, 2, 0, 1)))
    assert app.consumer.asked == [] and run.stats.acknowledged == 0


def test_a_consumer_thread_that_does_not_answer_drops_the_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(blocks, "THREAD_WAIT_S", 0.01)

    class Silent(Consumer):
        async def committed_positions(self, tps: set[TP]) -> dict[TP, int]:
            await asyncio.sleep(10)
            return {}

    app = App()
    app.consumer = Silent()
    run = runner(translated, app)
    asyncio.run(handled(run, fetched(0, 2, 0, 1)))
    assert run.stats.acknowledged == 0 and run._resume_at == {}


def test_a_dropped_block_hands_nothing_over() -> None:
    """A promotion's hand-over commits through the block's first offset: a block dropped
    (out of place, or an earlier generation's) must not reach it, or the commit would
    pass the records it was dropped for."""
    handed: list[int] = []

    async def before(drain: Any, tp: TP, first_offset: int) -> None:
        handed.append(first_offset)

    app = App()
    run = BlockRunner(app, translated, WorkerStats("g"), max_inflight=4, before=before)
    asyncio.run(handled(run, fetched(2, 4, 2, 3), fetched(0, 2, 0, 1, generation=0)))
    assert handed == [] and app.consumer.seeks == [{TP0: 0}]
    asyncio.run(handled(run, fetched(0, 2, 0, 1)))
    assert handed == [0]


class _Partition:
    """A partition's log as the consumer's thread fetches it: records at ``offsets`` (the
    others compacted away), handed out in blocks of ``sizes`` from the position, up to
    ``prefetch`` blocks ahead; a seek moves the position, and the blocks already fetched
    still come first (they were queued for the agent)."""

    def __init__(self, offsets: list[int], sizes: list[int], prefetch: int) -> None:
        self.offsets = offsets
        self.sizes = sizes
        self.prefetch = prefetch
        self.position = 0
        self.queued: list[RecordBlock] = []
        self.fetches = 0

    def fetch(self, generation: int) -> None:
        while len(self.queued) < self.prefetch:
            ahead = [o for o in self.offsets if o >= self.position]
            if not ahead:
                return
            size = self.sizes[self.fetches % len(self.sizes)]
            self.fetches += 1
            taken = ahead[:size]
            end = ahead[size] if len(ahead) > size else self.offsets[-1] + 1
            block = RecordBlock(TP0, [Record(o) for o in taken], generation, self.position, end)
            self.queued.append(block)
            self.position = end


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    count=st.integers(1, 40),
    exactly_once=st.booleans(),
    prefetch=st.integers(1, 4),
)
def test_whatever_is_cancelled_every_record_is_committed_once_in_order(
    data: st.DataObject, count: int, exactly_once: bool, prefetch: int
) -> None:
    """Blocks cancelled anywhere, while others were fetched ahead: the committed outputs
    hold every record of the partition, in order, once (exactly once), or at least once
    with the committed offset never past a record not yet sent (at least once)."""
    offsets = sorted(data.draw(st.sets(st.integers(0, 3 * count), min_size=1, max_size=count)))
    sizes = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=6))
    cancels = set(data.draw(st.lists(st.integers(0, 60), max_size=8)))
    log = _Partition(offsets, sizes, prefetch)
    calls = [0]
    sent: list[int] = []

    def translate(topic: str, partition: int, records: Any) -> Result:
        calls[0] += 1
        if calls[0] in cancels:
            raise asyncio.CancelledError
        sent.extend(r.offset for r in records)
        out = [OutRecord("things", b"k", b"%d" % r.offset, [], "things@1", "e") for r in records]
        return Result(out, {"things@1": Counts(consumed=len(records), emitted=len(records))})

    app: App = ExactlyOnce(committed=0) if exactly_once else App()

    async def seek_wait(partitions: dict[TP, int]) -> None:
        log.position = partitions[TP0]

    app.consumer.seek_wait = seek_wait  # type: ignore[method-assign]
    run = runner(translate, app)

    async def scenario() -> None:
        for _ in range(10 * (len(offsets) + 70)):
            log.fetch(app.consumer_generation_id)
            if not log.queued:
                break
            block = log.queued.pop(0)
            with contextlib.suppress(asyncio.CancelledError):
                await run.handle(block)
        await run.drain()

    asyncio.run(scenario())
    assert set(sent) == set(offsets)
    if isinstance(app, ExactlyOnce):
        # each transaction holds exactly the records from where the last one ended
        previous = 0
        for values, committed in app.transactional.committed:
            end = committed[TP0]
            assert sorted(int(v) for v in values if v is not None) == [
                o for o in offsets if previous <= o < end
            ]
            previous = end
        assert previous == offsets[-1] + 1
    else:
        assert app.consumer.committable(TP0) == offsets[-1] + 1
