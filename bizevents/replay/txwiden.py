"""A transaction replay's bounded ranges widened to whole transactions (pure: the probe that
reads a partition is given), with the configuration every task carries."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["PROBE_WINDOW", "Probe", "Scan", "TxReplayConfig", "widen"]


#: Offsets of the first window a widening probe reads; each next one is 4x larger.
PROBE_WINDOW: Final = 1024


@dataclass(frozen=True, slots=True)
class TxReplayConfig:
    """What every task needs (picklable)."""

    kafka: dict[str, Any]
    registry: dict[str, Any]
    translator: str
    transaction_topic: str
    dead_letter_topic: str
    subject_strategy: str
    auto_register: bool
    #: output topic -> partitions (files: buckets) of the events and the dead letters
    partitions: dict[str, int]
    output_kind: str  # contract | topic | replay | path | diff
    output_target: str
    baseline: str | None = None  # --diff: the version compared with
    #: "topic/partition" -> [first, last): a record there selects its transaction
    bounds: dict[str, tuple[int, int]] = field(default_factory=dict)
    since_ms: int | None = None
    until_ms: int | None = None
    #: output partitions ("topic/partition") an earlier attempt of the run wrote
    done: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Scan:
    """What the scan of one bounded range found: the offsets of its selecting records
    and the commit positions of the transactions they select."""

    topic: str
    partition: int
    first: int | None = None  # the first selecting record's offset
    last: int | None = None  # one past the last one's
    oldest: int | None = None  # commit positions
    newest: int | None = None
    unpositioned: bool = False  # a selected id without a commit position


# -- widening (pure, but for the prober it is given) ----------------------------------------


#: Reads ``[start, end)`` of a partition: ``(offset, commit position or None)`` of each
#: record (None: no transaction, or an id without a position).
Probe = Callable[[str, int, int, int], list[tuple[int, int | None]]]


def widen(
    marks: Mapping[tuple[str, int], tuple[int, int]],
    spans: Mapping[tuple[str, int], tuple[int, int]],
    scans: Sequence[Scan],
    probe: Probe,
) -> dict[tuple[str, int], tuple[int, int]]:
    """Each partition's range to read so that every selected transaction is whole.

    ``marks`` are the partitions' watermarks, ``spans`` the bounded ranges, ``scans``
    what they select. A partition's records are in commit order, so reading back from
    the range's start until a record committed before the oldest selected transaction,
    and forward from its end until one committed after the newest, covers every record
    of every selected transaction.
    """
    found = [s for s in scans if s.first is not None]
    if not found:
        return {}
    if any(s.unpositioned for s in found):  # no commit order to search by: read it all
        return dict(marks)
    positions = [p for s in found for p in (s.oldest, s.newest) if p is not None]
    by_partition = {(s.topic, s.partition): s for s in found}
    widened: dict[tuple[str, int], tuple[int, int]] = {}
    for where, (low, high) in marks.items():
        start, end = spans[where]
        scan = by_partition.get(where)
        if scan is not None and scan.first is not None and scan.last is not None:
            start, end = scan.first, scan.last
        if not positions:  # snapshot reads only: no transaction to complete
            if scan is not None:
                widened[where] = (start, end)
            continue
        oldest, newest = min(positions), max(positions)
        widened[where] = (
            _back(probe, where, start, low, oldest),
            _forward(probe, where, max(start, end), high, newest),
        )
    return widened


def _back(probe: Probe, where: tuple[str, int], start: int, low: int, oldest: int) -> int:
    end, window = start, PROBE_WINDOW
    while end > low:
        first = max(low, end - window)
        older = [o for o, p in probe(*where, first, end) if p is not None and p < oldest]
        if older:
            return max(older) + 1
        end, window = first, window * 4
    return low


def _forward(probe: Probe, where: tuple[str, int], end: int, high: int, newest: int) -> int:
    start, window = end, PROBE_WINDOW
    while start < high:
        last = min(high, start + window)
        newer = [o for o, p in probe(*where, start, last) if p is not None and p > newest]
        if newer:
            return min(newer)
        start, window = last, window * 4
    return high
