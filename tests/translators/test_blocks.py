"""A fetched block through the row worker's runner, with fakes of Faust's app, consumer and
producer: translated, sent one batch per output partition, acknowledged in fetch order;
a peer that does not answer retried, a terminal failure stopping the worker; exactly once,
an aborted block read again before the blocks fetched after it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from faust.types import TP

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
    def highwater(self, tp: TP) -> int:
        return 100


class App:
    in_transaction = False

    def __init__(self) -> None:
        self.consumer = Consumer()
        self.consumer_generation_id = self.consumer.app.consumer_generation_id
        self.producer = _Wrapped()
        self.crashed: list[BaseException] = []

    async def crash(self, exc: BaseException) -> None:
        self.crashed.append(exc)


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
    assert [str(e) for e in app.crashed] == ["translate.on_error = fail"]
    assert run.stats.acknowledged == 0 and app.consumer.committable(TP0) is None


class Seeking(Consumer):
    """A consumer holding ``TP0`` that records its seeks."""

    def __init__(self) -> None:
        super().__init__()
        self.seeks: list[dict[TP, int]] = []

    def assignment(self) -> set[TP]:
        return {TP0}

    async def seek_wait(self, partitions: dict[TP, int]) -> None:
        self.seeks.append(dict(partitions))


def test_an_aborted_block_is_read_again_before_the_blocks_fetched_after_it() -> None:
    """Exactly once: after a block's transaction aborted, its partition is sought back to
    it, the blocks fetched before the seek are dropped until the block comes again, and
    a new generation (the rebalance sought back to committed) ends the rewind."""
    app = App()
    app.consumer = consumer = Seeking()
    run = runner(translated, app)
    aborted = RecordBlock(TP0, [Record(10), Record(11)], 1)
    asyncio.run(run._read_again(aborted))
    assert consumer.seeks == [{TP0: 10}]
    assert run._fetched_before_rewind(RecordBlock(TP0, [Record(12), Record(13)], 1))
    assert not run._fetched_before_rewind(RecordBlock(TP0, [Record(10)], 1))  # read again
    assert not run._fetched_before_rewind(RecordBlock(TP0, [Record(14)], 1))
    asyncio.run(run._read_again(RecordBlock(TP0, [Record(20)], 1)))
    assert not run._fetched_before_rewind(RecordBlock(TP0, [Record(30)], 2))
    assert not run._fetched_before_rewind(RecordBlock(TP0, [Record(31)], 1))  # forgotten
