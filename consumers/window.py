"""What a consumer makes of an event it may have seen before: the pure part of the kit.

Every business event carries a deterministic ``event_id`` (the same source change and
output slot always give the same id) and its lineage: the translator ``name@version``
that made it and whether a replay did. So an id that comes back is one of three things:

* a **duplicate**: the same id from the same translator version, live or replay alike
  (a worker restarted after producing and before committing, a replay run twice):
  skipped;
* a **correction**: the same id from a higher translator version, or from a replay of
  the same version over a live event: it supersedes the event seen, and the handler is
  told so (``Delivery.supersedes``);
* **stale**: the same id from a lower version than the one already seen (an old event
  re-sent after its correction): skipped.

The window remembers the last ``size`` ids (least recently seen forgotten first); an id
older than that is new again. It is in memory, per process: a restart or a rebalance
starts it empty (docs/consuming.md says what that means).
"""

from __future__ import annotations

from collections import OrderedDict
from enum import Enum

from bizevents.contracts.business import Lineage

__all__ = ["EventWindow", "Verdict", "rank"]


class Verdict(Enum):
    """What to do with an event."""

    NEW = "new"
    DUPLICATE = "duplicate"
    CORRECTION = "correction"
    STALE = "stale"

    @property
    def delivered(self) -> bool:
        """Whether the handler is called."""
        return self in (Verdict.NEW, Verdict.CORRECTION)


def rank(lineage: Lineage) -> tuple[int, bool]:
    """``(translator version, replay)``: which of two events with one id supersedes.

    A translator reference without a version (not written by bizevents) ranks 0.
    """
    _, _, version = lineage.translator.rpartition("@")
    return (int(version) if version.isdigit() else 0, lineage.replay)


class EventWindow:
    """The last ``size`` event ids seen, each with the rank of the version delivered."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"the deduplication window must hold at least 1 id, not {size}")
        self.size = size
        self._seen: OrderedDict[str, tuple[int, bool]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def judge(self, lineage: Lineage) -> Verdict:
        """The verdict on an event (nothing remembered yet: see :meth:`remember`).

        An event without an id (not written by bizevents) is always new.
        """
        event_id = lineage.event_id
        if not event_id:
            return Verdict.NEW
        seen = self._seen.get(event_id)
        if seen is None:
            return Verdict.NEW
        self._seen.move_to_end(event_id)
        now = rank(lineage)
        if now == seen:
            return Verdict.DUPLICATE
        return Verdict.STALE if now < seen else Verdict.CORRECTION

    def remember(self, lineage: Lineage) -> None:
        """The event was handled (or dead-lettered): its id and version are now seen."""
        event_id = lineage.event_id
        if not event_id:
            return
        self._seen[event_id] = rank(lineage)
        self._seen.move_to_end(event_id)
        if len(self._seen) > self.size:
            self._seen.popitem(last=False)
