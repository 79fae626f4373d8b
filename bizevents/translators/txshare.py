"""What one member of the transaction worker owns, and so what it publishes: pure.

A member owns the virtual partitions the group assigned it (:attr:`Share.owned`), and
knows what each one's predecessors released (:attr:`Share.points`, their checkpoints).
Of every transaction it assembles it translates only those with a business key in a
partition it owns that was not released there before, and publishes only those keys'
events (:meth:`Share.translate`); a record that does not decode, or a transaction given
up, is dead-lettered by the member owning its home partition (:meth:`Share.home`).
By partition (``transactions.by_partition``) the virtual partitions are the technical
ones, a change's is the partition it was read from (:meth:`TxPlan.owner_of`), and the
member's slices go to the exchange (:attr:`Share.slices`,
:mod:`~bizevents.translators.txexchange`).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import structlog

from bizevents.contracts.envelope import ChangeEvent, Tombstone
from bizevents.contracts.exceptions import Coordinates, DecodeError
from bizevents.plumbing.kafka import partition_for
from bizevents.translators.assembly import Abandoned, Assembler, Checkpoint, Outcome, Part, Ready
from bizevents.translators.produce import Send
from bizevents.translators.records import OutRecord, SourceRecord
from bizevents.translators.transaction_api import TransactionTranslator
from bizevents.translators.txcheckpoint import TP, Point
from bizevents.translators.txexchange import GivenUp, Slices, given_up, origin
from bizevents.translators.txparking import HEADER_PARKED_KEY
from bizevents.translators.txplan import TxPlan
from bizevents.translators.txversions import TxVersions

__all__ = ["Share"]

log = structlog.get_logger("transactions")

#: Forwarded copies a member remembers having decoded (:meth:`Share.exchanged`).
COPIES_KEPT = 100_000


class Share:
    """A member's virtual partitions and what it publishes of what it reads."""

    def __init__(self, plan: TxPlan, versions: TxVersions) -> None:
        self.plan = plan
        self.versions = versions
        #: The virtual partitions this member owns (the group's assignment).
        self.owned: frozenset[int] = frozenset()
        #: Per owned virtual partition, what was released before this member took it.
        self.points: dict[int, Point] = {}
        #: By partition: the owned partitions' slices and their forwards (made at each start).
        self.slices: Slices | None = None
        #: Where this member reads each partition from since its last start.
        self.reading_from: dict[TP, int] = {}
        #: Forwarded copies decoded since the last start, by where capture wrote them, the
        #: newest :data:`COPIES_KEPT`: a slice forwarded to two partitions this member
        #: owns comes twice, and is decoded once.
        self._copies: dict[tuple[str, int, int], None] = {}

    def start(
        self, mine: dict[int, Point], start: dict[TP, int]
    ) -> tuple[Assembler, dict[TP, int]]:
        """Own the partitions of ``mine`` (their checkpoints): a new assembler, and where
        to read each technical partition from (the oldest of the checkpoints; ``start``
        for a partition one of them never recorded)."""
        plan = self.plan
        owned = frozenset(mine)
        offsets = {
            tp: min(
                (p.offsets.get(tp, start[tp]) for v, p in mine.items() if plan.covers(v, tp)),
                default=start[tp],
            )
            for tp in plan.read_of(owned)
        }
        # the assembler drops what every owned partition released; translate the rest
        positions = [p.released.position for p in mine.values()]
        floor = min(positions) if positions and None not in positions else None  # type: ignore[type-var]
        known = [set(p.released.released) for p in mine.values()]
        shared = tuple(sorted(set.intersection(*known))) if known else ()
        self.points = mine
        self.reading_from = offsets
        self._copies = {}
        self.slices = None
        if plan.by_partition:
            self.slices = Slices(
                owned,
                plan.core.reads,
                plan.exchange_topic,
                plan.limits.remembered,
                lambda v, tx_id: mine[v].has(tx_id),
            )
        assembler = Assembler(
            plan.core.reads,
            plan.limits,
            Checkpoint(floor, shared),
            sources=plan.sources_of(owned),
            local=None if self.slices is None else self.slices.local,
        )
        return assembler, offsets

    def points_after(self, offsets: dict[TP, int], released: Checkpoint) -> dict[int, Point]:
        """Each owned partition's checkpoint: where this member reads again
        (``offsets``), and what was released there: what its assembler ``released``,
        never less than the partition's predecessor had (the assembler starts from the
        oldest of the partitions' checkpoints; a partition taken over with a later one,
        recorded as the assembler's, went back, and its next owner published again
        what lay between: the fault suite's run L1)."""
        points: dict[int, Point] = {}
        for v, before in sorted(self.points.items()):
            was, now = before.released.position, released.position
            position = now if was is None or (now is not None and now >= was) else was
            ids = tuple(dict.fromkeys([*before.released.released, *released.released]))
            # as many ids as the assembler remembers, the newest
            kept = ids[-self.plan.limits.remembered :]
            # by partition a partition's checkpoint names only what its next owner reads
            mine = {tp: o for tp, o in offsets.items() if self.plan.covers(v, tp)}
            points[v] = Point(mine, Checkpoint(position, kept), frozenset(kept))
        return points

    def translate(
        self, outcomes: Sequence[Outcome], within: frozenset[int] | None = None
    ) -> tuple[Any, bool]:
        """The records this member publishes of ``outcomes``: the events of the business
        keys it owns (not released there before it took them), and its dead letters;
        with ``within``, only those of these owned partitions."""
        owned = self.owned if within is None else within
        plan = self.plan
        n = plan.assembly_partitions
        #: per part (by identity) of a transaction translated here, the virtual
        #: partitions whose events this member publishes; None: all of its partitions
        live: dict[int, frozenset[int] | None] = {}
        mine: list[Outcome] = []
        #: per transaction translated here (by identity): the virtual partitions it is
        #: translated for (each may be on other versions: promotions, docs/shadow.md)
        shares: dict[int, frozenset[int]] = {}
        # versions that vary by virtual partition need each transaction's own partitions
        every_partition = len(owned) >= n and not plan.versioned()
        for outcome in outcomes:
            if isinstance(outcome, Ready):
                if every_partition and not any(p.has(outcome.tx_id) for p in self.points.values()):
                    # all of it is this member's (one worker, or one owning every
                    # virtual partition): no key to hash (a twentieth of its time)
                    belongs = wanted = owned
                else:
                    belongs = frozenset(plan.partitions_of(outcome))
                    wanted = frozenset(
                        v for v in belongs if v in owned and not self.points[v].has(outcome.tx_id)
                    )
                if not wanted:
                    continue
                every = None if len(wanted) == len(belongs) else wanted
                live.update((id(p), every) for p in outcome.parts)
                shares[id(outcome)] = wanted
                mine.append(outcome)
            else:
                # parts of a transaction their home partition's checkpoint released are
                # duplicates, not dead letters: a member owning partitions checkpointed at
                # different places reads them again and never takes their END (issue 40)
                parts = tuple(
                    p for p in outcome.parts if self._dead_letters(p, outcome.tx_id, owned)
                )
                if parts:
                    mine.append(Abandoned(outcome.tx_id, parts, outcome.reason))

        def owns(translator: TransactionTranslator, part: Part) -> bool:
            wanted = live.get(id(part), owned)
            # every key of the transaction is this member's: no need to hash each part
            return wanted is None or plan.owner_of(translator, part) in wanted

        if plan.versioned():
            return self.versions.translate(mine, shares), bool(live)
        return plan.core.process(mine, owns), bool(live)

    def _dead_letters(self, part: Part, tx_id: str | None, owned: frozenset[int]) -> bool:
        """Whether this member dead-letters ``part`` of a transaction given up: its home
        partition is one of ``owned``, whose checkpoint did not release it before."""
        home = self.home(part)
        point = self.points.get(home)
        return home in owned and (point is None or not point.has(tx_id))

    def translate_each(self, outcomes: Sequence[Outcome]) -> tuple[dict[int, Any], bool]:
        """:meth:`translate` per owned partition (exactly once, each partition's outputs
        go in its own transaction); whether any of them published."""
        results: dict[int, Any] = {}
        published = False
        for v in sorted(self.owned):
            results[v], live = self.translate(outcomes, frozenset({v}))
            published = published or live
        return results, published

    def take(self, part: Part) -> bool:
        """Whether the assembler takes ``part`` (by partition, :meth:`Slices.take`)."""
        return self.slices is None or self.slices.take(part)

    def forwards(self, outcomes: Sequence[Outcome]) -> dict[int, list[Send]]:
        """By owned partition, the forwards of the slices the batch completed: outputs
        of the batch, so the checkpoint after it goes out once Kafka acknowledged them
        (exactly once, in the slice's partition's transaction)."""
        if self.slices is None:
            return {}
        self.slices.settle(outcomes)  # what it gave up, announced with the forwards
        return self.slices.drain()

    def hear(self, notice: GivenUp, assembler: Assembler) -> list[Outcome]:
        """Another partition's owner gave a transaction up (a notice read from the
        exchange): this member gives it up too, its parts dead-lettered by their owners."""
        if self.slices is not None:
            self.slices.hear(notice)
        reason = (
            f"the owner of partition {notice.partition} gave transaction {notice.tx_id} up: "
            f"{notice.reason}"
        )
        return assembler.abandon(notice.tx_id, reason)

    def home(self, part: Part) -> int:
        """The virtual partition that dead-letters ``part``: its business key's (for the
        first translator reading it), else its transaction's."""
        plan = self.plan
        if part.change is not None:
            table = part.change.source.qualified_table
            for translator in plan.translators:
                if translator.reads(table):
                    return plan.owner_of(translator, part)
        return zlib.crc32((part.tx_id or "").encode()) % plan.assembly_partitions

    def home_of_record(self, r: Any) -> int:
        """The virtual partition that dead-letters a record that does not decode (by
        partition, the partition it was read from, but the transaction topic's)."""
        plan = self.plan
        if plan.by_partition and r.topic != plan.transaction_topic:
            return int(r.partition)
        return zlib.crc32(f"{r.topic}:{r.partition}:{r.offset}".encode()) % (
            plan.assembly_partitions
        )

    def outputs(self, records: Sequence[OutRecord]) -> list[Send]:
        """Events and dead letters to their topics' partitions (``crc32(key) % n``)."""
        sends: list[Send] = []
        dead_letters = self.plan.core.dead_letter_topic
        for out in records:
            place = out.key
            if out.topic == dead_letters:
                headers = dict(out.headers)
                log.warning(
                    "dead-lettered",
                    reason=(headers.get("bizevents.dlq.reason") or b"").decode(),
                    topic=out.topic,
                )
                # a parked part goes to its key's dead-letter partition: one queue per key
                place = headers.get(HEADER_PARKED_KEY, out.key)
            count = self.plan.partitions[out.topic]
            sends.append((out.topic, partition_for(place, count), out.key, out.value, out.headers))
        return sends

    def exchanged(self, read: SourceRecord) -> SourceRecord | None:
        """The technical record a forwarded one copies; ``None`` when this member reads
        that record itself (a forward to a partition it owns, of a change at or past
        where it started reading it) or decoded another copy of it since its start (a
        slice forwarded to two partitions it owns), so the copy is not decoded only to be
        dropped as a duplicate. One from before that start is kept: that partition's
        checkpoint released its transaction, and the copy is how its slice comes."""
        copied = origin(read)
        start = self.reading_from.get((copied.topic, copied.partition))
        if start is not None and copied.offset >= start:
            return None
        where = (copied.topic, copied.partition, copied.offset)
        if where in self._copies:
            return None
        self._copies[where] = None
        if len(self._copies) > COPIES_KEPT:  # one forgotten is decoded again, and dropped
            del self._copies[next(iter(self._copies))]
        return copied

    def part(self, r: Any, seq: int) -> Part | OutRecord | GivenUp | None:
        """The record as a part (``None`` for a tombstone), its dead letter, or a notice
        from the exchange that another partition's owner gave a transaction up."""
        if r.value is None:
            return None  # a tombstone: compaction's marker, not a change
        read = SourceRecord(r.topic, r.partition, r.offset, r.key, r.value, list(r.headers or ()))
        if r.topic == self.plan.exchange_topic:
            notice = given_up(read)
            if notice is not None:
                return notice
            copied = self.exchanged(read)
            if copied is None:
                return None
            read = copied  # decoded as read from the technical topic
        where = Coordinates(read.topic, read.partition, read.offset)
        try:
            if r.topic == self.plan.transaction_topic:
                return Part(seq, read, record=self.plan.tx_decoder.decode(r.value, where))
            decoded = self.plan.decoder.decode(r.key, r.value, where, read.headers)
        except DecodeError as exc:
            dead = Part(seq, read)
            (record,) = self.plan.core.dead_letters([dead], "decode", exc.reason, exc, "")
            return record
        if isinstance(decoded, Tombstone):
            return None
        assert isinstance(decoded, ChangeEvent)
        return Part(seq, read, change=decoded)
