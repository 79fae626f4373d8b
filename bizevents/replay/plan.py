"""Planning on the driver: which topics, which offset range of each partition, which slices.

The plan is a snapshot taken when a run starts: for each partition, the range from
the low watermark (or ``--from``) to the high watermark (or ``--until``). The
watermarks come from ListOffsets where the broker answers it exactly (Apache Kafka),
else from a Fetch response (librdkafka's cached watermarks after a consume): the
embedded broker's ListOffsets(latest) is wrong (it answers the last batch's base
offset + 1; see docs/broker.md, :class:`~bizevents.plumbing.kafka.BrokerTraits`). A
partition larger than the slice size is cut into slices; each slice is one Spark task.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import broker_traits, while_restarting
from bizevents.replay.exceptions import ReplayConfigError, TopicNotFoundError
from bizevents.replay.spec import Bound

#: Consumer settings of every replay read: assign mode, no group, nothing committed.
READER_SETTINGS: Final[dict[str, Any]] = {
    "group.id": "bizevents-replay",  # librdkafka wants one; assign mode never joins it
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "earliest",
    # Technical topics are written without transactions (capture, Debezium): a
    # read_committed reader would stall on the embedded broker's never-ending
    # transactions without gaining anything (it does not filter aborted records).
    "isolation.level": "read_uncommitted",
    "log.connection.close": False,
    # Ranges end at or before the snapshot's high watermark, so nothing is worth waiting
    # for at the end of a partition; a long wait there delays the next range's fetch.
    "fetch.wait.max.ms": 10,
}


@dataclass(frozen=True, slots=True)
class Span:
    """One partition's snapshot: ``[start, end)`` to read (watermarks already bounded)."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True, slots=True, order=True)
class Range:
    """One Spark task's work: ``[start, end)`` of one partition, slice ``index`` of ``slices``."""

    topic: str
    partition: int
    start: int
    end: int
    index: int = 0
    slices: int = 1

    @property
    def id(self) -> str:
        return f"{self.topic}/{self.partition}/{self.start}-{self.end}"

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def file_stem(self) -> str:
        """A file name for this range's output (topic names may hold dots, never slashes)."""
        return f"{self.topic}-{self.partition}-{self.start:020d}-{self.end:020d}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Range:
        return cls(**data)


def matching_topics(pattern: str, topics: Iterable[str]) -> list[str]:
    """Topics matching any comma-separated glob of ``pattern`` (``shop.store.*``).

    Internal topics (a leading ``_``) only match a glob that names them explicitly.
    """
    globs = [p.strip() for p in pattern.split(",") if p.strip()]
    if not globs:
        raise ReplayConfigError("--topics is empty; give a name or a glob, e.g. shop.store.*")
    found = set()
    for topic in topics:
        for glob in globs:
            if topic.startswith("_") and not glob.startswith("_"):
                continue
            if fnmatch.fnmatchcase(topic, glob):
                found.add(topic)
    return sorted(found)


def slices(spans: Sequence[Span], slice_size: int) -> list[Range]:
    """Cut every span into ranges of at most ``slice_size`` offsets; empty spans vanish."""
    ranges: list[Range] = []
    for span in spans:
        size = span.end - span.start
        if size <= 0:
            continue
        count = -(-size // slice_size)
        step = -(-size // count)  # even slices, the last one maybe shorter
        for index in range(count):
            start = span.start + index * step
            ranges.append(
                Range(span.topic, span.partition, start, min(span.end, start + step), index, count)
            )
    return ranges


def bounded(low: int, high: int, start: Bound | None, until: Bound | None) -> tuple[int, int]:
    """The offsets to read of ``[low, high)``; timestamp bounds filter records later.

    Always within ``[low, high]``: a bound past the end gives the empty range at the
    end, never a position a reader could wait at forever (a broker answers a Fetch past
    its end with nothing, and no end-of-partition event follows).
    """
    first = low
    last = high
    if start is not None and start.offset is not None:
        first = min(high, max(low, start.offset))
    if until is not None and until.offset is not None:
        last = min(high, until.offset)
    return first, max(first, last)


class Planner:
    """Reads the cluster's metadata and each partition's watermarks (driver side); a
    cluster restarting, or a node down, is asked again for ``wait_s``
    (:func:`~bizevents.plumbing.kafka.while_restarting`)."""

    def __init__(
        self, kafka: Mapping[str, Any], timeout_s: float = 30.0, wait_s: float = 0.0
    ) -> None:
        self.kafka = dict(kafka)
        self.timeout_s = timeout_s
        self.wait_s = wait_s
        #: Records (and end-of-partition events) :meth:`watermarks` read: about one per
        #: partition, since a partition that has answered is paused.
        self.records_read = 0

    def topics(self, pattern: str) -> dict[str, int]:
        """``topic -> partition count`` of the topics matching ``pattern``."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.kafka, "log.connection.close": False})
        try:
            # list_topics() with no topic asks for all topics; naming one would make
            # the embedded broker auto-create it.
            metadata = while_restarting(
                "reading the topics",
                lambda: admin.list_topics(timeout=self.timeout_s),
                self.wait_s,
            )
        except Exception as exc:
            raise TransientError(
                f"cannot read the topics of {self.kafka.get('bootstrap.servers')}: {exc}"
            ) from exc
        names = matching_topics(pattern, metadata.topics)
        if not names:
            raise TopicNotFoundError(
                f"no topic matches --topics {pattern!r} on {self.kafka.get('bootstrap.servers')}"
            )
        return {name: len(metadata.topics[name].partitions) for name in names}

    def watermarks(
        self, partitions: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[int, int]]:
        """``(low, high)`` per partition: from ListOffsets where the broker answers it
        exactly, else from Fetch responses."""
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        traits = broker_traits(
            str(self.kafka.get("bootstrap.servers", "")),
            str(self.kafka.get("security.protocol", "PLAINTEXT")),
            wait_s=self.wait_s,
        )
        if traits.exact_list_offsets:

            def ends() -> dict[tuple[str, int], tuple[int, int]]:
                # a client of its own per attempt: one that met a partition before the
                # restarted cluster knew it keeps it unknown until its next metadata
                # refresh (minutes), past any wait
                listing = Consumer({**self.kafka, **READER_SETTINGS})
                try:
                    return {
                        (t, p): listing.get_watermark_offsets(
                            TopicPartition(t, p), timeout=self.timeout_s
                        )
                        for t, p in partitions
                    }
                finally:
                    listing.close()

            try:
                return while_restarting("listing the offsets of the topics", ends, self.wait_s)
            except KafkaException as exc:
                raise TransientError(f"cannot list the offsets of the topics: {exc}") from exc

        consumer = Consumer(
            {
                **self.kafka,
                **READER_SETTINGS,
                # one small fetch per partition is all this needs
                "fetch.max.bytes": 1 << 20,
                "max.partition.fetch.bytes": 64 << 10,
                "queued.max.messages.kbytes": 1024,
                # A fetch answer holds whole batches, however small the sizes asked: a
                # large batch fills the queue above, and librdkafka then postponed the
                # fetch of the partitions yet to answer by a second (its default), once
                # per such answer (a second in about one preparation of ten for
                # bench/replay.py's topic, five seconds for a topic of 2 MB batches).
                "fetch.queue.backoff.ms": 10,
            }
        )
        try:
            # At offset 0, not OFFSET_BEGINNING: librdkafka resolves a logical offset
            # assigned before it has the partition's leader with a query that it retries
            # on a 500 ms timer, which made most of a replay's preparation. A log that
            # starts later answers 0 with OFFSET_OUT_OF_RANGE, and "earliest" takes it
            # to its first record as before.
            consumer.assign([TopicPartition(t, p, 0) for t, p in partitions])
            pending = set(partitions)
            first: dict[tuple[str, int], int] = {}
            deadline = time.monotonic() + self.timeout_s
            while pending:
                if time.monotonic() > deadline:
                    raise TransientError(
                        f"no Fetch answer within {self.timeout_s:.0f} s for "
                        f"{', '.join(f'{t}[{p}]' for t, p in sorted(pending)[:5])}"
                    )
                answered = []
                for message in consumer.consume(len(pending), 0.2):
                    self.records_read += 1
                    where = (str(message.topic()), int(message.partition() or 0))
                    error = message.error()
                    if error is not None and error.code() != KafkaError._PARTITION_EOF:
                        raise TransientError(f"cannot read {where[0]}[{where[1]}]: {error}")
                    if error is None:
                        first.setdefault(where, int(message.offset() or 0))
                    if where in pending:
                        pending.discard(where)
                        answered.append(TopicPartition(*where))
                # One answer per partition is all this needs: a partition left fetching
                # fills the queue ahead of the others' first answers (a planner read
                # 50,000 records of a 300,000-record topic before it paused them).
                if answered and pending:
                    consumer.pause(answered)
            marks: dict[tuple[str, int], tuple[int, int]] = {}
            for topic, partition in partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), cached=True
                )
                if high < 0:
                    raise TransientError(f"no high watermark for {topic}[{partition}]")
                if low < 0:  # the broker did not report a log start offset
                    low = first.get((topic, partition), high)
                marks[(topic, partition)] = (low, high)
            return marks
        finally:
            consumer.close()

    def spans(self, pattern: str, start: Bound | None, until: Bound | None) -> list[Span]:
        counts = self.topics(pattern)
        partitions = [(t, p) for t, n in sorted(counts.items()) for p in range(n)]
        marks = self.watermarks(partitions)
        spans = []
        for topic, partition in partitions:
            low, high = marks[(topic, partition)]
            first, last = bounded(low, high, start, until)
            spans.append(Span(topic, partition, first, last))
        return spans
