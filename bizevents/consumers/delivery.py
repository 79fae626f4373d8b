"""What the consumer kit hands a handler (:class:`Delivery`) and counts
(:class:`ConsumerStats`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from bizevents.contracts.business import HEADER_SNAPSHOT, BusinessEvent, Lineage

__all__ = ["ConsumerStats", "Delivery", "Handler", "is_snapshot"]

E = TypeVar("E", bound=BusinessEvent)


@dataclass(frozen=True, slots=True)
class Delivery(Generic[E]):
    """One business event for the handler, with where it was read and what it is."""

    event: E
    key: bytes | None
    topic: str
    partition: int
    offset: int
    #: The same event id was handled before from a lower translator version (or live,
    #: and this comes from a replay): this event replaces that one.
    supersedes: bool = False
    #: It comes from a snapshot read: the row's state when read, not an occurrence (a
    #: re-snapshot of an unchanged row repeats its id; docs/consuming.md).
    snapshot: bool = False

    @property
    def lineage(self) -> Lineage:
        return self.event.lineage

    @property
    def event_id(self) -> str:
        return self.event.lineage.event_id

    @property
    def replayed(self) -> bool:
        """A replay wrote it (a correction of an event possibly older than the window)."""
        return self.event.lineage.replay


Handler = Callable[[Delivery[Any]], Awaitable[None] | None]


@dataclass(slots=True)
class ConsumerStats:
    """What happened to the records read."""

    delivered: int = 0
    corrections: int = 0
    duplicates: int = 0
    stale: int = 0
    dead_lettered: int = 0
    #: records parked: those that failed and parked their key, and those behind them
    parked: int = 0
    #: parked records handed to the handler by a re-drive
    redriven: int = 0
    commits: int = 0


def is_snapshot(headers: Sequence[tuple[str, bytes | None]] | None) -> bool:
    """Whether a record's headers mark an event of a snapshot read."""
    return any(name == HEADER_SNAPSHOT and value == b"true" for name, value in headers or ())
