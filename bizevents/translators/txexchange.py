"""The exchange of members that own technical partitions (``transactions.by_partition``): pure.

Capture routes every change of a business key to one technical partition and counts
each transaction's changes per partition in its END (``partition_counts``). A member
reads only the partitions it owns, so a transaction across partitions owned by others
would reach none of them whole. :class:`Slices` keeps, per transaction, the changes of
each owned partition (its *slice*); once the END is in and a slice holds as many
changes as the END counts there, the slice is forwarded to ``<group_id>.exchange``, to
the partition of every other partition the transaction touched. A member reads its own
partitions of the exchange too, and a forwarded record carries the original's bytes and
coordinates (:func:`origin`), so it is decoded, assembled and translated as if read
from the technical topic: same ids, keys and lineage. A part received twice (a slice
forwarded again after a restart, a member's own forward) is dropped by the assembler's
``(id, total_order)``.

A forward is an output of the batch that completed the slice (the worker's checkpoint
passes it only once Kafka acknowledged it): the transaction stays open at the member
until it is released, which needs the slice and so the forward first.

A transaction a member gives up (an END short of changes, a limit) after its END came is
announced the same way, to the exchange partition of every other partition it touched
(:data:`HEADER_GIVEN_UP`, key the transaction id, value the reason): the other owners
give it up too (their parts dead-lettered, naming the partition that gave it up),
instead of waiting for a slice that will not come, with every later transaction behind
it, until their own limits gave it up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from bizevents.contracts.technical.transaction import STATUS_END, TransactionRecord
from bizevents.translators.assembly import Abandoned, Outcome, Part
from bizevents.translators.produce import Send
from bizevents.translators.records import SourceRecord

__all__ = [
    "HEADER_GIVEN_UP",
    "HEADER_ORIGIN",
    "REASON_LIMIT",
    "GivenUp",
    "Slices",
    "given_up",
    "origin",
    "touched",
]

#: The header of a forwarded record naming where capture wrote it: ``topic:partition:offset``.
HEADER_ORIGIN: Final = "bizevents.exchange.origin"
#: The header of a notice that a transaction was given up: the partition that gave it up.
HEADER_GIVEN_UP: Final = "bizevents.exchange.given-up"
#: A notice's reason is cut to this many characters (it goes into dead letters' headers).
REASON_LIMIT: Final = 2_000


@dataclass(frozen=True, slots=True)
class GivenUp:
    """A notice read from the exchange: the owner of ``partition`` gave ``tx_id`` up."""

    tx_id: str
    reason: str
    partition: int


def given_up(record: SourceRecord) -> GivenUp | None:
    """The notice ``record`` is, its reason cut to :data:`REASON_LIMIT` characters, or
    ``None`` for a forwarded change (one that does not read as a notice is ``None`` too:
    it is decoded as a change, and dead-lettered as one that does not decode)."""
    headers = record.headers
    if not headers or headers[-1][0] != HEADER_GIVEN_UP:
        return None
    try:
        partition = int(headers[-1][1] or b"")
        tx_id = (record.key or b"").decode()
        reason = (record.value or b"").decode()[:REASON_LIMIT]
    except (ValueError, UnicodeDecodeError):
        return None
    return GivenUp(tx_id, reason, partition) if tx_id else None


def touched(record: TransactionRecord, reads: Callable[[str], bool]) -> dict[int, int] | None:
    """Per technical partition, the changes of the tables read that the END ``record``
    counts there; ``None`` for an END without ``partition_counts``."""
    if record.partition_counts is None:
        return None
    counts: dict[int, int] = {}
    for table, partition, count in record.partition_counts:
        if count and reads(table):
            counts[partition] = counts.get(partition, 0) + count
    return counts


def origin(record: SourceRecord) -> SourceRecord:
    """The technical record a forwarded ``record`` copies: its coordinates from
    :data:`HEADER_ORIGIN` (the last header), its own headers without it."""
    headers = record.headers
    if headers and headers[-1][0] == HEADER_ORIGIN:
        where = (headers[-1][1] or b"").decode()
        topic, p, o = where.rsplit(":", 2)
        return SourceRecord(topic, int(p), int(o), record.key, record.value, headers[:-1])
    return record


def _forward(part: Part, topic: str, to: int) -> Send:
    o = part.origin
    where = f"{o.topic}:{o.partition}:{o.offset}".encode()
    return (topic, to, o.key, o.value, [*o.headers, (HEADER_ORIGIN, where)])


@dataclass(slots=True)
class _Slice:
    parts: dict[int, Part] = field(default_factory=dict)
    #: Set by the END: the changes it counts in this partition, and where to forward.
    expected: int = -1
    to: tuple[int, ...] = ()


class Slices:
    """The slices of a member's owned partitions: which ENDs the assembler takes, and
    the forwards the parts read complete (:attr:`outbox`, per owned partition)."""

    def __init__(
        self,
        owned: frozenset[int],
        reads: Callable[[str], bool],
        topic: str,
        remembered: int,
        released: Callable[[int, str], bool] = lambda v, tx_id: False,
    ) -> None:
        self.owned = owned
        #: Whether owned partition ``v``'s checkpoint says transaction ``tx_id`` was
        #: released there (and so its slice forwarded, and not read again).
        self._released = released
        #: Per transaction taken, the owned partitions that still want it, and every
        #: partition its END counts.
        self._wanted: dict[str, tuple[frozenset[int], tuple[int, ...]]] = {}
        #: Transactions another partition's owner gave up (announced back to nobody).
        self._heard: dict[str, None] = {}
        self._reads = reads
        self.topic = topic
        self._open: dict[tuple[str, int], _Slice] = {}
        #: Slices forwarded or settled, the newest ``remembered`` (a part of one read
        #: again, as capture may send a transaction twice, is not kept for ever).
        self._done: dict[tuple[str, int], None] = {}
        self._remembered = remembered
        #: Per owned partition, the forwards to send with this batch's outputs.
        self.outbox: dict[int, list[Send]] = {}
        self.forwarded = 0

    def take(self, part: Part) -> bool:
        """Whether the assembler takes ``part``: not an END whose transaction touches
        none of the owned partitions (its changes are all elsewhere). A change of an
        owned partition joins its slice (read from the technical topic, or its copy
        from the exchange: the same bytes); a forward it completes goes to
        :attr:`outbox`."""
        tx_id = part.tx_id
        if tx_id is None:
            return True
        record = part.record
        if record is None:
            key = (tx_id, part.origin.partition)
            if part.origin.partition in self.owned and key not in self._done:
                self._open.setdefault(key, _Slice()).parts[part.order] = part
                self._complete(key)
            return True
        if record.status != STATUS_END:
            return True
        counts = touched(record, self._reads)
        if counts is None:  # not routed: the assembler waits for every change, as before
            return True
        # a partition whose checkpoint released it has forwarded its slice, and its
        # reading starts past it: the slice comes through the exchange, if wanted
        mine = frozenset(v for v in self.owned.intersection(counts) if not self._released(v, tx_id))
        if counts and not mine:
            return False
        self._wanted[tx_id] = (mine, tuple(sorted(counts)))
        for p in sorted(mine):
            key = (tx_id, p)
            if len(counts) > 1 and key not in self._done:
                found = self._open.setdefault(key, _Slice())
                found.expected = counts[p]
                found.to = tuple(q for q in sorted(counts) if q != p)
                self._complete(key)
        return True

    def local(self, tx_id: str) -> frozenset[int]:
        """The partitions whose changes of ``tx_id`` this member reads itself."""
        return self._wanted.get(tx_id, (self.owned, ()))[0]

    def _complete(self, key: tuple[str, int]) -> None:
        found = self._open[key]
        if found.expected < 0 or len(found.parts) < found.expected:
            return
        del self._open[key]
        self._forget(key)
        parts = sorted(found.parts.values(), key=lambda p: p.order)
        out = self.outbox.setdefault(key[1], [])
        out += [_forward(part, self.topic, q) for q in found.to for part in parts]
        self.forwarded += len(parts)

    def settle(self, outcomes: Iterable[Outcome]) -> None:
        """The transactions released or given up need no slice kept. One given up after
        its END came, across partitions, is announced to the others (:attr:`outbox`,
        from the lowest owned partition it touched), unless another owner announced it."""
        for outcome in outcomes:
            tx_id = outcome.tx_id
            if tx_id is None:
                continue
            mine, touched = self._wanted.pop(tx_id, (frozenset(), ()))
            if isinstance(outcome, Abandoned) and mine and tx_id not in self._heard:
                sender = min(mine)
                notice = (HEADER_GIVEN_UP, str(sender).encode())
                key, reason = tx_id.encode(), outcome.reason.encode()
                self.outbox.setdefault(sender, []).extend(
                    (self.topic, q, key, reason, [notice]) for q in touched if q != sender
                )
            for p in self.owned:
                if self._open.pop((tx_id, p), None) is not None:
                    self._forget((tx_id, p))

    def hear(self, notice: GivenUp) -> None:
        """Another partition's owner gave ``notice.tx_id`` up: not announced again."""
        self._heard[notice.tx_id] = None
        if len(self._heard) > self._remembered:
            del self._heard[next(iter(self._heard))]

    def _forget(self, key: tuple[str, int]) -> None:
        self._done[key] = None
        if len(self._done) > self._remembered:
            del self._done[next(iter(self._done))]

    def drain(self) -> dict[int, list[Send]]:
        """The forwards to send with this batch, emptied."""
        out, self.outbox = self.outbox, {}
        return out
