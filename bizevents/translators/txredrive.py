"""Re-drives and discards of parked business keys, carried out by the transaction worker.

``bizevents dlq redrive`` and ``discard`` write a request to the parked topic
(:mod:`bizevents.plumbing.parking`); every member of the transaction worker follows that
topic (:class:`~bizevents.translators.parkingio.ParkedTopic`), and the member that owns
the key's virtual partition carries the request out **between two batches, holding the
reading** (docs/parking.md, "The transaction worker"): once every output in flight is
acknowledged, it reads the key's dead-letter partition to its end, takes the key's
parked transactions from the park's first one on (:func:`parked_transactions`),
translates each whole through the requested version, publishes only the events of that
key, waits for the acknowledgements and unparks the key with ``through`` = the last
re-driven transaction's END offset. Nothing of the key is read meanwhile, so nothing
of it can overtake the re-driven events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import structlog

from bizevents.contracts.business import HEADER_DLQ_REASON
from bizevents.contracts.envelope import ChangeEvent
from bizevents.contracts.exceptions import Coordinates, DecodeError
from bizevents.plumbing.kafka import partition_for
from bizevents.plumbing.parking import Ref, Request, ref_key
from bizevents.plumbing.parkingio import read_to_end
from bizevents.translators.assembly import Part, Ready
from bizevents.translators.parkingio import ParkedTopic
from bizevents.translators.records import OutRecord, Result, SourceRecord
from bizevents.translators.transaction_api import TransactionTranslator
from bizevents.translators.txcore import TransactionCore
from bizevents.translators.txparking import TxParking, parked_transactions
from bizevents.translators.txplan import TxPlan

__all__ = ["RedriveTools", "TxRedriver"]

log = structlog.get_logger("parking")

#: How long a re-drive waits for parked records it knows of to be readable.
_READABLE_S = 30.0


@dataclass(frozen=True, slots=True)
class RedriveTools:
    """What the worker lends a re-drive."""

    #: publishes the records and waits for their acknowledgement
    send: Callable[[Sequence[OutRecord]], Awaitable[None]]
    #: a parked record's source as a part, decoded whole
    decode: Callable[[SourceRecord], Part]
    #: the translator of a name and version
    load: Callable[[str, int], Any]
    #: the transaction core of a translator
    core_of: Callable[[TransactionTranslator], TransactionCore]
    dead_letter_partitions: int
    on_counts: Callable[[Result], None]
    #: the key's partition goes, or the worker stops: give up (the request stays pending)
    revoked: Callable[[], bool] = lambda: False

    @staticmethod
    def of(
        plan: TxPlan,
        send: Callable[[Sequence[OutRecord]], Awaitable[None]],
        on_counts: Callable[[Result], None],
        revoked: Callable[[], bool],
    ) -> RedriveTools:
        """The tools of a worker running ``plan``."""
        dead_letters = plan.core.dead_letter_topic
        return RedriveTools(
            send=send,
            decode=partial(_redriven_part, plan),
            load=partial(_load, plan),
            core_of=partial(_redrive_core, plan),
            dead_letter_partitions=plan.partitions[dead_letters],
            on_counts=on_counts,
            revoked=revoked,
        )


@dataclass(kw_only=True)
class TxRedriver(ParkedTopic):
    """The transaction worker's parked topic: restored at each rebuild, followed for
    requests, which the worker's loop carries out (:meth:`carry_out`)."""

    guard: TxParking
    #: the requests may have news (set by the follower, cleared by :meth:`pending`)
    due: bool = False

    def start_owned(self) -> None:
        self.due = True

    async def restore(self) -> None:
        await super().restore()
        self.guard.settle()

    def pending(self, owned: frozenset[int]) -> list[Request]:
        """The pending requests of keys in ``owned`` virtual partitions, oldest first."""
        self.due = False
        return [
            r
            for r in self.requests.values()
            if r.status == "pending" and r.topic == self.guard.topic and r.partition in owned
        ]

    def answer(self, request: Request, status: Any, message: str) -> OutRecord:
        """The request's answer (remembered here), to write to the parked topic."""
        answer = replace(request, status=status, message=message)
        self.requests[request.id] = answer
        log.info("request answered", request=request.id, status=status, message=message)
        return OutRecord(self.parked_topic, request.record_key(), answer.record(), [], "")

    async def carry_out_all(self, pending: Sequence[Request], tools: RedriveTools) -> None:
        """Carry ``pending`` out in turn, each answered; a second request of a key in
        hand is refused; it stops at one left to the partitions' next owner."""
        started: dict[Any, str] = {}
        for request in pending:
            if request.ref in started:  # two at once: the second is refused
                message = f"the key is already being re-driven (request {started[request.ref]})"
                await tools.send([self.answer(request, "refused", message)])
                continue
            started[request.ref] = request.id
            self.started(request)

            try:
                answer = await self.carry_out(request, tools)
            except Exception as exc:  # the request fails (not installed, ...); the worker goes on
                answer = "failed", f"{type(exc).__name__}: {exc}"
            if answer is None:  # the partitions go: their next owner carries it out
                log.info("request left to the next owner", request=request.id)
                return
            await tools.send([self.answer(request, *answer)])

    async def carry_out(self, request: Request, tools: RedriveTools) -> tuple[str, str] | None:
        """Carry ``request`` out (every output of the worker acknowledged before): its
        status and message, or None when it gave up because ``tools.revoked()`` (the
        group takes the key's partition: its next owner carries the request out again,
        from the start, rather than both re-driving for long)."""
        try:
            return await self._carry_out(request, tools)
        finally:
            self.guard.settle()

    async def _carry_out(self, request: Request, tools: RedriveTools) -> tuple[str, str] | None:
        send = tools.send
        parking = self.guard.parking
        ref = request.ref
        state = parking.parked.get(ref)
        if state is None:
            return parking.answer_unparked(ref, request.id)
        if request.kind == "discard":
            how = f"discarded (request {request.id}): {request.reason}"
            await send([self._state(ref, parking.unpark(ref, state.last, how))])
            return "done", f"discarded the transactions parked up to END offset {state.last}"
        translator = tools.load(request.translator, request.version or 0)
        if not isinstance(translator, TransactionTranslator):
            return "failed", f"{translator.ref} is not a transaction translator"
        core = tools.core_of(translator)
        dead_letters = self.guard.dead_letter_topic
        partition = partition_for(ref_key(ref), tools.dead_letter_partitions)
        done = state.first - 1  # the END offset of the last transaction handled
        redriven = 0
        position = 0
        deadline = time.monotonic() + _READABLE_S
        while True:
            messages = await asyncio.to_thread(
                read_to_end, self.conf, dead_letters, [partition], {partition: position}
            )
            if messages:
                position = messages[-1].offset() + 1
            for end, tx_id, parked in parked_transactions(messages, ref, done):
                if tools.revoked():
                    return None
                try:
                    parts = sorted((tools.decode(p.source) for p in parked), key=lambda p: p.order)
                except DecodeError as exc:
                    return await self._failed(send, ref, end, exc.reason, translator.ref, redriven)
                result = Result()

                def mine(t: TransactionTranslator, p: Part) -> bool:
                    return self.guard.ref(t, p) == ref

                records = core.translate(Ready(tx_id, tuple(parts)), result, mine)
                tools.on_counts(result)
                failed = [r for r in records if r.dead_letter]
                if failed:
                    reason = dict(failed[0].headers).get(HEADER_DLQ_REASON) or b""
                    text = reason.decode(errors="replace")
                    return await self._failed(send, ref, end, text, translator.ref, redriven)
                await send(records)
                done = end
                redriven += 1
            state = parking.parked.get(ref)
            if state is None:
                return "refused", "the key was unparked meanwhile"
            if done >= state.last:
                how = f"redriven through {translator.ref} (request {request.id})"
                await send([self._state(ref, parking.unpark(ref, done, how))])
                return "done", f"{redriven} transactions re-driven through {translator.ref}"
            if time.monotonic() > deadline:
                return "failed", (
                    f"the transactions parked up to END offset {state.last} are not on "
                    f"{dead_letters} within {_READABLE_S:.0f} s; {redriven} re-driven, "
                    "the key stays parked"
                )
            await asyncio.sleep(0.2)  # acknowledged, not yet readable: read again

    async def _failed(
        self,
        send: Callable[[Sequence[OutRecord]], Awaitable[None]],
        ref: Ref,
        end: int,
        reason: str,
        version: str,
        redriven: int,
    ) -> tuple[str, str]:
        """The key stays parked from the transaction that failed again, with its reason."""
        again = self.guard.parking.failed_again(ref, end, reason)
        if again is not None:
            await send([self._state(ref, again)])
        return "failed", (
            f"{version} failed again on the transaction ending at offset {end} ({reason}); "
            f"{redriven} transactions re-driven, the key stays parked from there"
        )

    def _state(self, ref: Ref, record: bytes) -> OutRecord:
        return OutRecord(self.parked_topic, ref_key(ref), record, [], ref[0])


def _load(plan: TxPlan, name: str, version: int) -> Any:
    from bizevents.translators.registry import discover

    found = plan.versions.get((name, version))
    return found if found is not None else discover(names=[name]).get(name, version)


def _redrive_core(plan: TxPlan, translator: TransactionTranslator) -> TransactionCore:
    """The core a re-drive translates with: the requested version alone, nothing
    parked (a failure is the re-drive's, which keeps the key parked)."""
    core = plan.core
    return TransactionCore([translator], core.serializer, dead_letter_topic=core.dead_letter_topic)


def _redriven_part(plan: TxPlan, source: SourceRecord) -> Part:
    """A parked part decoded again, whole (DecodeError when it does not decode)."""
    where = Coordinates(source.topic, source.partition, source.offset)
    decoded = plan.decoder.decode(source.key, source.value, where, source.headers)
    if not isinstance(decoded, ChangeEvent):
        raise DecodeError(f"{source.topic}[{source.partition}]@{source.offset} is not a change")
    return Part(0, source, change=decoded)  # not assembled: no arrival sequence
