"""The Faust internals the worker's lean path relies on (faust-streaming 0.15.3's private
attributes, pinned here), and the block acknowledgements into Faust's bookkeeping."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections import defaultdict
from dataclasses import dataclass
from importlib.metadata import version
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.client import CoordinationType
from aiokafka.errors import (
    CoordinatorLoadInProgressError,
    KafkaConnectionError,
    KafkaError,
    NotCoordinatorError,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.producer.sender import Sender
from aiokafka.producer.transaction_manager import TransactionManager
from faust.transport.drivers.aiokafka import Consumer as FaustConsumer
from faust.types import TP
from intervaltree import IntervalTree

from bizevents.translators._faust import (
    PRIVATE_CONSUMER_ATTRIBUTES,
    BlockAcker,
    RecordBlock,
    TablelessManager,
    _Fetched,
    bulk_consumer,
    deliver,
    timed_producer,
)
from bizevents.translators.settings import TranslateSettings

# -- the Faust internals the lean path relies on ----------------------------------------------


def test_faust_is_the_pinned_version_with_the_private_attributes_used() -> None:
    """A faust-streaming upgrade must fail here first, not in production."""
    import faust

    assert version("faust-streaming") == "0.15.3"
    app = faust.App("test-internals", broker="kafka://127.0.0.1:1", web_enabled=False)
    consumer = app.consumer
    for name in PRIVATE_CONSUMER_ATTRIBUTES:
        assert hasattr(consumer, name), name
    for method in ("_drain_messages", "_wait_next_records", "perform_seek", "_to_message"):
        assert callable(getattr(FaustConsumer, method)), method
    assert hasattr(app.topics, "_tp_index")
    assert hasattr(app.producer, "_producer")  # bizevents.translators._faust.aiokafka_producer
    assert hasattr(app, "consumer_generation_id")
    assert callable(app.tables._update_channels)  # type: ignore[attr-defined]  # bizevents.translators._faust.TablelessManager


def test_the_worker_table_manager_starts_without_faust_pause() -> None:
    """Faust's table manager sleeps 1 s before the consumer may subscribe; the worker's
    (it has no tables) registers at once and starts the recovery service, as Faust's
    does after its pause."""
    import asyncio

    import faust

    app = faust.App(
        "test-tables",
        broker="kafka://127.0.0.1:1",
        web_enabled=False,
        TableManager=TablelessManager,
    )
    manager = app.tables
    assert isinstance(manager, TablelessManager)
    slept: list[float] = []
    started: list[str] = []

    async def sleep(seconds: float, *args: Any, **kwargs: Any) -> None:
        slept.append(seconds)

    class Recovery:
        async def start(self) -> None:
            started.append("recovery")

    manager.sleep = sleep  # type: ignore[method-assign,assignment]
    manager._recovery = Recovery()  # type: ignore[assignment]
    app.consumer.assignment = set  # type: ignore[method-assign]  # no partitions to pause

    async def start() -> bool:
        await manager.on_start()
        return bool(manager._tables_registered.is_set())

    assert asyncio.run(start()) is True
    assert slept == []
    assert started == ["recovery"]


def test_the_worker_consumer_holds_empty_fetches_as_configured() -> None:
    """Faust hard-codes aiokafka's fetch_max_wait_ms to 1,500 ms; the worker's consumer
    takes ``translate.fetch_max_wait_ms`` instead (held fetches are latency)."""
    import asyncio

    import faust

    app = faust.App("test-fetch-wait", broker="kafka://127.0.0.1:1", web_enabled=False)
    app.transport.Consumer = bulk_consumer(frozenset({"shop.public.things"}), 77)

    async def created() -> int:
        consumer = app.consumer._thread._create_worker_consumer(app.transport)
        try:
            return int(consumer._fetch_max_wait_ms)
        finally:
            await consumer.stop()

    assert asyncio.run(created()) == 77
    assert TranslateSettings().fetch_max_wait_ms == 100


def test_no_commit_waits_on_a_consumer_thread_stopped_by_a_crash() -> None:
    """A crash marks the consumer thread crashed, and the thread stops on its own: a
    commit asked of it then was queued to a loop that no longer runs and waited for
    ever (the worker hung instead of exiting). Here the thread's loop never runs, as
    after that stop: the commit returns at once, committing nothing."""
    import faust

    app = faust.App("test-crash-commit", broker="kafka://127.0.0.1:1", web_enabled=False)
    app.transport.Consumer = bulk_consumer(frozenset({"shop.public.things"}), 100)

    async def commit_after_crash() -> bool:
        consumer = app.consumer
        consumer._thread._crash(RuntimeError("a translator failed"))
        return bool(await asyncio.wait_for(consumer._commit({TP("shop.public.things", 0): 5}), 5))

    assert asyncio.run(commit_after_crash()) is False


@pytest.mark.parametrize("timeout_s", [None, 180.0])
def test_the_worker_s_transactional_producers_ask_for_its_transaction_timeout(
    timeout_s: float | None,
) -> None:
    """Faust makes each input partition's transactional producer with its default
    producer's settings and has none for the broker's transaction timeout: the worker's
    producer class gives ``translate.transaction_timeout_s`` (aiokafka's 60 s without)."""
    import faust

    app = faust.App(
        "test-txn-timeout",
        broker="kafka://127.0.0.1:1",
        web_enabled=False,
        processing_guarantee="exactly_once",
    )
    if timeout_s is not None:
        app.transport.Producer = timed_producer(timeout_s)

    async def made() -> int:
        # what Faust's begin_transaction makes for a partition (not started: no broker)
        producer = app.producer._new_producer(transactional_id="test-txn-timeout-0")
        try:
            return int(producer._txn_manager.transaction_timeout_ms)
        finally:
            await producer.stop()

    expected = 60_000 if timeout_s is None else int(timeout_s * 1000)
    assert asyncio.run(made()) == expected
    assert TranslateSettings().transaction_timeout_s == 60.0


def test_a_put_a_rebalance_cancels_drops_the_block_and_a_stop_still_stops() -> None:
    """A rebalance clears the agents' queues, which cancels a put waiting for room: the
    block is dropped (read again from the committed offset) and the fetcher goes on;
    the cancellation crashed it before and the worker exited 1. A cancellation of the
    fetcher itself (a stop) still ends it. On mode's own service and queue."""
    from mode import Service
    from mode.utils.queues import FlowControlEvent, ThrowableQueue

    async def scenario() -> None:
        service = Service()
        flow = FlowControlEvent()
        flow.resume()
        queue: ThrowableQueue[str] = ThrowableQueue(maxsize=1, flow_control=flow)
        await queue.put("full")
        suspended = asyncio.Event()
        putting = asyncio.ensure_future(deliver(service, queue.put("b"), suspended))
        await asyncio.sleep(0.05)
        queue.clear()  # what the rebalance does
        assert await putting is False
        await queue.put("full again")
        stopping = asyncio.ensure_future(deliver(service, queue.put("c"), suspended))
        await asyncio.sleep(0.05)
        stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        assert queue.qsize() == 1  # neither block went in

    asyncio.run(scenario())


def _partition_records(topic: str, key_deserializer: Any = None) -> list[Any]:
    """Three records of ``topic`` read back by aiokafka's own fetch-side reader from a
    batch its own builder wrote (what a fetch response holds)."""
    from aiokafka.consumer.fetcher import PartitionRecords
    from aiokafka.record.default_records import DefaultRecordBatchBuilder
    from aiokafka.record.memory_records import MemoryRecords
    from aiokafka.structs import TopicPartition

    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i in range(3):
        builder.append(i, 1_700_000_000_000 + i, f"k{i}".encode(), f"v{i}".encode(), [("h", b"x")])
    batch = MemoryRecords(bytes(builder.build()))
    return list(
        PartitionRecords(TopicPartition(topic, 4), batch, [], 0, key_deserializer, None, False, 0)
    )


def test_the_bulk_topics_records_come_as_aiokafkas_batch_reader_made_them() -> None:
    """Once a bulk consumer is made, a bulk topic's records are aiokafka's batch reader's
    own (no ConsumerRecord copy), with what the core and the block runner read; another
    topic, or a consumer with a deserializer, still gets aiokafka's ConsumerRecord."""
    import asyncio

    import faust
    from aiokafka.consumer.fetcher import PartitionRecords
    from aiokafka.structs import ConsumerRecord

    # the private parts the lean path replaces and reads, on the pinned aiokafka
    assert version("aiokafka") == "0.14.0"
    assert PartitionRecords._consumer_record.__code__.co_varnames[:3] == ("self", "tp", "record")
    app = faust.App("test-bulk-records", broker="kafka://127.0.0.1:1", web_enabled=False)
    app.transport.Consumer = bulk_consumer(frozenset({"shop.public.bulk"}), 100)

    async def create() -> None:
        consumer = app.consumer._thread._create_worker_consumer(app.transport)
        await consumer.stop()

    asyncio.run(create())
    bulk = _partition_records("shop.public.bulk")
    assert [type(r) for r in bulk] != [ConsumerRecord] * 3
    assert [(r.offset, r.timestamp, r.key, r.value) for r in bulk] == [
        (i, 1_700_000_000_000 + i, f"k{i}".encode(), f"v{i}".encode()) for i in range(3)
    ]
    assert [list(r.headers) for r in bulk] == [[("h", b"x")]] * 3
    other = _partition_records("shop.public.other")
    assert all(type(r) is ConsumerRecord for r in other)
    assert [(r.topic, r.partition, r.offset, r.key) for r in other] == [
        ("shop.public.other", 4, i, f"k{i}".encode()) for i in range(3)
    ]
    deserialized = _partition_records("shop.public.bulk", key_deserializer=bytes.decode)
    assert [(type(r), r.key) for r in deserialized] == [(ConsumerRecord, f"k{i}") for i in range(3)]


@dataclass
class _App:
    consumer_generation_id: int = 1


class FakeConsumer:
    """The bookkeeping attributes of Faust's consumer, and its own ``_new_offset``."""

    def __init__(self) -> None:
        self.app = _App()
        self._acked: dict[TP, list[int]] = defaultdict(list)
        self._acked_index: dict[TP, set[int]] = defaultdict(set)
        self._committed_offset: dict[TP, int | None] = defaultdict(lambda: None)
        self._gap: dict[TP, IntervalTree] = defaultdict(IntervalTree)
        self._n_acked = 0
        self._unacked_messages: weakref.WeakSet[Any] = weakref.WeakSet()

    def committable(self, tp: TP) -> int | None:
        """What Faust would commit now (its own code)."""
        offset: int | None = FaustConsumer._new_offset(self, tp)  # type: ignore[arg-type]
        if offset is not None:
            self._committed_offset[tp] = offset
        return offset


@dataclass
class _Record:
    offset: int


TP0 = TP("t", 0)


def block(offsets: range | list[int], generation: int = 1) -> RecordBlock:
    return RecordBlock(TP0, [_Record(o) for o in offsets], generation)


def test_blocks_acked_in_order_make_their_offsets_committable() -> None:
    consumer = FakeConsumer()
    acker = BlockAcker(consumer)
    first, second = block(range(0, 100)), block(range(100, 250))
    consumer._unacked_messages.add(first)
    acker.ack(first)
    assert first.acked and first not in consumer._unacked_messages
    assert consumer.committable(TP0) == 100
    acker.ack(second)
    assert consumer.committable(TP0) == 250
    assert consumer._n_acked == 250


def test_offsets_the_broker_skipped_do_not_stop_commits() -> None:
    """A compacted-away range between two blocks is acknowledged with the later block."""
    consumer = FakeConsumer()
    acker = BlockAcker(consumer)
    acker.ack(block([0, 1, 2]))
    acker.ack(block([10, 11]))  # 3..9 were compacted away
    assert consumer.committable(TP0) == 12


def test_a_new_assignment_starts_at_the_committed_offset() -> None:
    consumer = FakeConsumer()
    consumer._committed_offset[TP0] = 40
    acker = BlockAcker(consumer)
    acker.ack(block([45, 46]))  # 40..44 compacted away: still committable
    assert consumer.committable(TP0) == 47


def test_a_block_of_an_earlier_generation_is_not_acknowledged() -> None:
    """After a rebalance its partition may be elsewhere: it is read again instead."""
    consumer = FakeConsumer()
    acker = BlockAcker(consumer)
    old = block(range(0, 10), generation=1)
    consumer.app.consumer_generation_id = 2
    assert acker.ack(old) == 0
    assert old.acked  # Faust's wait_empty must not wait for it
    assert consumer.committable(TP0) is None


# -- a transactional producer's coordinator, looked up while the cluster restarts --------------


class _RestartingClient:
    """The three calls ``Sender._find_coordinator`` makes; the lookup answers ``errors``
    one by one (as a restarting cluster does), then names node 2."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.lookups = 0

    async def coordinator_lookup(self, _type: Any, _key: str) -> int:
        self.lookups += 1
        if self.errors:
            raise self.errors.pop(0)
        return 2

    async def ready(self, _node: int, group: Any = None) -> bool:
        return True

    async def force_metadata_update(self) -> bool:
        return True


async def _lookup(client: _RestartingClient) -> Any:
    """A transactional producer's coordinator, as its sender looks it up (no producer
    around it: only the lookup runs, as the imported ``_faust`` patched it)."""
    sender = Sender.__new__(Sender)
    sender.client = client
    sender._txn_manager = TransactionManager("tid", 60_000)
    sender._coordinators = {}
    sender._retry_backoff = 0.0
    return await sender._find_coordinator(CoordinationType.TRANSACTION, "tid")


def test_a_coordinator_loading_or_moved_is_looked_up_again() -> None:
    """aiokafka's own lookup retries three errors and stops the producer's sender for good
    on any other ("Unexpected error during batch delivery": the row worker's exit in
    docs/reliability.md's L3); the ones a restarting cluster answers are asked again."""
    client = _RestartingClient(
        [CoordinatorLoadInProgressError(), NotCoordinatorError(), KafkaConnectionError()]
    )
    found = asyncio.run(_lookup(client))
    assert found == 2
    assert client.lookups == 4


def test_a_refused_coordinator_lookup_still_stops_the_sender() -> None:
    client = _RestartingClient([TransactionalIdAuthorizationFailed()])
    with pytest.raises(KafkaError):
        asyncio.run(_lookup(client))
    assert client.lookups == 1


# -- a rebalance waits for the blocks still tracked; a cleared queue's block is not ----------


class _Channel:
    def __init__(self) -> None:
        self.queue = self
        self.items: list[Any] = []

    async def put(self, item: Any) -> None:
        self.items.append(item)


class _DrainingConsumer:
    """What ``_BulkConsumer._drain_messages`` reads of its consumer: one fetch of one
    block, then a rebalance that clears the agent's queue, as Faust's does."""

    def __init__(self, tp: TP, record: Any) -> None:
        self.channel = _Channel()
        self.app = SimpleNamespace(
            topics=SimpleNamespace(_tp_index={tp: [self.channel]}), consumer_generation_id=1
        )
        self._stopped = asyncio.Event()
        self._read_offset: dict[TP, int] = {}
        self._unacked_messages: weakref.WeakSet[Any] = weakref.WeakSet()
        self._buffered_partitions: set[TP] = set()
        self.bulk_topics = frozenset({tp.topic})
        self.should_stop = False
        self.flow_active = True
        self.suspend_flow = asyncio.Event()
        fetched = _Fetched([record])  # as the bulk topics' getall hands them out
        fetched.start, fetched.end = record.offset, record.offset + 1
        self.fetches = [{tp: fetched}]
        #: the blocks still tracked while the rebalance waits (Faust's wait_empty)
        self.tracked_at_rebalance: int | None = None

    async def _wait_next_records(self, _timeout: float) -> tuple[dict[TP, Any], None]:
        if self.fetches:
            return self.fetches.pop(), None
        # the rebalance: flow suspended, the queues cleared, then wait_empty
        self.flow_active = False
        self.channel.items.clear()
        gc.collect()
        self.tracked_at_rebalance = len(self._unacked_messages)
        self._stopped.set()
        return {}, None

    async def wait_first(self, *coros: Any) -> None:
        await coros[0]
        for other in coros[1:]:
            other.close()

    async def callback(self, _message: Any) -> None:
        raise AssertionError("a bulk topic's record went the per-message path")


def test_a_block_the_rebalance_cleared_from_the_queue_is_not_waited_for() -> None:
    """The drain loop's own reference kept the last block it queued alive after a
    rebalance cleared the queue; the rebalance waited for it (wait_empty) and the row
    worker published nothing more (finding 8, docs/reliability.md's F6)."""
    tp = TP("shop.public.bulk", 0)
    consumer = _DrainingConsumer(tp, SimpleNamespace(offset=1465))
    fetcher = SimpleNamespace(_stopped=asyncio.Event())
    drain = bulk_consumer(frozenset({tp.topic}), 100)._drain_messages
    asyncio.run(drain(consumer, fetcher))  # type: ignore[arg-type]
    assert consumer._read_offset == {tp: 1465}
    assert consumer.tracked_at_rebalance == 0


class _PerMessageConsumer:
    """What ``_BulkConsumer._drain_messages`` reads of its consumer for a topic read
    message by message: one fetch of two records, whose callback puts each on a full
    queue of mode's own, as Faust's conductor does."""

    def __init__(self, tp: TP, queue: Any) -> None:
        from mode import Service

        self.app = SimpleNamespace(topics=SimpleNamespace(_tp_index={}), consumer_generation_id=1)
        self._stopped = asyncio.Event()
        self._read_offset: dict[TP, int] = {}
        self._unacked_messages: set[Any] = set()
        self._buffered_partitions: set[TP] = set()
        self.bulk_topics: frozenset[str] = frozenset()
        self.should_stop = False
        self.flow_active = True
        self.suspend_flow = asyncio.Event()
        self.fetches = [{tp: [SimpleNamespace(offset=7), SimpleNamespace(offset=8)]}]
        self.queue = queue
        self.tried: list[int] = []
        self.wait_first = Service().wait_first

    async def _wait_next_records(self, _timeout: float) -> tuple[dict[TP, Any], None]:
        if self.fetches:
            return self.fetches.pop(), None
        self._stopped.set()
        return {}, None

    def _to_message(self, _tp: TP, record: Any) -> Any:
        return record

    async def callback(self, message: Any) -> None:
        self.tried.append(message.offset)
        await self.queue.put(message)


def test_a_message_whose_put_a_rebalance_cancels_drops_the_rest_of_the_fetch() -> None:
    """A topic read message by message (the promotions topic) meets a rebalance's
    clearing as a block does: the put it cancels drops the message and the rest of the
    fetch (read again from the committed offset), and the fetcher goes on. The
    cancellation came out of the callback before and crashed the fetcher."""
    from mode.utils.queues import FlowControlEvent, ThrowableQueue

    async def scenario() -> _PerMessageConsumer:
        flow = FlowControlEvent()
        flow.resume()
        queue: ThrowableQueue[Any] = ThrowableQueue(maxsize=1, flow_control=flow)
        await queue.put("full")
        tp = TP("shop.promotions", 0)
        consumer = _PerMessageConsumer(tp, queue)
        drain = bulk_consumer(frozenset({"shop.bulk"}), 100)._drain_messages
        draining = asyncio.ensure_future(drain(consumer, SimpleNamespace(_stopped=asyncio.Event())))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        queue.clear()  # what the rebalance does
        await asyncio.wait_for(draining, 5)
        assert queue.qsize() == 0
        return consumer

    consumer = asyncio.run(scenario())
    assert consumer.tried == [7]  # the second message of the fetch was not tried


def _batches(*batches: list[int]) -> Any:
    """aiokafka's own record batches holding ``batches``' offsets, as a fetch returns them
    (offsets missing between them: compacted away)."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder
    from aiokafka.record.memory_records import MemoryRecords

    data = b""
    for offsets in batches:
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=0,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 20,
        )
        first = offsets[0]
        for offset in offsets:
            builder.append(offset - first, timestamp=0, key=b"k", value=b"v", headers=[])
        buffer = builder.build()
        buffer[0:8] = first.to_bytes(8, "big")  # the batch's base offset
        data += bytes(buffer)
    return MemoryRecords(data)


def test_a_bulk_topics_records_come_with_the_positions_before_and_after_them() -> None:
    """Exactly once commits a block only where the last commit ended: the fetch position
    before the block and after it, which offsets alone cannot tell (a compacted gap)."""
    from aiokafka.consumer.fetcher import FetchResult, PartitionRecords
    from aiokafka.structs import TopicPartition

    from bizevents.translators._faust import _take_bulk_records

    _take_bulk_records(frozenset({"bulk"}))
    tp = TopicPartition("bulk", 0)
    state = SimpleNamespace(paused=False, position=3)
    state.consumed_to = lambda offset: setattr(state, "position", offset)
    assignment = SimpleNamespace(active=True, state_value=lambda _tp: state)
    records = PartitionRecords(tp, _batches([5, 7], [9, 10, 12]), [], 3, None, None, False, 0)
    result = FetchResult(tp, assignment=assignment, partition_records=records, backoff=0)
    first = result.getall(max_records=2)
    assert [r.offset for r in first] == [5, 7] and (first.start, first.end) == (3, 8)
    rest = result.getall()
    assert [r.offset for r in rest] == [9, 10, 12] and (rest.start, rest.end) == (8, 13)
    other = TopicPartition("other", 0)
    plain = PartitionRecords(other, _batches([0]), [], 0, None, None, False, 0)
    state.position = 0
    kept = FetchResult(other, assignment=assignment, partition_records=plain, backoff=0).getall()
    assert type(kept) is list and [r.offset for r in kept] == [0]


#: A Faust app whose crash begins no stop (as Faust's did at times, docs/reliability.md),
#: in a worker's own process with a bound of half a second; then left waiting.
_NEVER_STOPS = """
import asyncio
from bizevents.translators._faust import crash

class App:
    exit_after_crash_s = %s

    async def crash(self, exc):
        self.crash_reason = exc

async def main():
    await crash(App(), RuntimeError("boom"))
    await asyncio.sleep(3)

asyncio.run(main())
"""


def test_a_crashed_worker_that_does_not_stop_exits_with_its_sentence() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _NEVER_STOPS % 0.5], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        "error: the translator worker stopped: RuntimeError: boom"
        " (not stopped 0.5 s after: exiting)\n"
    )
    # an app run in a process of its caller's (no bound set) is left to its caller
    kept = subprocess.run(
        [sys.executable, "-c", _NEVER_STOPS % None], capture_output=True, text=True, timeout=30
    )
    assert (kept.returncode, kept.stderr) == (0, "")
