"""The lean path under a Faust agent: whole fetched blocks instead of one event at a time.

Faust's own per-event path (a task race per message, an Event and a Message per
record, per-event acks and sensors) caps a worker at a few thousand records a second
on this machine. Here the consumer hands each fetched block of *one partition* to the
agent as one item, and the agent acknowledges the block's whole offset range into
Faust's commit bookkeeping once the records produced from it are acknowledged.

Faust keeps everything else: group membership, its assignor, rebalances (flow
control, generation ids, ``wait_empty`` on revoke and stop), and the commit timer.

This module touches private attributes of faust-streaming 0.15.3 (pinned):
``Consumer._drain_messages``, ``_wait_next_records``, ``_read_offset``,
``_unacked_messages``, ``_acked``, ``_acked_index``, ``_committed_offset``,
``_n_acked``, ``_to_message``, ``_buffered_partitions`` and ``app.topics._tp_index``;
``Producer._transaction_producers`` and ``_trn_locks`` (exactly once, see
:func:`block_transaction`); and of aiokafka 0.14,
``AIOKafkaConsumer._fetch_max_wait_ms``, which Faust hard-codes to 1,500 ms: an
empty fetch may be held that long, and on the embedded broker that delays records
that arrive meanwhile (docs/broker.md), so the worker sets its own; and
``FetchResult.getall`` with its ``_partition_records`` (their ``next_fetch_offset``) and
``_topic_partition``: a bulk topic's records come with the fetch positions before and after
them, so that a block is handled only where its partition's last block ended
(:class:`RecordBlock`); and
``PartitionRecords._consumer_record`` with its ``_key_deserializer`` and
``_value_deserializer``: aiokafka copies every record its batch reader made into a
``ConsumerRecord`` of eleven fields (0.8 µs a record, on the consumer's thread, under
the GIL the translation needs), and for the bulk topics the worker takes the batch
reader's own records instead (offset, timestamp, key, value and headers: what the
core reads; the block names the partition). Other topics, and a consumer with
deserializers, keep aiokafka's records.
Faust's table manager sleeps 1 s when it starts, before the consumer subscribes, so
that tables can register; the worker has no tables (``add`` refuses one after the
start anyway), so :class:`TablelessManager` starts without it, through the private
``TableManager._update_channels``.
aiokafka's ``Sender._find_coordinator`` (private) asks again only on three errors; on any
other, a transactional producer's sender stops for good ("Unexpected error during batch
delivery") and Faust's worker with it. :func:`_find_coordinator_through_moves` makes every
retriable one (a coordinator loading or moved, a connection closed: a node killed, a
cluster restarting) another try, as the three are (exactly once, L3 in
docs/reliability.md).
:data:`PRIVATE_CONSUMER_ATTRIBUTES` names the instance ones; a test checks them, and
the integration tests run the path against the real broker.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, cast

from aiokafka.consumer.fetcher import FetchResult, PartitionRecords
from aiokafka.errors import KafkaError
from aiokafka.producer.sender import Sender
from faust.tables import TableManager
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.transport.drivers.aiokafka import Producer as AIOKafkaProducer
from faust.types import TP

from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import stay_in_group_where_needed

__all__ = [
    "EXIT_AFTER_CRASH_S",
    "PRIVATE_CONSUMER_ATTRIBUTES",
    "BlockAcker",
    "RecordBlock",
    "TablelessManager",
    "aiokafka_producer",
    "block_transaction",
    "bulk_consumer",
    "commit_through",
    "crash",
    "deliver",
    "stopped_sentence",
    "timed_producer",
]

#: How long a worker that crashed (a terminal error) has to stop before it exits anyway.
EXIT_AFTER_CRASH_S: Final = 30.0


def stopped_sentence(exc: BaseException) -> str:
    """What the worker says when a crash stopped it."""
    return f"the translator worker stopped: {type(exc).__name__}: {exc}"


async def crash(app: Any, exc: BaseException) -> None:
    """Crash ``app``: Faust stops the worker, which exits 1 with :func:`stopped_sentence`.

    A stop Faust does not finish left the process up, its promotions follower still
    reading (docs/reliability.md: a final commit that waited for ever on the crashed
    consumer thread, :meth:`_BulkConsumer._commit`). So in a worker's own process
    (``app.exit_after_crash_s``, which ``run_worker`` sets) it says the sentence that
    long after and exits 1 without a clean stop: what it acknowledged last is read
    again by the partitions' next owner, and an open transaction is aborted by its
    timeout or fenced by that owner."""
    within_s = getattr(app, "exit_after_crash_s", None)
    if within_s is not None:
        timer = threading.Timer(within_s, _exit_anyway, (exc, within_s))
        timer.daemon = True
        timer.start()
    await app.crash(exc)


def _exit_anyway(exc: BaseException, within_s: float) -> None:
    print(
        f"error: {stopped_sentence(exc)} (not stopped {within_s:g} s after: exiting)",
        file=sys.stderr,
        flush=True,
    )
    os._exit(1)


PRIVATE_CONSUMER_ATTRIBUTES: Final = (
    "_read_offset",
    "_unacked_messages",
    "_acked",
    "_acked_index",
    "_committed_offset",
    "_n_acked",
    "_buffered_partitions",
)


_find_coordinator = Sender._find_coordinator


async def _find_coordinator_through_moves(
    self: Sender, coordinator_type: Any, coordinator_key: str
) -> Any:
    """aiokafka's own, asked again after any retriable error: it wraps every error it does
    not retry itself in a bare ``KafkaError`` whose cause is the broker's answer."""
    while True:
        try:
            return await _find_coordinator(self, coordinator_type, coordinator_key)
        except KafkaError as exc:
            cause = exc.__cause__
            if not (isinstance(cause, KafkaError) and cause.retriable):
                raise
        await self.client.force_metadata_update()
        await asyncio.sleep(self._retry_backoff)


Sender._find_coordinator = _find_coordinator_through_moves


class RecordBlock:
    """One fetched block of records of one partition.

    It is also the token Faust's ``wait_empty`` waits for (it sits in the consumer's
    weak set of unacknowledged messages until :func:`ack_block`), so a rebalance or a
    stop waits until the block's outputs are acknowledged and its offsets committed.
    A block still queued when a rebalance clears the agents' queues is dropped and
    garbage-collected; its offsets were never acknowledged, so it is read again.

    ``start`` and ``end`` are the consumer's positions before and after the block: the
    block holds every record of the partition from ``start`` up to ``end`` (offsets between
    its records were compacted away or are transaction markers). A block that starts
    where the previous one ended continues it, whatever the offsets' gaps.
    """

    __slots__ = (
        "__weakref__",
        "acked",
        "end",
        "generation_id",
        "records",
        "refcount",
        "start",
        "tp",
    )

    def __init__(
        self,
        tp: TP,
        records: Sequence[Any],
        generation_id: int,
        start: int | None = None,
        end: int | None = None,
    ) -> None:
        self.tp = tp
        self.records = records
        self.generation_id = generation_id
        self.start = int(records[0].offset) if start is None else start
        self.end = int(records[-1].offset) + 1 if end is None else end
        self.acked = False
        self.refcount = 1  # read by Faust's wait_empty warning

    @property
    def first_offset(self) -> int:
        return int(self.records[0].offset)

    @property
    def last_offset(self) -> int:
        return int(self.records[-1].offset)

    def __repr__(self) -> str:
        where = f"{self.tp.topic}[{self.tp.partition}]"
        return f"<RecordBlock {where}@{self.first_offset}..{self.last_offset}>"


#: aiokafka's own ``PartitionRecords._consumer_record``.
_CONSUMER_RECORD: Final = PartitionRecords._consumer_record
#: The topics whose records come as the batch reader made them (see the module's doc).
_BULK_TOPICS: set[str] = set()


def _bulk_record(self: PartitionRecords, tp: TP, record: Any) -> Any:
    """``PartitionRecords._consumer_record`` for the bulk topics: the record as it is."""
    plain = self._key_deserializer is None and self._value_deserializer is None
    if plain and tp.topic in _BULK_TOPICS:
        return record
    return _CONSUMER_RECORD(self, tp, record)


class _Fetched(list):  # type: ignore[type-arg]
    """A bulk topic's records as ``FetchResult.getall`` hands them out, with the
    partition's positions before and after them."""

    __slots__ = ("end", "start")
    start: int
    end: int


#: aiokafka's own ``FetchResult.getall``.
_GETALL: Final = FetchResult.getall


def _getall_with_positions(self: FetchResult, max_records: int | None = None) -> Any:
    """``FetchResult.getall``; a bulk topic's records come as :class:`_Fetched`. aiokafka
    hands records out only from the partition's position (its ``check_assignment``), so
    the fetch's next offset before the call is where they start."""
    partition_records = self._partition_records
    if partition_records is None:  # nothing fetched
        return _GETALL(self, max_records)
    start = partition_records.next_fetch_offset
    got = _GETALL(self, max_records)
    if not got or self._topic_partition.topic not in _BULK_TOPICS:
        return got
    fetched = _Fetched(got)
    fetched.start = start
    fetched.end = partition_records.next_fetch_offset
    return fetched


def _take_bulk_records(topics: frozenset[str]) -> None:
    """From now on, records of ``topics`` come from aiokafka as its batch reader made
    them, with their fetch positions (in this process; every other topic as before)."""
    _BULK_TOPICS.update(topics)
    PartitionRecords._consumer_record = _bulk_record
    FetchResult.getall = _getall_with_positions


class _BulkConsumerThread(AIOKafkaConsumerThread):
    """Faust's consumer thread, with the consumer's own ``fetch_max_wait_ms``, taking
    the bulk topics' records as aiokafka's batch reader made them."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = self.consumer.fetch_max_wait_ms  # type: ignore[attr-defined]
        _take_bulk_records(self.consumer.bulk_topics)  # type: ignore[attr-defined]
        return consumer

    async def on_thread_stop(self) -> None:
        """Stop without leaving the group where the broker needs it, as the transaction
        worker does (:func:`~bizevents.plumbing.kafka.stay_in_group_where_needed`)."""
        if self._consumer is not None:
            stay_in_group_where_needed(self._consumer)
        await super().on_thread_stop()


class _BulkConsumer(AIOKafkaConsumer):
    """Faust's aiokafka consumer, draining blocks of the bulk topics to their agents."""

    bulk_topics: frozenset[str] = frozenset()
    fetch_max_wait_ms: int = 1500

    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return _BulkConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _commit(self, offsets: Mapping[TP, int]) -> bool:
        """Faust's commit through the consumer thread, but none once the app crashed.

        A crash marks the consumer thread crashed too, and the thread then stops on its
        own: it stops taking calls (its method queue), then closes its consumer. A
        commit asked in between, while the consumer still held its partitions (the
        stop's last commit, or a periodic one), was queued where nothing reads and
        waited for ever: the worker hung instead of exiting (1 run in 24 of a worker
        stopped by ``on_error = "fail"``, at DEBUG logs beside three busy loops; every
        run once that window is held open). What was acknowledged since the last commit
        is read again by the partitions' next owner."""
        if self._thread.crashed:
            self.log.info("no commit after a crash: the consumer thread stops on its own")
            return False
        return bool(await super()._commit(offsets))

    async def _commit_offsets(
        self, offsets: Mapping[TP, int], start_new_transaction: bool = True
    ) -> bool:
        """Faust's commit; exactly once, its bookkeeping only: each block sent its next
        offset in its own transaction (:func:`block_transaction`). Faust reads the
        offsets to commit before it waits for the partition's transaction, which a block
        holds, and sent them after that block's commit: the group's offset went back a
        block until the next one's commit, and a worker killed meanwhile had its
        successor translate that block again, its events committed twice."""
        if not self.in_transaction:
            return bool(await super()._commit_offsets(offsets, start_new_transaction))
        assignment = self.assignment()
        self._committed_offset.update({tp: o for tp, o in offsets.items() if tp in assignment})
        return True

    async def committed_positions(self, tps: set[TP]) -> dict[TP, int]:
        """Where the group's committed offsets put the reading of ``tps``, as the broker
        has them now: each committed offset, or the partition's first offset where none
        is (``auto_offset_reset = earliest``). One OffsetFetch, and one ListOffsets for
        the partitions without a commit, in the consumer's thread (Faust's private
        ``call_thread`` and ``_ensure_consumer``; aiokafka's private ``_coordinator``)."""
        thread: Any = self._thread
        consumer = thread._ensure_consumer()

        async def ask() -> dict[TP, int]:
            commits = await consumer._coordinator.fetch_committed_offsets(list(tps))
            found = {TP(*tp): c.offset for tp, c in commits.items() if c.offset >= 0}
            missing = [tp for tp in tps if tp not in found]
            if missing:
                earliest = await consumer.beginning_offsets(missing)
                found.update({TP(*tp): offset for tp, offset in earliest.items()})
            return found

        return dict(await thread.call_thread(ask))

    async def _drain_messages(self, fetcher: Any) -> None:  # the Fetcher's loop
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        tp_index = self.app.topics._tp_index  # type: ignore[attr-defined]
        set_read_offset = self._read_offset.__setitem__
        unacked = self._unacked_messages
        callback = self.callback
        bulk = self.bulk_topics
        while not (consumer_should_stop() or fetcher_should_stop()):
            records, active = await self._wait_next_records(1.0)
            if not records or self.should_stop:
                continue
            if not self.flow_active:
                # a rebalance is under way: drop what was fetched, seek back to committed
                await self.perform_seek()
                continue
            generation = self.app.consumer_generation_id
            for tp, fetched in records.items():
                if not fetched:
                    continue
                if active is not None and tp not in active and tp not in self._buffered_partitions:
                    continue
                if tp.topic in bulk:
                    # a bulk topic's records come as _Fetched: their positions are known
                    at = cast(_Fetched, fetched)
                    block = RecordBlock(tp, fetched, generation, at.start, at.end)
                    unacked.add(block)  # type: ignore[arg-type]
                    for channel in tp_index[tp]:
                        await deliver(self, channel.queue.put(block), self.suspend_flow)
                    # Only the queues may hold it now: a rebalance clears them, then
                    # waits until no block is tracked (wait_empty). Kept here, the last
                    # block queued outlived the clearing and the rebalance waited for it
                    # for good (docs/reliability.md, finding 8).
                    del block
                else:  # any other topic keeps Faust's per-message path
                    for record in fetched:
                        message = self._to_message(tp, record)
                        if not await deliver(self, callback(message), self.suspend_flow):
                            break  # dropped: read again from the committed offset
                set_read_offset(tp, fetched[-1].offset)


async def deliver(service: Any, put: Awaitable[Any], suspended: Any) -> bool:
    """Await ``put`` (a block onto an agent's queue, or a message through Faust's
    callback) unless ``suspended`` is set first (Faust's ``wait_first``, as its own
    fetcher does); False when a rebalance's clearing cancelled it.

    A rebalance clears the queues, which cancels a put waiting for room (mode's
    ``ThrowableQueue.clear``): the record is dropped, as the rest of the fetch, and read
    again from the committed offset once the partitions are assigned again. That
    cancellation came out of ``wait_first`` before and crashed the fetcher, and the
    worker exited 1 (the fault suite, as the broker came back from a 30 s pause)."""
    try:
        await service.wait_first(put, suspended.wait())
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # this task itself is cancelled: a stop
        return False
    return True


def bulk_consumer(topics: frozenset[str], fetch_max_wait_ms: int) -> type[AIOKafkaConsumer]:
    """A consumer class draining ``topics`` block by block, for ``app.transport.Consumer``;
    an empty fetch is held at most ``fetch_max_wait_ms``."""
    return type(
        "BulkConsumer",
        (_BulkConsumer,),
        {"bulk_topics": topics, "fetch_max_wait_ms": fetch_max_wait_ms},
    )


class _TimedProducer(AIOKafkaProducer):
    transaction_timeout_ms: int = 60_000

    def _settings_extra(self) -> Mapping[str, Any]:
        # Faust's transactional producers, one per input partition, are made with the
        # settings of this (its default) producer; Faust has no setting of its own for
        # the broker's transaction timeout (a producer without a transactional id
        # makes no use of it).
        return {**super()._settings_extra(), "transaction_timeout_ms": self.transaction_timeout_ms}


def timed_producer(transaction_timeout_s: float) -> type[AIOKafkaProducer]:
    """A producer class for ``app.transport.Producer`` whose transactional producers
    ask the broker for ``transaction_timeout_s`` (Faust leaves aiokafka's 60 s)."""
    return type(
        "TimedProducer",
        (_TimedProducer,),
        {"transaction_timeout_ms": int(transaction_timeout_s * 1000)},
    )


class TablelessManager(TableManager):
    """Faust's table manager for an app without tables: it starts at once.

    Faust's own waits 1 s first, for tables to register, and the consumer subscribes
    (and so joins the group) only after that: a second of every worker's start-up.

    ``before_assignment``, when set, runs at each assignment before the recovery that
    resumes the paused partitions: what must be known before any record of the new
    assignment is processed (the parked keys, docs/parking.md) is restored there. The
    ``on_partitions_assigned`` signal comes too late for that: the recovery may have
    resumed the partitions by then.
    """

    before_assignment: Callable[[], Awaitable[None]] | None = None

    async def on_start(self) -> None:
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()

    async def on_rebalance(
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        if self.before_assignment is not None:
            await self.before_assignment()
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)


async def commit_through(app: Any, tp: Any, offset: int) -> None:
    """Commit ``tp`` up to ``offset`` (every earlier block is acknowledged by now).
    Faust's commit may return having joined a commit already under way, which need
    not hold the latest acknowledgements: ask again until the committed offset
    (Faust's private ``_committed_offset``: the next offset to read) reaches it."""
    consumer = app.consumer
    for _ in range(200):
        await consumer.commit({tp})
        committed = consumer._committed_offset.get(tp)
        if committed is not None and committed >= offset:
            return
        if committed is None and not consumer._acked.get(tp):
            return  # nothing of this partition was ever read before this block
        await asyncio.sleep(0.05)
    raise TransientError(f"{tp.topic}[{tp.partition}] could not be committed up to {offset}")


def aiokafka_producer(app: Any) -> Any:
    """The aiokafka producer under Faust's producer (``Producer._producer``, private):
    the worker appends whole batches to it, which Faust's own ``send`` cannot."""
    return app.producer._producer


@asynccontextmanager
async def block_transaction(app: Any, tp: TP, next_offset: int) -> AsyncIterator[Any]:
    """The transactional producer of ``tp``'s input partition, for one block's outputs
    (``processing_guarantee = "exactly_once"``): on leaving, the block's next offset is
    sent into the same transaction, which is committed, and the next one begun.

    Faust keeps one transactional producer per assigned input partition (its id
    ``<app id>-<topic group>-<partition>``: the partition's next owner fences this one)
    in ``Producer._transaction_producers``, guarded by ``Producer._trn_locks``
    (private). Its own ``TransactionManager.send`` picks the producer by the *output*
    partition, which is right only for co-partitioned topics; here the outputs go
    with their input's offsets. Faust's commit timer sends no offsets of its own here
    (``_BulkConsumer._commit_offsets``)."""
    producer = app.producer
    group = app.assignor.group_for_topic(tp.topic)
    tid = f"{app.conf.id}-{group}-{tp.partition}"
    lock = producer._trn_locks.get(tid)
    if lock is None:
        raise RuntimeError(f"no transactional producer for {tp.topic}[{tp.partition}] ({tid})")
    async with lock:
        transactional = producer._transaction_producers.get(tid)
        if transactional is None:  # fenced: the partition's next owner took it over
            raise RuntimeError(f"the transactional producer {tid} was fenced")
        try:
            yield transactional
            await transactional.send_offsets_to_transaction({tp: next_offset}, app.conf.id)
            await transactional.commit_transaction()
        except BaseException:
            with suppress(Exception):
                await transactional.abort_transaction()
            raise
        finally:
            with suppress(Exception):
                await transactional.begin_transaction()


class BlockAcker:
    """Acknowledges blocks' offset ranges into Faust's bookkeeping, in fetch order.

    The range of a block starts where the previous acknowledged block of its
    partition ended (or at the committed offset), so offsets the broker never returns
    (compacted away, transaction markers) do not leave gaps that would stop commits.
    A block fetched in an earlier consumer generation is not acknowledged: its
    partition may have moved, and it will be read again (at least once).
    """

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self._next: dict[TP, tuple[int, int]] = {}  # tp -> (generation, next offset to ack)

    def ack(self, block: RecordBlock) -> int:
        """Acknowledge ``block``; returns how many offsets became committable."""
        consumer = self.consumer
        block.acked = True
        consumer._unacked_messages.discard(block)
        generation = consumer.app.consumer_generation_id
        if block.generation_id != generation:
            return 0
        tp = block.tp
        first, last = block.first_offset, block.last_offset
        committed = consumer._committed_offset[tp]
        known = self._next.get(tp)
        if known is not None and known[0] == generation:
            start = known[1]  # where the previous block of this partition ended
        elif committed is not None:
            start = committed  # the fetch of a new assignment starts at the committed offset
        else:
            start = first
        first = min(start, first)
        if committed is not None:
            first = max(first, committed)
        self._next[tp] = (generation, last + 1)
        if first > last:
            return 0
        offsets = range(first, last + 1)
        index = consumer._acked_index[tp]
        fresh = [o for o in offsets if o not in index] if index else list(offsets)
        consumer._acked[tp].extend(fresh)
        index.update(fresh)
        consumer._n_acked += len(fresh)
        return len(fresh)
