"""What the translation cores take and give: the technical records read, the records to
produce (business events and dead letters), the counts, and the dead-letter record of
a source record. Pure data, shared by the row core (:mod:`~bizevents.translators.pipeline`),
the transaction core (:mod:`~bizevents.translators.txcore`), both workers and the replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from bizevents.contracts.business import (
    HEADER_DLQ_ERROR,
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_TOPIC,
    HEADER_TRANSLATOR,
    BusinessEvent,
)
from bizevents.contracts.envelope import ChangeEvent, Tombstone
from bizevents.contracts.exceptions import Coordinates
from bizevents.contracts.technical.events import Gate, SourceTable
from bizevents.translators.shadow import ShadowComparison

__all__ = [
    "DEAD_LETTER_TOPIC",
    "SHADOW_SUFFIX",
    "Counts",
    "Decoder",
    "Headers",
    "OutRecord",
    "PlacedRecord",
    "Record",
    "Result",
    "Serializer",
    "SourceRecord",
    "Stage",
    "dead_letter",
    "dead_letter_source",
]

DEAD_LETTER_TOPIC: Final = "bizevents.dead-letter"
#: A shadow version's events go to their contract's topic with this suffix.
SHADOW_SUFFIX: Final = ".shadow"

Stage = Literal["decode", "translate", "contract"]
Headers = list[tuple[str, bytes | None]]


class Decoder(Protocol):
    def decode(
        self,
        key: bytes | None,
        value: bytes | None,
        coordinates: Coordinates | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        columns: frozenset[str] | None = None,
    ) -> ChangeEvent | Tombstone: ...

    def gate(
        self, columns: frozenset[str], table: SourceTable, projection: frozenset[str] | None = None
    ) -> Gate | None:
        """``unchanged(key, value)``: whether a record is, for sure and without decoding
        its rows, an update of ``table`` that changes none of ``columns`` and that decodes
        (with ``projection``, the columns it decodes) (None: this decoder cannot tell)."""
        ...


class Serializer(Protocol):
    """``serializer(event, topic, lineage) -> bytes``; ``lineage``, when given, is the
    Avro encoding of the event's lineage (:class:`bizevents.translators.lineage.Stamper`), to be
    written in place of ``event.lineage`` (bizevents.contracts.serde.BusinessSerializer does)."""

    def __call__(
        self, event: BusinessEvent, topic: str | None = None, lineage: bytes | None = None
    ) -> bytes: ...


class Keyed(Protocol):
    """A record's offset, key and value: what compaction reads of it."""

    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


class Record(Keyed, Protocol):
    """What the core reads of a technical record of a known partition
    (:meth:`Pipeline.process_partition`): a Kafka client's own record (the worker hands
    aiokafka's over as they are)."""

    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...


class PlacedRecord(Record, Protocol):
    """A technical record that names its partition (:meth:`Pipeline.process`)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One record of a technical topic, as read from Kafka."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class OutRecord:
    """One record to produce: a business event or a dead-letter record."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    translator: str  # name@version, or "" when no translator was reached
    event_id: str = ""  # business events only

    @property
    def dead_letter(self) -> bool:
        return not self.event_id


@dataclass(slots=True)
class Counts:
    """What happened to the records one translator saw."""

    consumed: int = 0
    emitted: int = 0
    dropped: int = 0
    dead_lettered: int = 0
    #: Changes parked: a failing one that parked its key, and those parked behind it.
    parked: int = 0
    #: Time spent translating, stamping and serializing (the translator's share of a batch).
    seconds: float = 0.0

    def add(self, other: Counts) -> None:
        """Add ``other``'s counts to these."""
        self.consumed += other.consumed
        self.emitted += other.emitted
        self.dropped += other.dropped
        self.dead_lettered += other.dead_lettered
        self.parked += other.parked
        self.seconds += other.seconds


@dataclass(slots=True)
class Result:
    """The records to produce for a batch, and what happened, per translator."""

    records: list[OutRecord] = field(default_factory=list)
    counts: dict[str, Counts] = field(default_factory=dict)
    undecodable: int = 0
    tombstones: int = 0
    unrouted: int = 0
    #: Per shadow version (``name@version``): how its events compared with the live one's.
    shadows: dict[str, ShadowComparison] = field(default_factory=dict)


def dead_letter(
    record: PlacedRecord,
    topic: str,
    stage: str,
    reason: str,
    error: str,
    translator: str,
    extra: Sequence[tuple[str, bytes | None]] = (),
) -> OutRecord:
    """The dead-letter record of ``record``: its own key, value and headers, and headers
    naming the stage, the reason, the error, the translator and its coordinates."""
    headers: Headers = [
        *record.headers,
        (HEADER_DLQ_STAGE, stage.encode()),
        (HEADER_DLQ_REASON, reason.encode()),
        (HEADER_DLQ_ERROR, error.encode()),
        (HEADER_TRANSLATOR, translator.encode()),
        (HEADER_SOURCE_TOPIC, record.topic.encode()),
        (HEADER_SOURCE_PARTITION, str(record.partition).encode()),
        (HEADER_SOURCE_OFFSET, str(record.offset).encode()),
        *extra,
    ]
    return OutRecord(topic, record.key, record.value, headers, translator)


def dead_letter_source(msg: Any, extra: int) -> SourceRecord:
    """The source record a dead-letter message (as :func:`dead_letter` made it, with
    ``extra`` headers appended after its own) holds: its coordinates, key, value and
    original headers. ``ValueError`` when its coordinates are not numbers."""
    headers = msg.headers() or []
    found = dict(headers)
    return SourceRecord(
        (found.get(HEADER_SOURCE_TOPIC) or b"").decode(),
        int(found.get(HEADER_SOURCE_PARTITION) or b"-1"),
        int(found.get(HEADER_SOURCE_OFFSET) or b"-1"),
        msg.key(),
        msg.value(),
        list(headers[:-extra]),
    )
