"""The consumer kit's parked events as its dead-letter topic holds them (docs/parking.md).

A consumer parks a key with the state and records of :mod:`bizevents.plumbing.parking`
(the group stands where a translator's name stands); the key's parked events are its
dead-letter records marked ``bizevents.dlq.parked``, each with the original key, value
and headers followed by :data:`~bizevents.plumbing.parking.PARKED_EXTRA_HEADERS` of
ours (stage, reason, error, where it was read, the group, the mark). This module reads
them back, in the order a re-drive hands them to the handler again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from bizevents.contracts.business import dead_letter_cause
from bizevents.plumbing.parking import PARKED_EXTRA_HEADERS, Ref, is_parked, refs_behind

__all__ = [
    "HEADER_CONSUMER_GROUP",
    "HEADER_CONSUMER_OFFSET",
    "HEADER_CONSUMER_PARTITION",
    "HEADER_CONSUMER_TOPIC",
    "ParkedEvent",
    "parked_event_of",
    "parked_events",
]

#: Where a dead-lettered record was read (the lineage headers name its technical source).
HEADER_CONSUMER_TOPIC: Final = "bizevents.consumer.topic"
HEADER_CONSUMER_PARTITION: Final = "bizevents.consumer.partition"
HEADER_CONSUMER_OFFSET: Final = "bizevents.consumer.offset"
HEADER_CONSUMER_GROUP: Final = "bizevents.consumer.group"


@dataclass(frozen=True, slots=True)
class ParkedEvent:
    """A parked business record: where the group read it, its own key, value and
    headers, and why it was parked."""

    group: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    stage: str
    reason: str


def parked_event_of(msg: Any) -> ParkedEvent | None:
    """The parked event a dead-letter message (confluent-kafka) holds; None when it is
    not a consumer's parked record."""
    headers = list(msg.headers() or [])
    if len(headers) < PARKED_EXTRA_HEADERS:
        return None
    ours = dict(headers[-PARKED_EXTRA_HEADERS:])  # never the original's own headers
    if not is_parked(ours) or HEADER_CONSUMER_GROUP not in ours:
        return None
    try:
        return ParkedEvent(
            (ours.get(HEADER_CONSUMER_GROUP) or b"").decode(),
            (ours.get(HEADER_CONSUMER_TOPIC) or b"").decode(),
            int(ours.get(HEADER_CONSUMER_PARTITION) or b"-1"),
            int(ours.get(HEADER_CONSUMER_OFFSET) or b"-1"),
            msg.key(),
            msg.value(),
            [(k, v) for k, v in headers[:-PARKED_EXTRA_HEADERS] if isinstance(v, bytes)],
            *dead_letter_cause(ours),
        )
    except ValueError:
        return None


def parked_events(messages: Sequence[Any], ref: Ref, after: int) -> list[ParkedEvent]:
    """``ref``'s parked events among dead-letter ``messages`` read past offset ``after``,
    in the order they were read, each once (a crash may have parked one twice)."""
    events = (p for p in map(parked_event_of, messages) if p is not None)
    return refs_behind(
        ref, after, (((p.group, p.topic, p.partition, p.key or b""), p.offset, p) for p in events)
    )
