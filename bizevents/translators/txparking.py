"""Per-key parking in the transaction worker, as pure logic (docs/parking.md, "The
transaction worker").

The row worker parks a *source key*; the transaction worker parks a **business key**
of a transaction translator: the routing key of :mod:`bizevents.translators.routing`
(the column(s) the translator declares in ``keys=``, else the Kafka key), as the
:data:`~bizevents.plumbing.parking.Ref` ``(translator name, assembly topic, virtual
partition, key bytes)``. Only the member owning the virtual partition parks it. The
position of a parked transaction (what ``first``, ``last`` and ``through`` of the
parked-key state count) is the offset of its END record in the transaction topic,
which orders transactions in commit order.

:class:`TxParking` answers, per transaction and translator, which owned keys are parked
(their parts are parked behind them), which were re-driven already (read again after a
crash: not published again), and what a failure parks; it builds the dead-letter
records (every part the translator reads, whole, so that a re-drive can translate the
transaction again) and the parked-topic records. :func:`parked_transactions` selects,
from the dead-letter topic, what a re-drive of a key translates again, in commit order.
Nothing here does I/O: :mod:`bizevents.translators.txcore` asks it,
:mod:`bizevents.translators.txworker` writes and reads.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from bizevents.contracts.business import HEADER_TRANSLATOR, dead_letter_cause
from bizevents.plumbing.parking import (
    PARKED_MARK,
    STAGE_PARKED,
    OnError,
    ParkedKeys,
    Ref,
    is_parked,
    ref_key,
)
from bizevents.translators.assembly import Part, Ready
from bizevents.translators.records import OutRecord, SourceRecord, dead_letter, dead_letter_source
from bizevents.translators.routing import business_key
from bizevents.translators.transaction_api import TransactionTranslator

__all__ = [
    "HEADER_PARKED_KEY",
    "HEADER_TX_END",
    "ParkedPart",
    "TxParking",
    "parked_part",
    "parked_transactions",
]

#: On a parked record of the transaction worker: the parked key's parked-topic key
#: (``park|<name>|<assembly topic>|<virtual partition>|<hex key>``).
HEADER_PARKED_KEY: Final = "bizevents.dlq.parked.key"
#: On a parked record of the transaction worker: its transaction's END offset.
HEADER_TX_END: Final = "bizevents.transaction.end"
#: On every dead letter of the transaction worker: the transaction id (txcore's).
HEADER_TX: Final = "bizevents.transaction.id"
#: Headers appended to a parked part after its original ones: dead_letter's seven, the
#: transaction id, the parked mark, the parked key and the END offset.
TX_PARKED_EXTRA_HEADERS: Final = 11


@dataclass
class TxParking:
    """The parked business keys of the transaction translators, and what to do with a
    transaction that touches them or fails (see the module's doc)."""

    parking: ParkedKeys
    #: the Ref's topic: the assembly topic, whose partitions are the virtual partitions
    topic: str
    partitions: int
    parked_topic: str
    dead_letter_topic: str
    #: by translator name; unnamed ones park
    on_error: Mapping[str, OnError] = field(default_factory=dict)
    #: the virtual partition of a key is its change's technical partition
    #: (``transactions.by_partition``: capture routed it by the key)
    by_partition: bool = False

    def mode(self, translator: TransactionTranslator) -> OnError:
        return self.on_error.get(translator.name, "park")

    #: the highest ``through`` of the re-driven keys (:meth:`settle`)
    through_max: int = -1

    def settle(self) -> None:
        """After the parked keys changed other than by parking (a restore, a re-drive,
        a discard): remember the highest ``through``, which :meth:`watching` asks."""
        self.through_max = max(self.parking.through.values(), default=-1)

    def watching(self, position: int | None) -> bool:
        """Whether a key of the transaction at ``position`` may be parked or re-driven
        already: some key is parked, or the transaction is not past every ``through``
        (nothing parked: one dict lookup per transaction and translator)."""
        if self.topic not in self.parking.watched:
            return False
        return bool(self.parking.parked) or (position is not None and position <= self.through_max)

    def ref(self, translator: TransactionTranslator, part: Part) -> Ref:
        """``part``'s business key for ``translator`` (routing's :func:`owner`, the key
        read once)."""
        key = business_key(translator, part)
        if self.by_partition:
            return translator.name, self.topic, part.origin.partition, key
        return translator.name, self.topic, zlib.crc32(key) % self.partitions, key

    def refs(self, translator: TransactionTranslator, parts: Iterable[Part]) -> list[Ref]:
        """The distinct keys of ``parts``, in the order they first appear."""
        return list(dict.fromkeys(self.ref(translator, p) for p in parts))

    def held(
        self, translator: TransactionTranslator, mine: Sequence[Part], position: int | None
    ) -> tuple[list[Ref], set[Ref]]:
        """Of the keys of ``mine`` (the parts this member owns): those parked now (the
        transaction is parked behind them), and every key not to publish now (those,
        and those re-driven through ``position`` already; a snapshot read, None, has
        no position)."""
        parked: list[Ref] = []
        held: set[Ref] = set()
        for ref in self.refs(translator, mine):
            if ref in self.parking.parked:
                parked.append(ref)
                held.add(ref)
            elif position is not None and self.parking.skipped(ref, position):
                held.add(ref)
        return parked, held

    def park(
        self,
        translator: TransactionTranslator,
        ready: Ready,
        parts: Sequence[Part],
        ref: Ref,
        position: int,
        stage: str,
        reason: str,
        error: str,
    ) -> list[OutRecord]:
        """Park ``ref`` with the transaction at ``position`` (its failing one, or one
        behind it: ``stage`` ``parked``): every part the translator reads of it to the
        dead-letter topic, marked parked and naming the key, then the key's state.
        Past the bound: :class:`~bizevents.plumbing.parking.ParkingBoundError`."""
        state = self.parking.park(ref, position, stage, reason)
        extra = [
            (HEADER_TX, (ready.tx_id or "").encode()),
            PARKED_MARK,
            (HEADER_PARKED_KEY, ref_key(ref)),
            (HEADER_TX_END, str(position).encode()),
        ]
        out = [
            dead_letter(
                p.origin, self.dead_letter_topic, stage, reason, error, translator.ref, extra
            )
            for p in parts
        ]
        out.append(OutRecord(self.parked_topic, ref_key(ref), state, [], ref[0]))
        return out

    def behind(
        self,
        translator: TransactionTranslator,
        ready: Ready,
        parts: Sequence[Part],
        parked: Sequence[Ref],
        position: int,
    ) -> list[OutRecord]:
        """The transaction parked behind each of ``parked`` (not translated for them)."""
        out: list[OutRecord] = []
        for ref in parked:
            first = self.parking.parked[ref].first
            reason = f"key parked since the transaction ending at offset {first}"
            out += self.park(
                translator, ready, parts, ref, position, STAGE_PARKED, reason, "Parked"
            )
        return out


@dataclass(frozen=True, slots=True)
class ParkedPart:
    """A part of a parked transaction as the dead-letter topic holds it."""

    source: SourceRecord
    translator: str
    key: bytes  # the parked key's parked-topic key
    tx_id: str | None
    end: int
    stage: str
    reason: str


def parked_part(msg: Any) -> ParkedPart | None:
    """The parked part a dead-letter message holds (None: not one of the transaction
    worker's parked records)."""
    headers = msg.headers() or []
    found = dict(headers)
    key = found.get(HEADER_PARKED_KEY)
    if not is_parked(found) or key is None:
        return None
    if len(headers) < TX_PARKED_EXTRA_HEADERS:
        return None
    try:
        source = dead_letter_source(msg, TX_PARKED_EXTRA_HEADERS)
        end = int(found.get(HEADER_TX_END) or b"")
    except ValueError:
        return None
    tx = (found.get(HEADER_TX) or b"").decode()
    return ParkedPart(
        source,
        (found.get(HEADER_TRANSLATOR) or b"").decode(),
        key,
        tx or None,
        end,
        *dead_letter_cause(found),
    )


def parked_transactions(
    messages: Iterable[Any], ref: Ref, after: int
) -> list[tuple[int, str | None, list[ParkedPart]]]:
    """``ref``'s parked transactions among dead-letter ``messages`` whose END is past
    ``after``, in commit order (END offset): each ``(END offset, id, parts)``, every
    part once (a crash may have parked a transaction twice), in the order read (the
    re-drive orders them by their place in the transaction once decoded)."""
    wanted = ref_key(ref)
    name = ref[0]
    found: dict[int, tuple[str | None, dict[tuple[str, int, int], ParkedPart]]] = {}
    for msg in messages:
        parked = parked_part(msg)
        if (
            parked is None
            or parked.key != wanted
            or parked.end <= after
            or parked.translator.partition("@")[0] != name
        ):
            continue
        s = parked.source
        _, parts = found.setdefault(parked.end, (parked.tx_id, {}))
        parts.setdefault((s.topic, s.partition, s.offset), parked)
    return [(end, found[end][0], list(found[end][1].values())) for end in sorted(found)]
