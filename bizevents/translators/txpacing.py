"""Which partitions the transaction worker holds back while it catches up: pure.

A transaction is open at a member from its first part read to its END and last change,
across the technical partitions, the transaction topic and the exchange. The Kafka
client hands out one partition's fetched records (up to ``translate.max_fetch_bytes``,
about 13,000 changes) before the next partition's, and with
``transactions.by_partition`` a member may run ahead of the member whose slices it
waits for: a worker catching up a backlog read thousands of changes before the ENDs
that close them (or thousands of ENDs before their changes, or of another member's
slices before its own changes) and held them all open. Beyond
``transactions.max_open`` the oldest were dead-lettered though their parts would have
come (docs/transactions.md, "Catching up").

:class:`Frontier` knows, per partition it paces (the technical partitions read and the
transaction topic), the commit position of the last transaction read there; parts come
in commit order within each. Once half of ``max_open`` transactions are open, the
partitions already past the oldest open transaction are held back: what that
transaction still lacks lies in a partition not past it (its END in the transaction
topic, its changes in a technical partition; a partition past it holds nothing more of
it, the rule that gives up an END short of changes), or in the exchange, which is
never held (another member's slices come there in no commit order of this member's).
A member ahead of the others then reads only the exchange until their slices come; a
member behind reads what it lacks. Kafka Streams holds back a partition in the same
spirit (``buffered.records.per.partition``), by size rather than by position.

Nothing is held while fewer are open (reading then costs nothing more), nor while the
oldest has no position (ids without one: MySQL's GTIDs, MariaDB's of other domains;
``max_open`` alone applies, as before). Holding back, a turn reads no more records than
transactions may still open before ``max_open``.

:meth:`Frontier.stalled` says, once the transaction first in commit order has waited a
minute, what it waits for: everything after it in its partitions waits with it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from bizevents.translators.assembly import Assembler, commit_position
from bizevents.translators.txcheckpoint import TP

__all__ = ["Frontier"]


#: How long the transaction first in commit order may wait before the worker says what
#: it waits for (and again each time as long).
STALLED_S = 60.0


class Frontier:
    """Per paced partition, the commit position of the last transaction read there;
    and since when the transaction first in commit order has waited."""

    def __init__(self, paced: Iterable[TP], max_open: int) -> None:
        self.paced = frozenset(paced)
        self.max_open = max_open
        #: Open transactions from which the partitions past the oldest are held back.
        self.from_open = max(1, max_open // 2)
        self._at: dict[TP, int] = {}
        self._first: str | None = None
        self._since = self._said = 0.0

    def stalled(self, assembler: Assembler | None, now: float) -> tuple[str, float] | None:
        """What the transaction first in commit order waits for and for how long, once
        it has waited :data:`STALLED_S` (then again each :data:`STALLED_S`); ``None``
        otherwise. Everything after it in its partitions waits with it: this says why a
        partition's checkpoint does not move."""
        first = None if assembler is None else assembler.first_open()
        if first != self._first:
            self._first, self._since, self._said = first, now, now
            return None
        if assembler is None or first is None or now - self._said < STALLED_S:
            return None
        self._said = now
        return assembler.waiting(first), now - self._since

    def read(self, tp: TP, tx_id: str | None) -> None:
        """The last part read from ``tp`` belongs to ``tx_id``."""
        if tp in self.paced and tx_id is not None:
            position = commit_position(tx_id)
            if position is not None:
                self._at[tp] = position

    def turn(
        self, assembler: Assembler | None, assigned: Collection[TP], limit: int
    ) -> tuple[list[TP] | None, int]:
        """What to read this turn of the ``assigned`` partitions (``None``: all of them)
        and at most how many records, given what ``assembler`` holds open. Holding
        back, a turn reads no more records than transactions may still open before
        ``max_open`` (one at least)."""
        if assembler is None or assembler.open_transactions < self.from_open:
            return None, limit
        oldest = assembler.oldest_position()
        if oldest is None:
            return None, limit
        held = {tp for tp, at in self._at.items() if at > oldest}
        read = [tp for tp in assigned if tp not in held]
        room = max(1, min(limit, self.max_open - assembler.open_transactions))
        # none only without by_partition (the exchange is never held), when no
        # partition is left that is not past the oldest, which is then given up: all
        return read or None, room
