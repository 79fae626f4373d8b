"""The translation core shared by the live worker and the Spark replay.

Given raw technical records (bytes as Kafka holds them), it decodes each envelope,
routes it to the translators that read its table, stamps lineage and deterministic
ids on their events, serializes them in the Confluent format, and returns what to
produce: business events and dead-letter records. It does no I/O of its own (the
decoder and serializer it is given may consult a schema registry, cached), so the
same code runs in a Faust agent, a Spark executor and a test.

Partitioning rule: a business event is keyed by the *source record's key* (the
row's primary key), so every event that stems from one row lands in one partition
of its business topic, in the order the row changed, as long as the business topic
has a fixed partition count.

Bad input never stops the stream: an envelope that does not decode, a translator
that raises, and an event that fails its contract each become a dead-letter record
with the original key, value and headers, and headers naming the stage, the reason,
the translator and the original coordinates. With parking (:mod:`bizevents.plumbing.parking`,
the live worker's, ``on_error = "park"``) the record is marked parked, the source key is
parked for that translator and its later changes are parked behind it, untranslated,
with a parked-topic record of the key's state among the outputs; ``"fail"`` raises
:class:`TranslatorFailedError` instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from time import perf_counter
from typing import Final

from bizevents.contracts.avro_codegen.native import constructor
from bizevents.contracts.business import BusinessEvent, dead_letter_cause
from bizevents.contracts.change import Change
from bizevents.contracts.envelope import OP_READ, OP_UPDATE, ChangeEvent, Source, Tombstone
from bizevents.contracts.exceptions import ContractError, Coordinates, DecodeError
from bizevents.contracts.technical.events import Gate
from bizevents.plumbing.errors import TerminalError
from bizevents.plumbing.parking import PARKED_MARK, STAGE_PARKED, OnError, ParkedKeys, Ref, ref_key
from bizevents.translators.api import Translator
from bizevents.translators.exceptions import TranslationError
from bizevents.translators.lineage import Origin, Stamper, contract_name, origin_of
from bizevents.translators.records import (
    DEAD_LETTER_TOPIC,
    SHADOW_SUFFIX,
    Counts,
    Decoder,
    OutRecord,
    PlacedRecord,
    Record,
    Result,
    Serializer,
    SourceRecord,
    Stage,
    dead_letter,
)
from bizevents.translators.shadow import Seen, ShadowComparison, shadowed

#: What the pipeline knows of a technical topic: its table, the columns its translators
#: read (None: all) and the gate of its updates (None: none).
_Known = tuple[str, frozenset[str] | None, Gate | None]

# Made from every field, positionally, once a record or event: the extension's makers.
_make_coordinates: Final = constructor(Coordinates)
_make_out: Final = constructor(OutRecord)
_make_placed: Final = constructor(SourceRecord)


#: with the records the replay, the test kit and the benchmarks take from the core
__all__ = [
    "SHADOW_SUFFIX",
    "Counts",
    "OutRecord",
    "Pipeline",
    "Result",
    "Serializer",
    "SourceRecord",
    "TranslatorFailedError",
]


class TranslatorFailedError(TerminalError):
    """A change failed in a translator whose ``on_error`` is ``"fail"``."""


class Pipeline:
    """Technical records in, business-event and dead-letter records out."""

    def __init__(
        self,
        translators: Sequence[Translator],
        decoder: Decoder,
        serializer: Serializer,
        *,
        replay: bool = False,
        dead_letter_topic: str = DEAD_LETTER_TOPIC,
        shadows: Sequence[Translator] = (),
        shadow_output: bool = True,
        parking: ParkedKeys | None = None,
        parked_topic: str = "",
        on_error: Mapping[str, OnError] | None = None,
    ) -> None:
        self.translators = tuple(translators)
        #: The parked keys (None: nothing parks, failures are dead-lettered) and the
        #: compacted topic their state goes to; ``on_error`` by translator name, "park"
        #: when unnamed (with ``parking``), "dead-letter" otherwise.
        self.parking = parking
        self.parked_topic = parked_topic
        self.on_error = dict(on_error or {})
        self.decoder = decoder
        self.serializer = serializer
        self.replay = replay
        self.dead_letter_topic = dead_letter_topic
        #: Per live translator (``ref``): the version in its shadow (docs/shadow.md), which
        #: reads the same changes and whose events are compared with the live one's and
        #: written to ``<contract topic>.shadow`` (``shadow_output``) or only counted.
        self._shadow_of = shadowed(self.translators, shadows)
        self.shadow_output = shadow_output
        self._routes: dict[str, tuple[Translator, ...]] = {}
        #: Per contract class: its Avro fullname (what event ids hash) and its topic.
        self._contracts: dict[type[BusinessEvent], tuple[str, str]] = {}
        self._stampers: dict[tuple[str, str, int], Stamper] = {}
        #: Per technical topic: its table, the columns its translators read and the
        #: gate of its updates (:meth:`gate`).
        self._projections: dict[str, _Known] = {}

    def route(self, table: str) -> tuple[Translator, ...]:
        """The translators that read ``schema.table`` (cached per table)."""
        found = self._routes.get(table)
        if found is None:
            found = self._routes[table] = tuple(t for t in self.translators if t.reads(table))
        return found

    def columns(self, table: str) -> frozenset[str] | None:
        """The columns of ``table`` its translators read: the union of their
        declarations, ``None`` (all) when one of them declares none."""
        union: set[str] = set()
        for t in self._with_shadows(self.route(table)):
            if t.columns is None:
                return None
            union |= t.columns
        return frozenset(union)

    def _with_shadows(self, translators: tuple[Translator, ...]) -> tuple[Translator, ...]:
        """``translators`` and the versions in their shadow: what a change is decoded for."""
        if not self._shadow_of:
            return translators
        shadows = (self._shadow_of.get(t.ref) for t in translators)
        return translators + tuple(s for s in shadows if s is not None)

    def gate(self, table: str, source: Source) -> Gate | None:
        """The decoder's gate of updates of ``table`` that change none of what its
        translators' ``changes`` declarations name (their union), told by the table as
        its source block names it. None (every update is decoded) when a translator that
        may take updates declares none, no translator reads the table, or the decoder
        cannot tell."""
        translators = self.route(table)
        union: set[str] = set()
        for t in self._with_shadows(translators):
            if not t.may_emit(OP_UPDATE):
                continue
            if t.changes is None:
                return None
            union |= t.changes
        namespace = ("schema", source.schema) if source.schema is not None else ("db", source.db)
        if not translators or namespace[1] is None or source.table is None:
            return None
        return self.decoder.gate(
            frozenset(union), (namespace, ("table", source.table)), self.columns(table)
        )

    def _decode(
        self, record: Record, topic: str, where: Coordinates, known: _Known | None
    ) -> tuple[ChangeEvent | Tombstone, str]:
        """The record decoded with only the columns its table's translators read (a
        snapshot read with every column: its event ids hash the whole row), and
        its ``schema.table`` ("" for a tombstone).

        A topic's table is learnt from its first record; a topic that turns out to hold
        several tables is read whole, and its updates all decoded, from then on.
        """
        decode = self.decoder.decode
        columns = None if known is None else known[1]
        decoded = decode(record.key, record.value, where, record.headers, columns)
        if decoded.__class__ is Tombstone:
            return decoded, ""
        assert isinstance(decoded, ChangeEvent)
        if columns is not None and decoded.op == OP_READ:
            # a read's event ids hash its whole row (lineage.read_identity), whichever
            # columns the translators that run here read
            decoded = decode(record.key, record.value, where, record.headers, None)
            assert isinstance(decoded, ChangeEvent)
        source = decoded.source
        table = source.qualified_table
        if known is None:
            self._projections[topic] = (
                table,
                self.columns(table),
                self.gate(table, source),
            )
        elif known[0] != table and known[0]:
            self._projections[topic] = ("", None, None)
            if columns is not None:
                decoded = decode(record.key, record.value, where, record.headers, None)
        return decoded, table

    def process(self, records: Iterable[PlacedRecord]) -> Result:
        """Records of any partitions, each naming its own."""
        result = Result()
        for record in records:
            self._one(record, record.topic, record.partition, result)
        return result

    def process_partition(self, topic: str, partition: int, records: Iterable[Record]) -> Result:
        """Records of one partition (a fetched block, a replayed range), which need not
        name it: a Kafka client's records as they come."""
        result = Result()
        for record in records:
            self._one(record, topic, partition, result)
        return result

    def _one(self, record: Record, topic: str, partition: int, result: Result) -> None:
        known = self._projections.get(topic)
        if (
            known is not None
            and known[2] is not None
            and record.value is not None
            and known[2](record.key, record.value)
        ):
            # an update that changes nothing its table's translators declared they need
            for translator in self.route(known[0]):
                counts = result.counts.get(translator.ref)
                if counts is None:
                    counts = result.counts[translator.ref] = Counts()
                counts.consumed += 1
                counts.dropped += 1
                if self._shadow_of and translator.ref in self._shadow_of:
                    self._comparison(result, translator).add_change((), ())
            return
        where = _make_coordinates(topic, partition, record.offset)
        try:
            decoded, table = self._decode(record, topic, where, known)
        except DecodeError as exc:
            result.undecodable += 1
            # with the topic's table known, each translator reading it parks the key
            parks = [] if known is None or not known[0] else self.route(known[0])
            parks = [t for t in parks if self._on_error(t) != "dead-letter"]
            for translator in parks:
                counts = result.counts.get(translator.ref)
                if counts is None:
                    counts = result.counts[translator.ref] = Counts()
                counts.consumed += 1
                counts.dead_lettered += 1
                dead = self._dead_letter(
                    record, topic, partition, "decode", exc.reason, exc, translator.ref
                )
                self._failed(translator, dead, record, topic, partition, counts, result)
            if not parks:
                result.records.append(
                    self._dead_letter(record, topic, partition, "decode", exc.reason, exc, "")
                )
            return
        if isinstance(decoded, Tombstone):
            result.tombstones += 1  # compaction's marker after a delete, not a change
            return
        translators = self._routes.get(table)
        if translators is None:
            translators = self.route(table)
        if not translators:
            result.unrouted += 1
            return
        origin: list[Origin] = []  # the change's, made by the first translator with events
        op = decoded.op
        parking = self.parking
        watched = parking is not None and topic in parking.watched
        for translator in translators:
            counts = result.counts.get(translator.ref)
            if counts is None:
                counts = result.counts[translator.ref] = Counts()
            counts.consumed += 1
            if watched and self._parked_behind(
                translator, record, topic, partition, counts, result
            ):
                continue  # parked: neither the live version nor its shadow sees it now
            shadow = self._shadow_of.get(translator.ref) if self._shadow_of else None
            seen: list[Seen] | None = None if shadow is None else []
            if op not in translator.emitting:
                counts.dropped += 1  # declared: this op gives it nothing
            else:
                # the change as this translator reads it (its declared columns only)
                change = Change(decoded, translator.columns, translator.ref)
                started = perf_counter()
                produced, failed = self._translate(
                    translator, change, origin, record, topic, partition, table, seen
                )
                counts.seconds += perf_counter() - started
                if failed:
                    counts.dead_lettered += 1
                    self._failed(translator, produced[0], record, topic, partition, counts, result)
                    seen = None
                else:
                    if produced:
                        counts.emitted += len(produced)
                    else:
                        counts.dropped += 1
                    result.records.extend(produced)
            if shadow is not None:
                self._shadow(
                    shadow,
                    translator,
                    decoded,
                    origin,
                    record,
                    topic,
                    partition,
                    table,
                    seen,
                    result,
                )

    def _comparison(self, result: Result, live: Translator) -> ShadowComparison:
        shadow = self._shadow_of[live.ref]
        found = result.shadows.get(shadow.ref)
        if found is None:
            found = result.shadows[shadow.ref] = ShadowComparison(live.ref, shadow.ref)
        return found

    def _shadow(
        self,
        shadow: Translator,
        live: Translator,
        decoded: ChangeEvent,
        origin: list[Origin],
        record: Record,
        topic: str,
        partition: int,
        table: str,
        live_seen: list[Seen] | None,
        result: Result,
    ) -> None:
        """The shadow version on the change the live one saw: its events compared with
        the live one's (``live_seen``; None when the live version failed), written to the
        shadow topics or only counted. Its failures reach no dead-letter topic: a shadow
        must change nothing a consumer sees."""
        comparison = self._comparison(result, live)
        seen: list[Seen] = []
        if decoded.op in shadow.emitting:
            change = Change(decoded, shadow.columns, shadow.ref)
            produced, failed = self._translate(
                shadow, change, origin, record, topic, partition, table, seen
            )
            if failed:
                comparison.add_failure(live=False)
                return
            if self.shadow_output:
                result.records.extend(
                    _make_out(
                        out.topic + SHADOW_SUFFIX,
                        out.key,
                        out.value,
                        out.headers,
                        out.translator,
                        out.event_id,
                    )
                    for out in produced
                )
        if live_seen is None:
            comparison.add_failure(live=True)
            return
        comparison.add_change(live_seen, seen)

    def _on_error(self, translator: Translator) -> OnError:
        default: OnError = "park" if self.parking is not None else "dead-letter"
        return self.on_error.get(translator.name, default)

    def _parked_behind(
        self,
        translator: Translator,
        record: Record,
        topic: str,
        partition: int,
        counts: Counts,
        result: Result,
    ) -> bool:
        """Whether ``record`` is not for ``translator`` to translate now: its key is
        parked (the record is parked behind it) or it was re-driven already (skipped)."""
        assert self.parking is not None
        ref: Ref = (translator.name, topic, partition, record.key or b"")
        state = self.parking.parked.get(ref)
        if state is None:
            if self.parking.skipped(ref, record.offset):
                counts.dropped += 1  # re-driven already, read again after a crash
                return True
            return False
        reason = f"key parked since offset {state.first}"
        placed = _make_placed(
            topic, partition, record.offset, record.key, record.value, record.headers
        )
        counts.parked += 1
        result.records.append(
            dead_letter(
                placed,
                self.dead_letter_topic,
                STAGE_PARKED,
                reason,
                "Parked",
                translator.ref,
                (PARKED_MARK,),
            )
        )
        self._park_state(ref, record.offset, STAGE_PARKED, reason, result)
        return True

    def _failed(
        self,
        translator: Translator,
        dead: OutRecord,
        record: Record,
        topic: str,
        partition: int,
        counts: Counts,
        result: Result,
    ) -> None:
        """A change failed in ``translator``: dead-letter it, park its key, or stop."""
        on_error = self._on_error(translator)
        headers = dict(dead.headers)
        stage, reason = dead_letter_cause(headers)
        if on_error == "fail":
            raise TranslatorFailedError(
                f"translator {translator.ref} failed ({stage}) on {topic}[{partition}] at "
                f"offset {record.offset}: {reason}; it stops the worker "
                f'(translate.on_error.{translator.name} = "fail")'
            )
        if on_error == "dead-letter" or self.parking is None:
            result.records.append(dead)
            return
        counts.parked += 1
        result.records.append(
            _make_out(
                dead.topic,
                dead.key,
                dead.value,
                [*dead.headers, PARKED_MARK],
                dead.translator,
                "",
            )
        )
        ref: Ref = (translator.name, topic, partition, record.key or b"")
        self._park_state(ref, record.offset, stage, reason, result)

    def _park_state(self, ref: Ref, offset: int, stage: str, reason: str, result: Result) -> None:
        assert self.parking is not None
        state = self.parking.park(ref, offset, stage, reason)
        result.records.append(_make_out(self.parked_topic, ref_key(ref), state, [], ref[0], ""))

    def _translate(
        self,
        translator: Translator,
        change: Change,
        origin: list[Origin],
        record: Record,
        topic: str,
        partition: int,
        table: str,
        seen: list[Seen] | None = None,
    ) -> tuple[list[OutRecord], bool]:
        """The translator's records, or one dead-letter record (and True) on failure;
        each event's id, contract and fields appended to ``seen`` when given (for a
        shadow's comparison).

        Each event's lineage goes on the wire as bytes (:class:`Stamper`): the events
        are serialized as the translator built them, with their lineage record written
        from parts encoded once per translator and partition, and once per change (in
        ``origin``, by the first translator the change gives events).
        """
        try:
            events = translator.events(change)
            if not events:
                return [], False
            if not origin:
                origin.append(origin_of(change.event, table))
            shared = origin[0]
            slot = (translator.ref, topic, partition)
            stamper = self._stampers.get(slot)
            if stamper is None:
                stamper = self._stampers[slot] = Stamper(
                    translator.name, translator.version, topic, partition, self.replay
                )
            ordinals: dict[str, int] = {}
            produced = []
            contracts = self._contracts
            for event in events:
                cls = event.__class__
                known = contracts.get(cls)
                if known is None:
                    known = contracts[cls] = (contract_name(cls), cls.contract_topic())
                contract, out_topic = known
                ordinal = ordinals.get(contract, 0)
                ordinals[contract] = ordinal + 1
                event_id, lineage, headers = stamper.wire(shared, contract, ordinal)
                if seen is not None:
                    seen.append((event_id, contract, event.__dict__))
                produced.append(
                    _make_out(
                        out_topic,
                        record.key,
                        self.serializer(event, None, lineage),
                        headers,
                        translator.ref,
                        event_id,
                    )
                )
            return produced, False
        except TranslationError as exc:
            dead = self._dead_letter(
                record, topic, partition, "translate", exc.reason, exc, translator.ref
            )
        except ContractError as exc:
            dead = self._dead_letter(
                record, topic, partition, "contract", str(exc), exc, translator.ref
            )
        return [dead], True

    def _dead_letter(
        self,
        record: Record,
        topic: str,
        partition: int,
        stage: Stage,
        reason: str,
        exc: Exception,
        translator: str,
    ) -> OutRecord:
        placed = _make_placed(
            topic, partition, record.offset, record.key, record.value, record.headers
        )
        return dead_letter(
            placed, self.dead_letter_topic, stage, reason, type(exc).__name__, translator
        )
