"""Complete transactions through transaction translators: events with lineage, or dead letters.

Pure like :mod:`bizevents.translators.pipeline` (the serializer may consult the registry, cached):
the transaction worker and the tests run it.

Ids, keys and lineage of an event that **stems from a change** of the transaction
(:func:`bizevents.translators.transaction_api.stems_from`) are the row path's for that change: the
id is derived from the change's identity (:func:`bizevents.translators.lineage.change_identity`),
the translator's name, the contract and the event's ordinal among that contract's events
from that change; the key is the change's Kafka key; the lineage names the change's
topic, partition, offset and log position, and the transaction id. So ``orders@3``'s
OrderPlaced for an order has the id ``orders@1`` gave its OrderPlaced from the order's
INSERT, and a replay through ``orders@3`` supersedes it.

An event that does not say is **the transaction's**: identified by the transaction
(server and transaction id), the translator's name, the contract and its ordinal among
that contract's transaction-wide events; keyed by the Kafka key of the transaction's first
change to the translator's *first* source table (else its first change), so that the
events of one order follow the order's partition; its lineage names the transaction's
first change read. A snapshot read (no transaction) is identified as the row path
identifies it (its row's key and content), and its events carry the snapshot header.

Either way the same transaction assembled again (a restart, a rebalance, a replay) gives
the same ids.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import TypeAlias

from bizevents.contracts.business import BusinessEvent
from bizevents.contracts.change import Change
from bizevents.contracts.envelope import OP_READ
from bizevents.contracts.exceptions import ContractError
from bizevents.plumbing.parking import STAGE_PARKED, Ref
from bizevents.translators.api import SKIP
from bizevents.translators.assembly import Abandoned, Part, Ready
from bizevents.translators.exceptions import TranslationError
from bizevents.translators.lineage import Stamper, change_identity, contract_name, origin
from bizevents.translators.pipeline import TranslatorFailedError
from bizevents.translators.records import (
    DEAD_LETTER_TOPIC,
    SHADOW_SUFFIX,
    Counts,
    OutRecord,
    Result,
    Serializer,
    dead_letter,
)
from bizevents.translators.shadow import Seen, ShadowComparison, shadowed
from bizevents.translators.transaction_api import TransactionChanges, TransactionTranslator
from bizevents.translators.txparking import HEADER_TX, TxParking

__all__ = ["HEADER_TX", "Owns", "TransactionCore"]

#: Whether this member publishes the events stemming from a part (for a translator).
Owns: TypeAlias = Callable[[TransactionTranslator, Part], bool]


@dataclass(slots=True)
class TxCounts:
    transactions: int = 0
    changes: int = 0
    events: int = 0
    dead_lettered: int = 0
    seconds: float = 0.0
    per_translator: dict[str, Counts] = field(default_factory=dict)


class TransactionCore:
    """Ready transactions in, business-event and dead-letter records out."""

    def __init__(
        self,
        translators: Sequence[TransactionTranslator],
        serializer: Serializer,
        *,
        replay: bool = False,
        dead_letter_topic: str = DEAD_LETTER_TOPIC,
        shadows: Sequence[TransactionTranslator] = (),
        shadow_output: bool = False,
        parking: TxParking | None = None,
    ) -> None:
        self.translators = tuple(translators)
        #: The parked business keys and ``on_error`` (the live worker's; None: a failing
        #: transaction is dead-lettered, as in a replay): docs/parking.md.
        self.parking = parking
        #: Per live translator (``ref``): the version in its shadow (docs/shadow.md), run
        #: on the same transaction, its events compared with the live one's and written
        #: to ``<contract topic>.shadow`` (``shadow_output``) or only counted.
        self._shadow_of = shadowed(self.translators, shadows)
        self.shadow_output = shadow_output
        self.serializer = serializer
        self.replay = replay
        self.dead_letter_topic = dead_letter_topic
        self.counts = TxCounts()
        self._reads: dict[str, bool] = {}
        #: Each contract's topic (building it from the class's Meta is slow per event).
        self._topics: dict[type, str] = {}
        self._stampers: dict[tuple[str, str, int], Stamper] = {}

    def reads(self, table: str) -> bool:
        """Whether any of the translators reads ``schema.table`` (remembered per table:
        the assembler asks for every table of every END)."""
        known = self._reads.get(table)
        if known is None:
            known = self._reads[table] = any(t.reads(table) for t in self.translators)
        return known

    def process(self, outcomes: Sequence[Ready | Abandoned], owns: Owns | None = None) -> Result:
        """The records of ``outcomes``; with ``owns``, only the events and dead letters
        of the parts it owns (the transaction is still translated whole)."""
        result = Result()
        for outcome in outcomes:
            if isinstance(outcome, Ready):
                result.records += self.translate(outcome, result, owns)
            else:
                result.records += self.dead_letters(
                    outcome.parts, "assemble", outcome.reason, "IncompleteTransaction", ""
                )
                self.counts.dead_lettered += len(outcome.parts)
        return result

    def translate(
        self, ready: Ready, result: Result | None = None, owns: Owns | None = None
    ) -> list[OutRecord]:
        """The records of one complete transaction, for each translator that reads it;
        with ``owns``, only those of the parts it owns (:mod:`bizevents.translators.routing`:
        the members that assemble one transaction each publish their keys' events)."""
        started = perf_counter()
        self.counts.transactions += 1
        self.counts.changes += len(ready.parts)
        out: list[OutRecord] = []
        for translator in self.translators:
            parts = [
                p
                for p in ready.parts
                if p.change is not None and translator.reads(p.change.source.qualified_table)
            ]
            if not parts or (ready.tx_id is None and translator.snapshots == SKIP):
                continue
            mine = parts if owns is None else [p for p in parts if owns(translator, p)]
            counts = Counts(consumed=len(mine))
            if result is not None:
                counts = result.counts.setdefault(translator.ref, counts)
            publish = owns
            guard = self.parking
            position = ready.end.origin.offset if ready.end is not None else None
            if guard is not None and mine and guard.watching(position):
                parked, held = guard.held(translator, mine, position)
                if held:
                    if position is None:
                        # a snapshot read has no END to order it among the parked
                        # transactions: dead-lettered, not re-driven (docs/parking.md)
                        late = [p for p in mine if guard.ref(translator, p) in held]
                        reason = "a snapshot read of a parked key (not re-driven)"
                        out += self.dead_letters(
                            late, STAGE_PARKED, reason, "Parked", translator.ref
                        )
                        counts.dead_lettered += len(late)
                    else:
                        out += guard.behind(translator, ready, parts, parked, position)
                        counts.parked += len(parts) * len(parked)
                    mine = [p for p in mine if guard.ref(translator, p) not in held]
                    if not mine:
                        continue
                    publish = _without(owns, guard, held)
            shadow = self._shadow_of.get(translator.ref) if self._shadow_of else None
            seen: list[Seen] | None = None if shadow is None else []
            try:
                records = self._events(translator, ready.tx_id, parts, publish, seen)
            except TranslationError as exc:
                records = self._failed(
                    translator, ready, parts, mine, "translate", exc.reason, exc, counts
                )
                seen = None
            except ContractError as exc:
                records = self._failed(
                    translator, ready, parts, mine, "contract", str(exc), exc, counts
                )
                seen = None
            else:
                counts.emitted += len(records)
                if not records:
                    counts.dropped += 1
            out += records
            if shadow is not None and mine:
                found = self._shadow(
                    shadow, translator, ready.tx_id, parts, publish, len(mine), seen
                )
                out += found[0]
                if result is not None:
                    known = result.shadows.get(shadow.ref)
                    if known is None:
                        result.shadows[shadow.ref] = found[1]
                    else:
                        known.merge(found[1])
        self.counts.events += sum(1 for r in out if not r.dead_letter)
        self.counts.seconds += perf_counter() - started
        return out

    def _failed(
        self,
        translator: TransactionTranslator,
        ready: Ready,
        parts: list[Part],
        mine: list[Part],
        stage: str,
        reason: str,
        exc: Exception,
        counts: Counts,
    ) -> list[OutRecord]:
        """``ready`` failed in ``translator``: its parts this member owns dead-lettered,
        or each of their keys parked (the transaction with it), or the worker stopped
        (``translate.on_error``)."""
        guard = self.parking
        mode = "dead-letter" if guard is None else guard.mode(translator)
        if mode == "fail" and mine:
            raise TranslatorFailedError(
                f"transaction translator {translator.ref} failed ({stage}) on transaction "
                f"{ready.tx_id}: {reason}; it stops the worker "
                f'(translate.on_error.{translator.name} = "fail")'
            )
        if guard is None or mode == "dead-letter" or ready.end is None:
            counts.dead_lettered += len(mine)
            return self.dead_letters(mine, stage, reason, exc, translator.ref)
        position = ready.end.origin.offset
        out: list[OutRecord] = []
        error = type(exc).__name__
        for ref in guard.refs(translator, mine):
            out += guard.park(translator, ready, parts, ref, position, stage, reason, error)
            counts.parked += len(parts)
        return out

    def _shadow(
        self,
        shadow: TransactionTranslator,
        live: TransactionTranslator,
        tx_id: str | None,
        parts: list[Part],
        owns: Owns | None,
        changes: int,
        live_seen: list[Seen] | None,
    ) -> tuple[list[OutRecord], ShadowComparison]:
        """The shadow version on the transaction the live one read (the events of the
        parts this member owns by the live version's keys), compared with the live one's
        (``live_seen``; None when the live version failed). Its failures reach no
        dead-letter topic and its events no live topic: a shadow changes nothing a
        consumer reads."""
        comparison = ShadowComparison(live.ref, shadow.ref)
        mine: Owns | None = None
        if owns is not None:
            routed = owns

            def mine(_translator: TransactionTranslator, part: Part) -> bool:
                return routed(live, part)  # the shadow's events go where the live ones go

        seen: list[Seen] = []
        try:
            records = self._events(shadow, tx_id, parts, mine, seen)
        except (TranslationError, ContractError):
            comparison.add_failure(live=False, changes=changes)
            return [], comparison
        if live_seen is None:
            comparison.add_failure(live=True, changes=changes)
        else:
            comparison.add_change(live_seen, seen, changes)
        if not self.shadow_output:
            return [], comparison
        return [
            OutRecord(r.topic + SHADOW_SUFFIX, r.key, r.value, r.headers, r.translator, r.event_id)
            for r in records
        ], comparison

    def _events(
        self,
        translator: TransactionTranslator,
        tx_id: str | None,
        parts: list[Part],
        owns: Owns | None = None,
        seen: list[Seen] | None = None,
    ) -> list[OutRecord]:
        of_event = {id(p.change): p for p in parts if p.change is not None}
        changes = tuple(Change(p.change) for p in parts if p.change is not None)
        items = translator.attributed(TransactionChanges(tx_id, changes))
        if not items:
            return []
        first = parts[0]
        assert first.change is not None
        table = _first_table(translator, parts)
        keyed = next(
            (p for p in parts if p.change and p.change.source.qualified_table == table), first
        )
        # a snapshot read (no transaction) keeps the row path's identity
        whole = f"{first.change.source.name}|tx|{tx_id}" if tx_id else change_identity(first.change)
        ordinals: dict[tuple[str, str], int] = {}
        out = []
        for item in items:
            event = item.event
            if item.change is None:
                part, identity, key, owned = first, whole, keyed.origin.key, keyed
            else:
                part = of_event[id(item.change.event)]
                assert part.change is not None
                identity, key, owned = change_identity(part.change), part.origin.key, part
            assert part.change is not None
            position = part.change.source.position
            contract = contract_name(type(event))
            ordinal = ordinals.get((identity, contract), 0)
            ordinals[identity, contract] = ordinal + 1
            if owns is not None and not owns(translator, owned):
                continue  # another member publishes it (after counting its ordinal)
            where = part.origin
            stamper = self._stamper(translator, where.topic, where.partition)
            shared = origin(
                identity,
                where.offset,
                "" if position is None else str(position),
                tx_id,
                snapshot=part.change.op == OP_READ,
            )
            eid, lineage, headers = stamper.wire(shared, contract, ordinal)
            if seen is not None:
                seen.append((eid, contract, event.__dict__))
            out.append(
                OutRecord(
                    topic=self._topic(type(event)),
                    key=key,
                    value=self.serializer(event, None, lineage),
                    headers=headers,
                    translator=translator.ref,
                    event_id=eid,
                )
            )
        return out

    def _stamper(self, translator: TransactionTranslator, topic: str, partition: int) -> Stamper:
        """The translator's stamper for a source partition (built once: building one per
        event was 6 % of the translation's time, cProfile)."""
        slot = (translator.ref, topic, partition)
        stamper = self._stampers.get(slot)
        if stamper is None:
            stamper = self._stampers[slot] = Stamper(
                translator.name, translator.version, topic, partition, self.replay
            )
        return stamper

    def _topic(self, contract: type[BusinessEvent]) -> str:
        topic = self._topics.get(contract)
        if topic is None:
            topic = self._topics[contract] = contract.contract_topic()
        return topic

    def dead_letters(
        self,
        parts: Sequence[Part],
        stage: str,
        reason: str,
        exc: Exception | str,
        translator: str,
    ) -> list[OutRecord]:
        """One dead-letter record per part, with its original key, value and headers."""
        error = exc if isinstance(exc, str) else type(exc).__name__
        return [
            dead_letter(
                part.origin,
                self.dead_letter_topic,
                stage,
                reason,
                error,
                translator,
                [] if part.tx_id is None else [(HEADER_TX, part.tx_id.encode())],
            )
            for part in parts
        ]


def _without(owns: Owns | None, guard: TxParking, held: set[Ref]) -> Owns:
    """``owns`` without the parts of the keys ``held`` (parked, or re-driven already)."""

    def publish(translator: TransactionTranslator, part: Part) -> bool:
        if owns is not None and not owns(translator, part):
            return False
        return guard.ref(translator, part) not in held

    return publish


def _first_table(translator: TransactionTranslator, parts: Sequence[Part]) -> str:
    """The first of the translator's source patterns that a part's table matches."""
    for pattern in translator.sources:
        for p in parts:
            if p.change is not None and fnmatch.fnmatchcase(
                p.change.source.qualified_table, pattern
            ):
                return p.change.source.qualified_table
    return ""
