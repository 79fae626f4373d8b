"""The proof that a technical topic holds its table: ``bizevents verify``.

The topic is read to its end and reduced to the latest state per key, with
compaction's semantics (a tombstone or a delete removes the key, a truncate empties the
partition). The table is read in chunks of primary keys, each chunk in a consistent
read of its own. Both sides go through one canonical encoding: a database row is
written by capture's own codec into an envelope and read back by the same decoder as
the topic's records, so equal data gives equal values; each row is then a 16-byte
digest of its sorted values. Per chunk: the rows, the rows the topic has, and the xor
of the digests on both sides; a chunk whose counts or checksums differ is looked at key
by key: **missing** (in the table, not in the topic), **differs** (both, not equal),
**extra** (in the topic, not in the table; listed after the last chunk).

Each differing key comes with the positions between which it changed: the topic's last
record of the key (its partition and offset, and the source's position: LSN, or binlog
file:pos and GTID; for a missing key the delete or tombstone that removed it, if any)
and the database's position at which its chunk was read (MariaDB: the binlog position
the chunk's consistent snapshot matches; PostgreSQL: the WAL's insert position right
after the chunk's read, a bound the chunk's snapshot is at or before).

A row that changed after capture's position when the topic was read is not a gap: the
differing keys are checked again, table and topic, once capture has passed the
database's position of that moment (up to ``rechecks`` times). Capture must have passed
the database's position before the topic is read and before each recheck
(:func:`bizevents.capture.verifylag.capture_progress`, waiting a while); when it has
not, the report says so in one sentence (:attr:`Report.behind`) instead of calling its
differences gaps, and they are not repaired.

Memory: one digest (and the key) per row of the topic, and one position per key the
topic deleted; one chunk of the table. The table's readers are
:mod:`bizevents.capture.verifytables`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, TopicPartition

from bizevents.contracts.envelope import ChangeEvent, MySqlPosition, PgPosition, Position, Tombstone
from bizevents.contracts.technical import AvroDecoder

#: A key as a canonical tuple of ``(column, value)``.
Key = tuple[tuple[str, Any], ...]

__all__ = [
    "LOCAL_KEY_ID",
    "LOCAL_VALUE_ID",
    "Difference",
    "Key",
    "Report",
    "TableChunk",
    "TopicRow",
    "TopicState",
    "check_table",
    "compare",
    "digest_of",
    "key_of",
    "topic_state",
]

#: The schema ids of verify's own encoding of database rows (never registered: the
#: decoder is given their schemas directly).
LOCAL_KEY_ID = 2**31 - 2
LOCAL_VALUE_ID = 2**31 - 1


def key_of(key: Any) -> Key:
    """A key record as a hashable, canonical tuple."""
    return tuple(sorted((str(k), _hashable(v)) for k, v in dict(key).items()))


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def digest_of(row: Any) -> bytes:
    """The canonical row encoding's digest: its values sorted by column, by ``repr``."""
    text = repr(tuple(sorted((str(k), _hashable(v)) for k, v in dict(row).items())))
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class TopicRow:
    """A key's latest state in the topic: its row's digest and where it was written
    (and the record's key bytes and partition: where a repair's tombstone goes)."""

    digest: bytes
    position: str
    record_key: bytes = b""
    partition: int = -1


@dataclass(slots=True)
class TopicState:
    """A topic read to its end: the latest row per key, and where each key that is no
    longer there was removed (its delete or tombstone)."""

    rows: dict[Key, TopicRow] = field(default_factory=dict)
    gone: dict[Key, str] = field(default_factory=dict)
    read: int = 0


@dataclass(slots=True)
class TableChunk:
    """Rows of the table read together, and the database's position of that read."""

    rows: list[tuple[Key, list[Any], bytes]]
    position: str


@dataclass(slots=True)
class Difference:
    key: Key
    kind: Literal["missing", "differs", "extra"]
    #: The topic's last record of the key (``partition/offset``, the source's
    #: position); ``None`` when the topic has no record of it.
    topic_position: str | None
    #: The database's position when the key's side of the table was read.
    database_position: str = ""
    #: An extra key's record key and partition (``None`` when not known).
    tombstone: tuple[int, bytes] | None = None


@dataclass(slots=True)
class Report:
    table: str
    topic: str
    rows: int = 0
    topic_rows: int = 0
    chunks: int = 0
    differing_chunks: list[tuple[list[Any], list[Any]]] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    records_read: int = 0
    #: The database's position at the last chunk's read.
    database_position: str = ""
    #: Why the differences cannot be told from lag (capture had not passed the
    #: database's position): a sentence; ``None`` when they can.
    behind: str | None = None
    #: Whether the table was compared with its topic at all (not when capture was
    #: behind from the start).
    compared: bool = True

    @property
    def ok(self) -> bool:
        return not self.differences and self.behind is None

    @property
    def repairable(self) -> bool:
        """Whether its differences are gaps a repair should close (not changes that
        capture has yet to write)."""
        return self.behind is None and bool(self.differences)


def source_position(pos: Position | None) -> str:
    """A change's position in its source's log as an operator reads it."""
    if isinstance(pos, MySqlPosition):
        return f"{pos.file}:{pos.pos}" + (f" GTID {pos.gtid}" if pos.gtid else "")
    if isinstance(pos, PgPosition) and pos.lsn is not None:
        return f"LSN {pos}"
    return "no source position"


def _where(partition: int, offset: int, what: str) -> str:
    return f"partition {partition} offset {offset}: {what}"


def entry_of(
    decoded: ChangeEvent | Tombstone, partition: int, offset: int
) -> tuple[
    Literal["row", "delete", "tombstone", "truncate", "none"], Key | None, bytes | None, str
]:
    """What one record of a technical topic says: ``(kind, the key, the row's digest,
    where it stands)``; ``row`` sets the key, ``delete`` and ``tombstone`` remove it,
    ``truncate`` empties the partition before it, ``none`` says nothing of a key."""
    if isinstance(decoded, Tombstone):
        return "tombstone", key_of(decoded.key), None, _where(partition, offset, "tombstone")
    at = source_position(decoded.source.position)
    if decoded.op == "t":
        return "truncate", None, None, _where(partition, offset, f"truncate at {at}")
    if decoded.key is None:
        return "none", None, None, ""
    if decoded.after is None:
        return "delete", key_of(decoded.key), None, _where(partition, offset, f"delete at {at}")
    where = _where(partition, offset, f"{decoded.op} at {at}")
    return "row", key_of(decoded.key), digest_of(decoded.after), where


def topic_state(kafka: dict[str, Any], topic: str, decoder: AvroDecoder) -> TopicState:
    """The latest state per key of ``topic``, read to its end (compaction's semantics),
    where the removed keys went, and the number of records read."""
    consumer = Consumer(
        {
            **kafka,
            "group.id": "bizevents-verify",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    found = TopicState()
    state = found.rows
    gone = found.gone
    by_partition: dict[int, set[Key]] = {}
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return found
        ends = {}
        for p in meta.partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        at = dict.fromkeys(ends, 0)
        remaining = set(ends)
        # Each partition ends at the fetch's "end of partition" once past the high
        # watermark asked for first (which may not count a write just acknowledged);
        # a topic written to all the time is given one second more, then it ends.
        passed: float | None = None
        while remaining:
            if passed is None and all(at[p] >= ends[p] for p in remaining):
                passed = time.monotonic()
            if passed is not None and time.monotonic() - passed > 1.0:
                break
            # consume() returns once it holds 10,000 records or the timeout passed: a
            # long timeout made every read of a topic's tail wait it out (5 s each)
            for msg in consumer.consume(10_000, timeout=0.2):
                err = msg.error()
                p = msg.partition() or 0
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and at.get(p, 0) >= ends.get(p, 0):
                        remaining.discard(p)
                    continue
                offset = msg.offset() or 0
                at[p] = offset + 1
                found.read += 1
                decoded = decoder.decode(msg.key(), msg.value())
                kind, k, digest, where = entry_of(decoded, p, offset)
                keys = by_partition.setdefault(p, set())
                if kind == "truncate":
                    for gone_key in keys:
                        state.pop(gone_key, None)
                        gone[gone_key] = where
                    keys.clear()
                elif kind == "row":
                    assert k is not None and digest is not None
                    state[k] = TopicRow(digest, where, msg.key() or b"", p)
                    gone.pop(k, None)
                    keys.add(k)
                elif k is not None:  # removed: a delete, or a tombstone
                    # A tombstone after its delete: the delete says more (its position).
                    if state.pop(k, None) is not None or k not in gone or kind == "delete":
                        gone[k] = where
                    keys.discard(k)
        return found
    finally:
        consumer.close()


def _xor(digests: Iterable[bytes]) -> int:
    acc = 0
    for d in digests:
        acc ^= int.from_bytes(d, "big")
    return acc


def compare(report: Report, found: TopicState, chunks: Iterator[TableChunk]) -> None:
    """Compare the table's chunks with the topic's state; fills ``report``. The topic's
    keys left when the table ends are the extra ones."""
    topic = found.rows
    seen: set[Key] = set()
    for table_chunk in chunks:
        chunk = table_chunk.rows
        at = report.database_position = table_chunk.position
        if not chunk:
            continue
        report.chunks += 1
        report.rows += len(chunk)
        present = [(k, topic.get(k)) for k, _text, _d in chunk]
        have = [t for _k, t in present if t is not None]
        same = len(have) == len(chunk) and _xor(t.digest for t in have) == _xor(
            d for _k, _text, d in chunk
        )
        seen.update(k for k, _text, _d in chunk)
        if same:
            continue
        report.differing_chunks.append((chunk[0][1], chunk[-1][1]))
        for (k, _text, d), (_k, t) in zip(chunk, present, strict=True):
            if t is None:
                report.differences.append(Difference(k, "missing", found.gone.get(k), at))
            elif t.digest != d:
                report.differences.append(Difference(k, "differs", t.position, at))
    report.topic_rows = len(topic)
    for k, t in topic.items():
        if k not in seen:
            # Its key range was read by some chunk; the last one's position bounds them all.
            known = (t.partition, t.record_key) if t.record_key else None
            report.differences.append(
                Difference(k, "extra", t.position, report.database_position, known)
            )


def check_table(
    table: str,
    topic: str,
    behind: Callable[[], str | None],
    first: Callable[[], Report],
    state_of: Callable[[list[Key]], TopicState],
    rows_for: Callable[[list[Key]], TableChunk],
    rechecks: int,
) -> Report:
    """The table against its topic: ``first`` compares them once capture passed the
    database's position (``behind``: ``None`` once it has), then the differing keys
    are checked again, table (``rows_for``) and topic (``state_of``), up to ``rechecks``
    times, each once capture passed the database again. Capture behind at any of
    these points: the report says so and its differences are not called gaps."""
    lag = behind()
    if lag is not None:
        return Report(table, topic, behind=lag, compared=False)
    report = first()
    for _ in range(rechecks):
        if not report.differences:
            break
        lag = behind()
        if lag is not None:
            report.behind = lag
            break
        keys = [d.key for d in report.differences]
        again = Report(table, topic)
        compare(again, state_of(keys), iter([rows_for(keys)]))
        report.differences = again.differences
        report.database_position = again.database_position
        if not report.differences:
            report.differing_chunks = []
    return report
