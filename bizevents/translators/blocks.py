"""Fetched blocks through the translation core, written in one batch per output partition
and acknowledged in fetch order once Kafka has the batches."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import structlog
from faust.types import TP

from bizevents.contracts.business import HEADER_SOURCE_OFFSET, dead_letter_cause
from bizevents.plumbing.errors import TerminalError, TransientError
from bizevents.plumbing.kafka import partition_for
from bizevents.plumbing.parking import is_parked
from bizevents.plumbing.process import settle_collector
from bizevents.translators._faust import (
    BlockAcker,
    RecordBlock,
    aiokafka_producer,
    block_transaction,
    crash,
)
from bizevents.translators.metrics import WorkerStats
from bizevents.translators.pipeline import Pipeline
from bizevents.translators.produce import Send, send_batches
from bizevents.translators.records import OutRecord, Result

__all__ = ["BlockProcessor", "BlockRunner", "PipelineProcessor"]

log = structlog.get_logger("translate")

#: Records translated between two turns of the event loop (the producer sends meanwhile).
CHUNK: Final = 1000
#: Fetched blocks queued for the agent; more waits in the fetcher (bounded memory).
QUEUED_BLOCKS: Final = 2
#: How long a block waits for the consumer's thread (a seek, the committed offset); a
#: thread that stops answers nothing, and a worker stopping meanwhile must not hang.
THREAD_WAIT_S: Final = 10.0
#: How long a block is retried when the registry (or another peer) is unreachable.
RETRY_BACKOFF_S: Final = (0.5, 1.0, 2.0, 5.0)


class BlockProcessor(Protocol):
    """Records of one partition's block in, records to produce and counts out."""

    def __call__(self, topic: str, partition: int, records: Sequence[Any]) -> Result: ...


class PipelineProcessor:
    """The translation core, fed with aiokafka's records as they are (they have what
    :class:`~bizevents.translators.pipeline.Record` reads; the block names their partition)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def __call__(self, topic: str, partition: int, records: Sequence[Any]) -> Result:
        return self.pipeline.process_partition(topic, partition, records)


@dataclass
class _Inflight:
    block: RecordBlock
    task: asyncio.Future[None]


@dataclass
class BlockRunner:
    """What the agent does with each block: process, produce, acknowledge in order."""

    app: Any
    processor: BlockProcessor
    stats: WorkerStats
    max_inflight: int
    #: Where the shadows' comparisons go (None: no shadow runs; the app's timer calls
    #: :meth:`publish_shadows`).
    shadows_topic: str | None = None
    #: Awaited before each block is translated, with a function that waits for every
    #: earlier block's outputs, the block's partition and its first offset (the
    #: promotions' hand-over, :mod:`bizevents.translators.promoting`).
    before: Callable[[Callable[[], Awaitable[None]], TP, int], Awaitable[None]] | None = None
    _chain: deque[asyncio.Future[None]] = field(default_factory=deque)
    _partitions: dict[str, int] = field(default_factory=dict)
    _acker: BlockAcker | None = None
    #: Partition -> (generation, the position its next block must start at).
    _resume_at: dict[TP, tuple[int, int]] = field(default_factory=dict)

    async def handle(self, block: RecordBlock) -> None:
        """Translate ``block``, send its outputs, acknowledge it in fetch order.

        A block is handled only where its partition's last block ended. A block of an
        earlier generation is left to its partition's owner (the rebalance sought back
        to the committed offset). A block that starts elsewhere (one before it was
        dropped, or cancelled, while the worker went on) is dropped and its partition
        sought back to that end: nothing is acknowledged, or committed, past records
        that were never translated (docs/reliability.md, findings 9 and 10)."""
        tp = block.tp
        bound = log.bind(
            topic=tp.topic,
            partition=tp.partition,
            offset=block.first_offset,
            last=block.last_offset,
        )
        generation = self.app.consumer_generation_id
        if block.generation_id != generation:
            self._drop(block, bound, "an earlier generation's")
            return
        if self.app.should_stop or self.app.crashed:
            self._drop(block, bound, "the worker stops")
            return
        resume = await self._resume_position(tp, generation)
        if resume is None:
            self._drop(block, bound, "the group's committed offset did not come")
            return
        if block.start != resume:
            self._drop(
                block, bound, f"it starts at {block.start}, the last block ended at {resume}"
            )
            await self._seek_back(tp, generation, resume)
            return
        if self.before is not None:  # (a dropped block hands nothing over)
            await self.before(self._settled, tp, block.first_offset)
        if not self.stats.first_block_at:  # (the benches' clock starts here)
            self.stats.first_block_at = time.time()
            settle_collector()
        try:
            if self.app.in_transaction:
                await self._handle_in_transaction(block, bound)
            else:
                await self._handle_at_least_once(block, bound)
        except asyncio.CancelledError:
            # Faust restarts the agent and the worker goes on, fetched past the block
            # (docs/reliability.md, finding 9): seek back at once, for a partition whose
            # next block may be long in coming; a worker that stops, or a seek that does
            # not come, leaves it to the next block's check, or the next owner
            self.app.consumer._unacked_messages.discard(block)
            if not (self.app.should_stop or self.app.crashed):
                await self._seek_back(tp, generation, resume)
            raise
        self._resume_at[tp] = (generation, block.end)

    async def _handle_at_least_once(self, block: RecordBlock, bound: Any) -> None:
        """The block's outputs sent, acknowledged once Kafka has them and every earlier
        block's (up to ``max_inflight`` blocks wait at once)."""
        tp = block.tp
        futures: list[asyncio.Future[Any]] = []
        records = block.records
        for start in range(0, len(records), CHUNK):
            # a block is processed in chunks, each produced at once, so the producer
            # sends while the next chunk is translated (the work is CPU-bound)
            result = await self._translate(tp, records[start : start + CHUNK], bound)
            futures += await self.produce(result.records)
            await asyncio.sleep(0)
        self._set_lag(block)
        previous = self._chain[-1] if self._chain else None
        stamp = block.records[-1].timestamp
        self._chain.append(asyncio.ensure_future(self._settle(previous, block, futures, stamp)))
        while len(self._chain) > self.max_inflight:
            await self._chain.popleft()
        while self._chain and self._chain[0].done():
            self._chain.popleft().result()

    async def _handle_in_transaction(self, block: RecordBlock, bound: Any) -> None:
        """Exactly once: the block's outputs and the position after it in one Kafka
        transaction of its input partition's producer, committed before the next block."""
        tp = block.tp
        try:
            async with block_transaction(self.app, tp, block.end) as producer:
                futures: list[asyncio.Future[Any]] = []
                for start in range(0, len(block.records), CHUNK):
                    chunk = block.records[start : start + CHUNK]
                    result = await self._translate(tp, chunk, bound)
                    futures += await self._send_batches(producer, result.records)
                    await asyncio.sleep(0)
                if futures:
                    await asyncio.gather(*futures)
        except Exception as exc:
            log.error(
                "transaction failed; stopping (its outputs are aborted, its block is read again)",
                topic=tp.topic,
                partition=tp.partition,
                offset=block.first_offset,
                error=f"{type(exc).__name__}: {exc}",
            )
            await crash(self.app, exc)
            raise
        self._set_lag(block)
        self._acknowledge(block, block.records[-1].timestamp)

    def _drop(self, block: RecordBlock, bound: Any, why: str) -> None:
        """``block`` forgotten, with a line (a lost block is found by its offsets)."""
        self.app.consumer._unacked_messages.discard(block)
        bound.info("block dropped; read again", why=why, generation=block.generation_id)

    async def _resume_position(self, tp: TP, generation: int) -> int | None:
        """Where ``tp``'s next block must start: where its last block handled in this
        generation ended, or, for the generation's first, the group's committed offset
        as the broker has it (None when the consumer's thread does not answer within
        :data:`THREAD_WAIT_S`: the block is dropped, the next one asks again)."""
        known = self._resume_at.get(tp)
        if known is not None and known[0] == generation:
            return known[1]
        # every partition held and not yet started in this generation, in one question
        consumer = self.app.consumer
        unknown = {
            held
            for held in consumer.assignment()
            if self._resume_at.get(held, (None, 0))[0] != generation
        } | {tp}
        try:
            positions: dict[TP, int] = await asyncio.wait_for(
                consumer.committed_positions(unknown), THREAD_WAIT_S
            )
        except TimeoutError:
            return None
        for held, position in positions.items():
            self._resume_at[held] = (generation, position)
        return positions.get(tp)

    async def _seek_back(self, tp: TP, generation: int, position: int) -> None:
        """Seek ``tp`` back to ``position``, in the consumer's thread, between two fetches
        (Faust's own ``seek`` is not). The blocks fetched before the seek come after it
        and are dropped in turn (each seeks again: harmless, it only restarts the fetch
        there). A partition no longer held, or held in a later generation, was sought
        back to its committed offset by the rebalance."""
        consumer = self.app.consumer
        if generation != self.app.consumer_generation_id or tp not in consumer.assignment():
            return
        log.warning(
            "reading again from where the partition's last block ended",
            topic=tp.topic,
            partition=tp.partition,
            offset=position,
        )
        with suppress(TimeoutError):  # the next block's check seeks again
            await asyncio.wait_for(consumer.seek_wait({tp: position}), THREAD_WAIT_S)

    async def _translate(self, tp: TP, records: Sequence[Any], bound: Any) -> Result:
        """One chunk through the processor, counted."""
        result = await self._process(tp, records, bound)
        self.stats.add(
            tp.topic, result.counts, result.undecodable, result.tombstones, result.unrouted
        )
        if result.shadows:
            self.stats.compared(tp.topic, tp.partition, result.shadows)
        for out in result.records:
            if out.dead_letter and out.headers:  # not a parked-topic state record
                self._log_dead_letter(out, bound)
        return result

    def _set_lag(self, block: RecordBlock) -> None:
        highwater = self.app.consumer.highwater(block.tp)
        if highwater is not None:
            self.stats.set_lag(
                block.tp.topic, block.tp.partition, int(highwater) - block.last_offset - 1
            )

    async def _settled(self) -> None:
        """Wait until every block handed in so far is acknowledged."""
        while self._chain:
            await self._chain.popleft()

    async def drain(self) -> None:
        await self._settled()
        if self.shadows_topic is not None:
            await self.publish_shadows()

    async def publish_shadows(self) -> None:
        """The figures of the partitions whose comparisons changed, to the compacted
        shadows topic (each record holds a partition's figures so far: a member that
        takes the partition over goes on from them)."""
        assert self.shadows_topic is not None
        with self.stats._lock:
            records = self.stats.shadows.dirty()
        producer = aiokafka_producer(self.app)
        for key, value in records:
            await producer.send(self.shadows_topic, value, key=key, partition=0)

    @staticmethod
    def _log_dead_letter(out: OutRecord, bound: Any) -> None:
        headers = dict(out.headers)
        stage, reason = dead_letter_cause(headers)
        bound.warning(
            "parked" if is_parked(headers) else "dead-lettered",
            offset=int(headers.get(HEADER_SOURCE_OFFSET) or b"-1"),
            translator=out.translator or None,
            stage=stage,
            reason=reason,
        )

    async def _process(self, tp: TP, records: Sequence[Any], bound: Any) -> Result:
        """The processor's result; an unreachable peer (the registry) is retried."""
        attempt = 0
        while True:
            try:
                return self.processor(tp.topic, tp.partition, records)
            except TerminalError as exc:
                # on_error = "fail", or the parking bound: the worker stops (an agent's
                # crash alone would leave the worker running without its agent)
                bound.error("stopping the worker", error=str(exc))
                await crash(self.app, exc)
                raise
            except TransientError as exc:
                delay = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
                attempt += 1
                bound.warning(
                    "block failed, retrying", error=str(exc), attempt=attempt, delay=delay
                )
                await asyncio.sleep(delay)

    async def partition_count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            producer = aiokafka_producer(self.app)
            count = self._partitions[topic] = len(await producer.partitions_for(topic))
        return count

    async def produce(self, records: Sequence[OutRecord]) -> list[asyncio.Future[Any]]:
        """Send ``records`` (each to its key's partition) outside any transaction; their
        acknowledgements."""
        if not records:
            return []
        return await self._send_batches(aiokafka_producer(self.app), records)

    async def _send_batches(
        self, producer: Any, records: Sequence[OutRecord]
    ) -> list[asyncio.Future[Any]]:
        """``records`` appended to one batch per output partition of ``producer``."""
        sends: list[Send] = []
        for out in records:
            count = self._partitions.get(out.topic) or await self.partition_count(out.topic)
            sends.append(
                (out.topic, partition_for(out.key, count), out.key, out.value, out.headers)
            )
        return await send_batches(producer, sends, "translate.max_batch_bytes")

    async def _settle(
        self,
        previous: asyncio.Future[None] | None,
        block: RecordBlock,
        futures: list[asyncio.Future[Any]],
        timestamp_ms: int | None,
    ) -> None:
        try:
            if previous is not None:
                await previous
            if futures:
                await asyncio.gather(*futures)
        except Exception as exc:
            log.error(
                "produce failed; stopping without committing the block",
                topic=block.tp.topic,
                partition=block.tp.partition,
                offset=block.first_offset,
                error=f"{type(exc).__name__}: {exc}",
            )
            await crash(self.app, exc)
            raise
        self._acknowledge(block, timestamp_ms)

    def _acknowledge(self, block: RecordBlock, timestamp_ms: int | None) -> None:
        """The block's offsets into Faust's bookkeeping, counted."""
        if self._acker is None:
            self._acker = BlockAcker(self.app.consumer)
        committable = self._acker.ack(block)
        now = time.time()
        if committable:  # not a block of an earlier generation (it is read again)
            self.stats.acked(len(block.records), now)
        if timestamp_ms is not None and timestamp_ms > 0:
            self.stats.observe_latency(max(now - timestamp_ms / 1000.0, 0.0))
