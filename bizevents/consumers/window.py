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

A **snapshot read**'s event (header ``bizevents.snapshot``) has the id of its row's
content, so a re-snapshot of an unchanged row repeats it. It is judged as above, with
one exception: read again by another snapshot (another source position) after its key
was given another event, it is **new**. The key's state went elsewhere and came back
(a row changed, then changed back, read by snapshots in between): applying it again is
right. A re-read of a row nothing happened to since (the key's last event has this id)
is a duplicate; the same read delivered twice (same position) is one too.

The window remembers the last ``size`` ids (least recently seen forgotten first), and
the ids of the last change of the last ``size`` keys; an id older than that is new
again. It is in memory, per process: a restart or a rebalance starts it empty
(docs/consuming.md says what that means).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
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


#: Where a change was read (its source topic, partition and offset): the events of one
#: change share it.
_Change = tuple[str, int, int]


class EventWindow:
    """The last ``size`` event ids seen, each with the rank of the version delivered and
    the source position it came from; per key (of the last ``size``), the ids of its
    last change."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"the deduplication window must hold at least 1 id, not {size}")
        self.size = size
        self._seen: OrderedDict[str, tuple[tuple[int, bool], str]] = OrderedDict()
        self._last: OrderedDict[Hashable, tuple[_Change, set[str]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def judge(
        self, lineage: Lineage, key: Hashable | None = None, snapshot: bool = False
    ) -> Verdict:
        """The verdict on an event (nothing remembered yet: see :meth:`remember`);
        ``key``: its topic and key, ``snapshot``: it comes from a snapshot read.

        An event without an id (not written by bizevents) is always new.
        """
        event_id = lineage.event_id
        if not event_id:
            return Verdict.NEW
        seen = self._seen.get(event_id)
        if seen is None:
            return Verdict.NEW
        self._seen.move_to_end(event_id)
        if snapshot and key is not None and seen[1] != lineage.source_position:
            last = self._last.get(key)
            if last is None or event_id not in last[1]:
                return Verdict.NEW  # the key's state went elsewhere and came back
        now = rank(lineage)
        if now == seen[0]:
            return Verdict.DUPLICATE
        return Verdict.STALE if now < seen[0] else Verdict.CORRECTION

    def remember(self, lineage: Lineage, key: Hashable | None = None) -> None:
        """The event was handled (or dead-lettered): its id and version are now seen,
        and are its key's last change's."""
        event_id = lineage.event_id
        if not event_id:
            return
        self._seen[event_id] = (rank(lineage), lineage.source_position)
        self._seen.move_to_end(event_id)
        if len(self._seen) > self.size:
            self._seen.popitem(last=False)
        if key is None:
            return
        change = (lineage.source_topic, lineage.source_partition, lineage.source_offset)
        last = self._last.get(key)
        if last is not None and last[0] == change:
            last[1].add(event_id)
        else:
            self._last[key] = (change, {event_id})
        self._last.move_to_end(key)
        if len(self._last) > self.size:
            self._last.popitem(last=False)
