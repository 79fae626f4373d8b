"""Assembling whole transactions from their parts: the pure core of the transaction worker.

Parts arrive from the technical topics and the transaction topic
(:mod:`bizevents.translators.txworker`): the changes of the tables the transaction
translators read, each with Debezium's ``transaction`` block, and the END records of
the transaction topic (BEGIN records carry nothing needed and are skipped). Across the
source topics and partitions the parts of one transaction arrive in any order, and,
after a worker restart, some twice.

A transaction is **complete** when its END arrived and, for every table read, the
changes that arrived equal the END's ``data_collections`` count. Complete transactions
are released **in END order**, which is commit order (the transaction topic has one
partition), so the events of one row keep their order across transactions. A change is
kept once per ``(transaction id, total_order)``; a part of a transaction already
released is a duplicate and is dropped (counted).

Outcomes, each tested (tests/translators/test_assembly.py):

* a change with **no transaction block** (a topic written without transaction
  metadata): dead-lettered at once with that reason, unless it is a snapshot read
  (op ``r``), which is released alone (a snapshot row is a committed state);
* a transaction that **never ends**: its parts are dead-lettered with that reason, and
  any later part of it too, once the END of a transaction committed after it arrived
  (ENDs come in commit order; PostgreSQL ids and MariaDB GTIDs of domain 0 carry the
  commit position, :func:`commit_position`), or, for ids without a position, once
  ``max_wait`` later transactions ended;
* an END whose **counts do not match**: more changes than it counts are dead-lettered
  at once; fewer, once every technical partition read has shown a later transaction
  (their changes come in commit order), or, for ids without a position, once
  ``max_wait`` later transactions wait behind it. A late change is never mistaken for
  a missing one, however far the transaction topic runs ahead (a worker catching up);
* limits on memory: more than ``max_changes`` changes in one transaction, or more than
  ``max_open`` transactions open at once (the oldest goes): dead-lettered with the reason.

Nothing here does I/O; the worker persists :meth:`Assembler.checkpoint` and commits
:meth:`Assembler.commit_offset` (the first part of the oldest open transaction), so
a restart reads every open transaction's parts again and none of the released ones'.
"""

from __future__ import annotations

import functools
import heapq
import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from bizevents.contracts.envelope import OP_READ, ChangeEvent
from bizevents.contracts.technical.transaction import STATUS_END, TransactionRecord
from bizevents.translators.records import SourceRecord

__all__ = [
    "Abandoned",
    "Assembler",
    "AssemblyLimits",
    "Checkpoint",
    "Part",
    "Ready",
    "commit_position",
]

_PG_ID: Final = re.compile(r"^\d+:(\d+)$")
#: A MariaDB GTID of domain 0: ``0-<server id>-<sequence number>``.
_MARIADB_ID: Final = re.compile(r"^0-\d+-(\d+)$")


@functools.lru_cache(maxsize=65_536)
def commit_position(tx_id: str) -> int | None:
    """Where a transaction id says the transaction committed, as a number that grows
    with commit order, else ``None``.

    - PostgreSQL (``<xid>:<lsn>``): the commit LSN.
    - MariaDB GTID of domain 0 (``0-<server>-<seq>``): the sequence number, which the
      server gives in binlog order, that is commit order, within a domain (and keeps
      across restarts and a change of primary under ``gtid_strict_mode``). Only domain
      0, the server's default: sequence numbers of two domains (multi-source
      replication) are not comparable, so other domains' ids have no position and
      fall under the ``max_wait`` window, as MySQL's ``<uuid>:<n>`` GTIDs do.
    """
    m = _PG_ID.match(tx_id) or _MARIADB_ID.match(tx_id)
    return int(m.group(1)) if m else None


@dataclass(frozen=True, slots=True)
class Part:
    """One record of the log: a change, or a BEGIN/END record, with its offset there."""

    offset: int
    origin: SourceRecord
    change: ChangeEvent | None = None
    record: TransactionRecord | None = None

    @property
    def tx_id(self) -> str | None:
        if self.record is not None:
            return self.record.id
        tx = self.change.transaction if self.change is not None else None
        return tx.id if tx is not None else None

    @property
    def order(self) -> int:
        tx = self.change.transaction if self.change is not None else None
        return tx.total_order if tx is not None else 0


@dataclass(frozen=True, slots=True)
class Ready:
    """A complete transaction's changes (commit order) to translate, and its END record
    (``None`` for a snapshot read, which has none)."""

    tx_id: str | None
    parts: tuple[Part, ...]
    end: Part | None = None


@dataclass(frozen=True, slots=True)
class Abandoned:
    """Parts that go to the dead-letter topic, and why."""

    tx_id: str | None
    parts: tuple[Part, ...]
    reason: str


Outcome = Ready | Abandoned


@dataclass(frozen=True, slots=True)
class AssemblyLimits:
    """How much an open transaction may hold, and how long it may wait."""

    max_open: int = 10_000
    max_changes: int = 100_000
    #: Later transactions that may end while one waits for its END or its changes.
    max_wait: int = 1_000
    #: Released transaction ids remembered (besides the commit position) for duplicates.
    remembered: int = 10_000


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What survives a restart: the commit position released up to, and recent ids."""

    position: int | None = None
    released: tuple[str, ...] = ()


@dataclass(slots=True)
class _Open:
    first_offset: int
    ends_before: int
    changes: dict[int, Part] = field(default_factory=dict)
    end: Part | None = None
    #: Changes arrived per table, kept as they come: a transaction whose END came first
    #: is looked at on every change, and counting them each time was quadratic.
    arrived: dict[str, int] = field(default_factory=dict)
    #: The END's counts of the tables read (set with ``end``).
    expected: dict[str, int] = field(default_factory=dict)
    #: By partition (``local`` set): the changes arrived and counted per technical partition.
    arrived_at: dict[int, int] = field(default_factory=dict)
    expected_at: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class AssemblyStats:
    released: int = 0
    abandoned: int = 0
    duplicates: int = 0
    snapshot_reads: int = 0
    untracked: int = 0


class Assembler:
    """Parts in, complete transactions and dead letters out, in commit order.

    ``reads(table)`` says whether the translators read ``schema.table``: only those
    tables' counts in an END are awaited.
    """

    def __init__(
        self,
        reads: Callable[[str], bool],
        limits: AssemblyLimits = AssemblyLimits(),
        checkpoint: Checkpoint = Checkpoint(),
        sources: Iterable[tuple[str, int]] | None = None,
        local: Callable[[str], frozenset[int]] | None = None,
    ) -> None:
        self._reads = reads
        #: Per transaction, the technical partitions whose changes this member reads
        #: itself, when it reads only its own (``transactions.by_partition``): the other
        #: partitions' changes come through the exchange
        #: (:mod:`~bizevents.translators.txexchange`), later than any local partition shows.
        self._local = local
        #: The technical partitions read, and the highest commit position each has
        #: shown (PostgreSQL ids): a partition past a transaction holds nothing more of it.
        self._sources = None if sources is None else frozenset(sources)
        self._source_position: dict[tuple[str, int], int] = {}
        self._end_position = -1
        self.limits = limits
        self._open: dict[str, _Open] = {}
        #: Whether parts came in offset order so far (the worker's logs): then the
        #: transactions opened first have the smallest first offsets.
        self._in_order = True
        self._last_offset = -1
        self._queue: deque[str] = deque()  # END order
        #: Open transactions seen without their END, oldest first: by commit position
        #: (a heap), or, for ids without one, by the ENDs counted when they opened. An
        #: END then looks only at those it may give up, not at every open transaction
        #: (a worker catching up holds thousands). Entries that ended or went are skipped.
        self._unended_heap: list[tuple[int, str]] = []
        self._unended_fifo: deque[tuple[int, str]] = deque()
        self._ends = 0
        self._position = checkpoint.position
        self._recent: deque[str] = deque(checkpoint.released, maxlen=limits.remembered)
        self._recent_set = set(self._recent)
        self._abandoned: dict[str, str] = {}
        self.stats = AssemblyStats()

    # -- state -------------------------------------------------------------------------

    def commit_offset(self, next_offset: int) -> int:
        """The offset to commit: the first part of the oldest open transaction."""
        if not self._open:
            return next_offset
        if self._in_order:  # the oldest opened is the first in the dict
            return min(next_offset, next(iter(self._open.values())).first_offset)
        return min(next_offset, min(o.first_offset for o in self._open.values()))

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self._position, tuple(self._recent))

    @property
    def open_transactions(self) -> int:
        return len(self._open)

    def oldest_position(self) -> int | None:
        """The commit position of the oldest open transaction: the least of the head of
        the END queue (END order is commit order) and of those open without their END;
        ``None`` when none is open or one open has an id without a position."""
        if not self._open or self._unended_fifo:
            return None
        heap = self._unended_heap
        while heap and not self._unended(heap[0][1]):
            heapq.heappop(heap)  # ended or gone: looked at no more (as in ``_end``)
        oldest = heap[0][0] if heap else None
        if self._queue:
            head = commit_position(self._queue[0])
            if head is None:
                return None
            oldest = head if oldest is None else min(oldest, head)
        return oldest

    def first_open(self) -> str | None:
        """The open transaction the next release waits for: the head of the END queue,
        else the first opened without its END among ids without a commit position, else
        the one without its END of the lowest commit position."""
        if self._queue:
            return self._queue[0]
        heap, fifo = self._unended_heap, self._unended_fifo
        while heap and not self._unended(heap[0][1]):
            heapq.heappop(heap)  # ended or gone: looked at no more (as in ``_end``)
        while fifo and not self._unended(fifo[0][1]):
            fifo.popleft()
        if fifo:
            return fifo[0][1]
        return heap[0][1] if heap else None

    def waiting(self, tx_id: str) -> str:
        """What open transaction ``tx_id`` waits for, in one sentence."""
        pending = self._open[tx_id]
        if pending.end is None:
            return f"transaction {tx_id} waits for its END ({len(pending.changes)} changes in)"
        local = self._local(tx_id) if self._local is not None else frozenset()
        short = [
            f"partition {p} {pending.arrived_at.get(p, 0)} of {n}"
            + (" (its own)" if p in local else " (through the exchange)")
            for p, n in sorted(pending.expected_at.items())
            if pending.arrived_at.get(p, 0) < n
        ]
        if short:
            return f"transaction {tx_id} waits for changes: {', '.join(short)}"
        return (
            f"the END of transaction {tx_id} counts {_counts(pending.expected)} of the "
            f"tables read, and {_counts(pending.arrived)} arrived"
        )

    def _released(self, tx_id: str) -> bool:
        if tx_id in self._recent_set:
            return True
        position = commit_position(tx_id)
        return position is not None and self._position is not None and position <= self._position

    def _remember(self, tx_id: str) -> None:
        if len(self._recent) == self._recent.maxlen:
            self._recent_set.discard(self._recent[0])
        self._recent.append(tx_id)
        self._recent_set.add(tx_id)

    # -- feeding -----------------------------------------------------------------------

    def feed(self, part: Part) -> list[Outcome]:
        """What ``part`` completes or gives up (often nothing yet)."""
        out: list[Outcome] = []
        tx_id = part.tx_id
        if part.change is not None and tx_id is None:
            out.append(self._untracked(part))
            return out
        assert tx_id is not None
        position = commit_position(tx_id)
        advanced = False
        if position is not None and part.change is not None:
            where = (part.origin.topic, part.origin.partition)
            if position > self._source_position.get(where, -1):
                self._source_position[where] = position
                advanced = True
        why = self._abandoned.get(tx_id)
        if why is not None:
            if part.record is not None and part.record.status != STATUS_END:
                return out  # a BEGIN holds nothing to set aside (a copy, read again)
            self.stats.abandoned += 1
            out.append(Abandoned(tx_id, (part,), f"{why} (a part that came later)"))
            return out
        if self._released(tx_id):
            self.stats.duplicates += 1
            return out
        if part.record is not None:
            if part.record.status != STATUS_END:
                return out  # BEGIN: nothing to wait for
            self._end(tx_id, part, out)
        else:
            self._change(tx_id, part, out)
            # only the head of the END queue is ever released; a change to another
            # transaction leaves it as it was, unless it moved its partition past the
            # head (the head's missing changes may then be known not to come) or a
            # limit gave a transaction up (the head may have gone). Looking at the head
            # on every change was a fifth of a worker's assembly time (cProfile)
            queue = self._queue
            if not (queue and (out or advanced or queue[0] == tx_id)):
                return out
        self._release(out)
        return out

    def abandon(self, tx_id: str, reason: str) -> list[Outcome]:
        """Give ``tx_id`` up for ``reason`` (another member gave up its part of it): its
        parts here are dead-lettered, now if it is open, else as they come; the
        transactions waiting behind it are released. Nothing for one released here."""
        out: list[Outcome] = []
        if tx_id in self._abandoned or self._released(tx_id):
            return out
        if tx_id in self._open:
            self._give_up(tx_id, reason, out)
            self._release(out)
        else:
            self._mark(tx_id, reason)
        return out

    def finish(self) -> tuple[list[Outcome], int]:
        """The input ended (replay's ranges were read): an open transaction whose END
        arrived lacks changes and is dead-lettered with both counts; one without its END
        ended beyond what was read and is left out. Returns those outcomes and how many
        transactions were left out."""
        out: list[Outcome] = []
        left_out = 0
        for tx_id in list(self._open):
            pending = self._open[tx_id]
            if pending.end is None:
                del self._open[tx_id]
                left_out += 1
                continue
            assert pending.end.record is not None
            self._give_up(
                tx_id,
                f"the END of transaction {tx_id} counts "
                f"{_counts(pending.expected)} of the tables read, but only "
                f"{_counts(pending.arrived)} arrived in the ranges read",
                out,
            )
        return out, left_out

    def _untracked(self, part: Part) -> Outcome:
        assert part.change is not None
        if part.change.op == OP_READ:
            self.stats.snapshot_reads += 1
            return Ready(None, (part,))
        self.stats.untracked += 1
        self.stats.abandoned += 1
        return Abandoned(
            None,
            (part,),
            "the change has no transaction block, so its transaction cannot be assembled "
            "(capture it with transaction metadata on: Debezium's "
            "provide.transaction.metadata=true, bizevents' transaction_metadata = true)",
        )

    def _opened(self, tx_id: str, part: Part, out: list[Outcome]) -> _Open:
        found = self._open.get(tx_id)
        if found is None:
            if part.offset < self._last_offset:
                self._in_order = False
            self._last_offset = part.offset
            found = self._open[tx_id] = _Open(part.offset, self._ends)
            position = commit_position(tx_id)
            if position is not None:
                heapq.heappush(self._unended_heap, (position, tx_id))
            else:
                self._unended_fifo.append((self._ends, tx_id))
            if len(self._open) > self.limits.max_open:
                oldest = min(self._open, key=lambda t: self._open[t].first_offset)
                self._give_up(
                    oldest,
                    f"more than {self.limits.max_open} transactions were open at once "
                    "(assembly.max_open); this was the oldest",
                    out,
                )
        return found

    def _change(self, tx_id: str, part: Part, out: list[Outcome]) -> None:
        pending = self._opened(tx_id, part, out)
        if tx_id not in self._open:  # it was the oldest and went at once
            return
        if part.order in pending.changes:
            self.stats.duplicates += 1
            return
        pending.changes[part.order] = part
        assert part.change is not None
        table = part.change.source.qualified_table
        pending.arrived[table] = pending.arrived.get(table, 0) + 1
        if self._local is not None:
            at = part.origin.partition
            pending.arrived_at[at] = pending.arrived_at.get(at, 0) + 1
        if len(pending.changes) > self.limits.max_changes:
            self._give_up(
                tx_id,
                f"transaction {tx_id} holds more than {self.limits.max_changes} changes "
                "(assembly.max_changes)",
                out,
            )

    def _end(self, tx_id: str, part: Part, out: list[Outcome]) -> None:
        pending = self._opened(tx_id, part, out)
        if tx_id not in self._open:
            return
        if pending.end is not None:
            self.stats.duplicates += 1
            return
        pending.end = part
        assert part.record is not None
        pending.expected = self._expected(part.record)
        if self._local is not None and part.record.partition_counts is not None:
            for table, at, n in part.record.partition_counts:
                if n and self._reads(table):
                    pending.expected_at[at] = pending.expected_at.get(at, 0) + n
        self._queue.append(tx_id)
        self._ends += 1
        self._end_position = max(self._end_position, commit_position(tx_id) or -1)
        limit = self.limits.max_wait
        heap, fifo = self._unended_heap, self._unended_fifo
        # ENDs arrive in commit order: a later one means one committed before has none
        while heap and heap[0][0] < self._end_position:
            _, other = heapq.heappop(heap)
            if self._unended(other):
                self._give_up(
                    other,
                    f"transaction {other} never ended: the END of a transaction committed "
                    "after it arrived, and none of its own",
                    out,
                )
        while fifo and self._ends - fifo[0][0] > limit:
            _, other = fifo.popleft()
            if self._unended(other):
                self._give_up(
                    other,
                    f"transaction {other} never ended: no END record arrived while {limit} "
                    "later transactions ended (assembly.max_wait)",
                    out,
                )

    def _unended(self, tx_id: str) -> bool:
        """Whether ``tx_id`` is open and its END has not arrived."""
        pending = self._open.get(tx_id)
        return pending is not None and pending.end is None

    def _expected(self, end: TransactionRecord) -> dict[str, int]:
        return {t: n for t, n in end.counts().items() if self._reads(t) and n}

    def _release(self, out: list[Outcome]) -> None:
        while self._queue:
            tx_id = self._queue[0]
            pending = self._open[tx_id]
            expected, arrived = pending.expected, pending.arrived
            if arrived != expected:
                if any(n > expected.get(t, 0) for t, n in arrived.items()):
                    self._give_up(
                        tx_id,
                        f"the END of transaction {tx_id} counts {_counts(expected)} of the "
                        f"tables read, and more arrived: {_counts(arrived)}",
                        out,
                    )
                    continue
                why = self._short(tx_id)
                if why is not None:
                    self._give_up(
                        tx_id,
                        f"the END of transaction {tx_id} counts {_counts(expected)} of the "
                        f"tables read, but only {_counts(arrived)} arrived {why}",
                        out,
                    )
                    continue
                return
            self._queue.popleft()
            del self._open[tx_id]
            self._settle(tx_id)
            self.stats.released += 1
            changes = tuple(sorted(pending.changes.values(), key=_order))
            out.append(Ready(tx_id, changes, pending.end))

    def _short(self, tx_id: str) -> str | None:
        """Why the missing changes of a transaction whose END arrived will not come, or
        ``None`` while they may. With a commit position: every technical partition read
        has shown a later transaction (capture writes a transaction's changes, in commit
        order, before anything later). Without one: ``max_wait`` transactions wait."""
        position = commit_position(tx_id)
        if position is not None:
            if self._local is not None:
                pending = self._open[tx_id]
                assert pending.end is not None and pending.end.record is not None
                if pending.end.record.partition_counts is None:
                    return (
                        "to this member, which reads only its own partitions, and the END "
                        "has no partition_counts (with transactions.by_partition capture "
                        "must route the tables read by business key)"
                    )
                expected_at, arrived_at = pending.expected_at, pending.arrived_at
                short = {p for p, n in expected_at.items() if arrived_at.get(p, 0) < n}
                if short - self._local(tx_id):
                    return None  # an exchanged slice has not come yet
            sources = self._sources
            if sources and all(self._source_position.get(s, -1) > position for s in sources):
                return "and every technical partition read has passed it"
            return None
        if len(self._queue) - 1 > self.limits.max_wait:
            return f"while {self.limits.max_wait} later transactions waited (assembly.max_wait)"
        return None

    def _settle(self, tx_id: str) -> None:
        self._remember(tx_id)
        position = commit_position(tx_id)
        if position is not None and (self._position is None or position > self._position):
            self._position = position

    def _give_up(self, tx_id: str, reason: str, out: list[Outcome]) -> None:
        pending = self._open.pop(tx_id)
        parts = sorted(pending.changes.values(), key=_order)
        if pending.end is not None:
            parts.append(pending.end)
            self._queue.remove(tx_id)
            self._settle(tx_id)
        self._mark(tx_id, reason)
        self.stats.abandoned += 1
        out.append(Abandoned(tx_id, tuple(parts), reason))

    def _mark(self, tx_id: str, reason: str) -> None:
        """Later parts of ``tx_id`` follow it to the dead-letter topic."""
        self._abandoned[tx_id] = reason
        if len(self._abandoned) > self.limits.remembered:
            self._abandoned.pop(next(iter(self._abandoned)))


def _order(part: Part) -> int:
    return part.order


def _counts(counts: dict[str, int]) -> str:
    return "{" + ", ".join(f"{t}: {n}" for t, n in sorted(counts.items())) + "}"
