"""The parked topic's I/O, and re-drives carried out by the live row worker.

:mod:`bizevents.plumbing.parking` holds the parked keys as pure state; this module
is its edge: it reads the parked topic (restore at start and on every assignment),
follows it for the requests ``bizevents dlq`` writes (:class:`ParkedTopic`, which
the transaction worker's :mod:`bizevents.translators.txredrive` stands on too), and
carries each re-drive or discard out in the worker that owns the key's partition, in
the agent's event loop,
so that the key is unparked only when every change parked so far has been re-driven
and acknowledged, with no block translated between that check and the unpark
(docs/parking.md, "Re-drive").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from bizevents.contracts.business import HEADER_DLQ_REASON, HEADER_TRANSLATOR, dead_letter_cause
from bizevents.plumbing.kafka import partition_for
from bizevents.plumbing.member import restore_parked
from bizevents.plumbing.parking import (
    PARKED_EXTRA_HEADERS,
    ParkedKeys,
    Ref,
    Request,
    is_parked,
    ref_key,
    refs_behind,
)
from bizevents.plumbing.parkingio import read_requests, read_to_end
from bizevents.translators.pipeline import Pipeline
from bizevents.translators.records import OutRecord, SourceRecord, dead_letter_source
from bizevents.translators.txparking import HEADER_PARKED_KEY

__all__ = ["ParkedRecord", "ParkedTopic", "Redriver", "parked_records"]

log = structlog.get_logger("parking")


@dataclass(frozen=True, slots=True)
class ParkedRecord:
    """A parked change as the dead-letter topic holds it, its original headers apart."""

    source: SourceRecord
    translator: str
    stage: str
    reason: str
    dead_letter_offset: int


def parked_of(msg: Any) -> ParkedRecord | None:
    """The parked change a dead-letter message holds (None: not a parked record)."""
    headers = msg.headers() or []
    found = dict(headers)
    if not is_parked(found) or len(headers) < PARKED_EXTRA_HEADERS:
        return None
    if HEADER_PARKED_KEY in found:
        return None  # the transaction worker's (bizevents.translators.txparking)
    try:
        source = dead_letter_source(msg, PARKED_EXTRA_HEADERS)
    except ValueError:
        return None
    return ParkedRecord(
        source,
        (found.get(HEADER_TRANSLATOR) or b"").decode(),
        *dead_letter_cause(found),
        msg.offset(),
    )


def parked_records(messages: Sequence[Any], ref: Ref, after: int) -> list[ParkedRecord]:
    """``ref``'s parked changes among dead-letter ``messages`` with a source offset past
    ``after``, in source order, each once (a crash may have parked one twice)."""
    records = (p for p in map(parked_of, messages) if p is not None)
    return refs_behind(ref, after, ((_ref_of(p), p.source.offset, p) for p in records))


def _ref_of(parked: ParkedRecord) -> Ref:
    source = parked.source
    name = parked.translator.partition("@")[0]
    return name, source.topic, source.partition, source.key or b""


Produce = Callable[[Sequence[OutRecord]], Awaitable[list[asyncio.Future[Any]]]]


@dataclass(kw_only=True)
class ParkedTopic:
    """The parked topic as a worker knows it: the parked keys restored, and the requests
    followed; :meth:`start_owned` is called whenever they may have news (a subclass
    carries out those of the keys it owns)."""

    parking: ParkedKeys
    conf: dict[str, Any]
    parked_topic: str
    poll_s: float = 0.5
    requests: dict[str, Request] = field(default_factory=dict)
    position: int = 0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def restore(self) -> None:
        """Read the parked topic whole: the parked keys and the pending requests."""
        async with self._lock:
            messages = await restore_parked(
                self.conf, self.parked_topic, self.parking, self.requests
            )
            if messages:
                self.position = messages[-1].offset() + 1
            log.info(
                "parked keys restored",
                keys=len(self.parking.parked),
                pending=sum(r.status == "pending" for r in self.requests.values()),
            )
        self.start_owned()

    def started(self, request: Request) -> None:
        """Say that ``request`` is being carried out."""
        log.info(
            "carrying out a request",
            request=request.id,
            kind=request.kind,
            translator=f"{request.translator}@{request.version}",
            topic=request.topic,
            partition=request.partition,
        )

    async def follow(self) -> None:
        """Follow the parked topic for requests, for as long as the worker runs: one
        consumer, kept, whose fetch waits on the broker (not on the worker's CPU)."""
        from confluent_kafka import Consumer, TopicPartition

        await asyncio.sleep(self.poll_s)  # the first assignment's restore goes first
        consumer = Consumer(
            {
                **self.conf,
                "group.id": "bizevents-parked-follower",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": int(self.poll_s * 1000),
            }
        )
        fetch: asyncio.Future[list[Any]] | None = None
        try:
            consumer.assign([TopicPartition(self.parked_topic, 0, self.position)])
            while True:
                fetch = asyncio.ensure_future(asyncio.to_thread(consumer.consume, 500, self.poll_s))
                batch = await asyncio.shield(fetch)
                messages = [m for m in batch if m.error() is None]
                if messages:
                    async with self._lock:
                        read_requests(messages, self.requests)
                # also without news: a partition assigned since may hold pending requests
                self.start_owned()
        finally:
            if fetch is not None:  # the thread may still be in consume: close after it
                await asyncio.wait([fetch])
            consumer.close()

    def start_owned(self) -> None:
        """The requests may have news (nothing to do here)."""


@dataclass(kw_only=True)
class Redriver(ParkedTopic):
    """Restores the parked keys, follows the requests, and carries out those of keys in
    partitions this worker owns (see the module's doc)."""

    pipeline: Pipeline
    produce: Produce
    owned: Callable[[], set[tuple[str, int]]]
    partitions_of: Callable[[str], Awaitable[int]]
    load: Callable[[str, int], Any]
    on_counts: Callable[[str, Any], None] = lambda topic, counts: None
    running: dict[Ref, tuple[str, asyncio.Task[None]]] = field(default_factory=dict)

    async def stop(self) -> None:
        """Cancel the running re-drives (a revoke, a stop): their requests stay pending,
        and the partition's next owner carries them out again."""
        tasks = [task for _, task in self.running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.running.clear()

    def start_owned(self) -> None:
        owned = self.owned()
        for request in list(self.requests.values()):
            if request.status != "pending" or (request.topic, request.partition) not in owned:
                continue
            current = self.running.get(request.ref)
            if current is not None and current[0] == request.id:
                continue
            task = asyncio.ensure_future(self._carry_out(request, current))
            if current is None:
                self.running[request.ref] = (request.id, task)

    async def _carry_out(
        self, request: Request, current: tuple[str, asyncio.Task[None]] | None
    ) -> None:
        if current is not None:
            await self._answer(
                request,
                "refused",
                f"the key is already being re-driven (request {current[0]}); wait for it",
            )
            return
        try:
            status, message = await self._run(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the request fails, the worker goes on
            status, message = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            if self.running.get(request.ref, ("",))[0] == request.id:
                self.running.pop(request.ref, None)
        await self._answer(request, status, message)

    async def _answer(self, request: Request, status: Any, message: str) -> None:
        answer = replace(request, status=status, message=message)
        self.requests[request.id] = answer
        log.info("request answered", request=request.id, status=status, message=message)
        key = request.record_key()
        await self._write([OutRecord(self.parked_topic, key, answer.record(), [], "")])

    async def _write(self, records: Sequence[OutRecord]) -> None:
        futures = await self.produce(records)
        if futures:
            await asyncio.gather(*futures)

    async def _run(self, request: Request) -> tuple[str, str]:
        ref = request.ref
        self.started(request)
        state = self.parking.parked.get(ref)
        if state is None:
            return self.parking.answer_unparked(ref, request.id)
        if request.kind == "discard":
            record = self.parking.unpark(ref, state.last, f"discarded: {request.reason}")
            await self._write([OutRecord(self.parked_topic, ref_key(ref), record, [], ref[0])])
            return "done", f"discarded {state.count} parked changes up to offset {state.last}"
        translator = self.load(request.translator, request.version or 0)
        fixed = Pipeline(
            [translator],
            self.pipeline.decoder,
            self.pipeline.serializer,
            dead_letter_topic=self.pipeline.dead_letter_topic,
        )
        dead_letters = self.pipeline.dead_letter_topic
        count = await self.partitions_of(dead_letters)
        dlq_partition = partition_for(ref[3] or None, count)
        done = state.first - 1  # the last source offset handled
        redriven = 0
        position = 0  # in the dead-letter partition
        while True:
            messages = await asyncio.to_thread(
                read_to_end, self.conf, dead_letters, [dlq_partition], {dlq_partition: position}
            )
            if messages:
                position = messages[-1].offset() + 1
            for parked in parked_records(messages, ref, done):
                source = parked.source
                result = fixed.process_partition(source.topic, source.partition, [source])
                self.on_counts(source.topic, result.counts)
                failed = [out for out in result.records if not out.event_id]
                if failed:
                    reason = dict(failed[0].headers).get(HEADER_DLQ_REASON) or b""
                    text = reason.decode(errors="replace")
                    again = self.parking.failed_again(ref, source.offset, text)
                    if again is not None:
                        await self._write(
                            [OutRecord(self.parked_topic, ref_key(ref), again, [], ref[0])]
                        )
                    return "failed", (
                        f"{translator.ref} failed again at offset {source.offset} ({text}); "
                        f"{redriven} changes re-driven, the key stays parked from there"
                    )
                await self._write(result.records)
                done = source.offset
                redriven += 1
            state = self.parking.parked.get(ref)
            if state is None:
                return "refused", "the key was unparked meanwhile"
            if done >= state.last:
                # no await between this check and the unpark: no live change of the key
                # is translated before every parked one is (docs/parking.md)
                how = f"redriven through {translator.ref} (request {request.id})"
                record = self.parking.unpark(ref, done, how)
                await self._write([OutRecord(self.parked_topic, ref_key(ref), record, [], ref[0])])
                return "done", f"{redriven} changes re-driven through {translator.ref}"
            await asyncio.sleep(0.05)  # a change parked meanwhile is not on the topic yet
