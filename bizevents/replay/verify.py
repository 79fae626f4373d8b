"""``bizevents verify --spark``: the proof that a technical topic holds its table, as a
Spark job, for tables larger than one machine's memory (PostgreSQL and MariaDB tables).

The comparison is capture's (:mod:`bizevents.capture.verify`: its table readers, its
canonical row encoding, its report), given to the job as a :class:`TableSide` (the
shell joins the two floors, which do not know each other); the work is spread over the
replay's executors:

1. the driver reads where the table's chunks start (every ``chunk_rows``-th key, one
   scan on the server) and plans the topic's offset ranges as the replay does
   (:class:`~bizevents.replay.plan.Planner`, :func:`~bizevents.replay.plan.slices`);
2. each range is read on an executor with the replay's range reader
   (:func:`~bizevents.replay.task.read_range`); each record becomes what it says of its
   key (:func:`~bizevents.capture.verify.entry_of`); Spark keeps the newest record per
   key (a key's records share a partition, so the highest offset), and a truncate drops
   what came before it in its partition;
3. each live key is placed in its chunk, and per chunk the keys are counted and their
   digests xor-ed; each chunk of the table is read on an executor, through capture's
   codec, and counted and xor-ed the same way;
4. the chunks whose counts or checksums differ (few, when the topic holds the table)
   are compared key by key, by exact key, on the driver, as the local verify does.

A key is placed among the boundaries in the database's order
(:meth:`~bizevents.capture.verifytables.TableReader.order_of`): on MariaDB a string key by
its collation's weights (asked of the server by the executors, a query per 500 keys),
an ENUM by its index; otherwise by Python's order of its decoded values, which is the
database's for numbers, dates and times, and PostgreSQL's for text under the ``C``
collation. A key placed in a neighbouring chunk (PostgreSQL text under another
collation) makes both chunks differ and be compared key by key: slower, not wrong.

The differing keys are checked again, as by the local verify, once capture passed the
database (:func:`keys_state`: the topic read again on the executors, only those keys'
records kept).

Memory: the driver holds the chunk boundaries, the per-chunk sums and the differing
chunks; an executor one range's or one chunk's keys (Spark spills the rest).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from bizevents.replay.plan import Planner, Range, slices

__all__ = ["SparkVerify", "TableSide", "compare_on_spark", "keys_state", "verify_table"]

#: A key: its ``(column, value)`` pairs.
Key = Any


class TableSide(Protocol):
    """What the job needs of the table's source, shipped with each task (picklable)."""

    def open_reader(self) -> tuple[Any, Callable[[], None]]:
        """The table's reader on new connections, and its closing."""

    def entry_of(self, decoded: Any, partition: int, offset: int) -> tuple[str, Any, Any, Any]:
        """What a topic record says of its key: ``(kind, key, digest, where)``."""

    def state_of(self, found: list[tuple[Key, tuple[Any, ...]]]) -> Any:
        """The topic's state of the keys found, ``(key, (partition, offset, digest,
        where, order, record key))`` each."""

    def compared(self, table: str, topic: str, read: int, state: Any, chunks: Any) -> Any:
        """The report of the table's ``chunks`` compared with the topic's ``state``."""


#: Offsets of a topic's partition per Spark task of ``verify --spark``.
SLICE = 200_000
#: Records a task reads per block.
_BATCH = 5_000


@dataclass(frozen=True)
class SparkVerify:
    """What a task needs (shipped with it): where the topic and the table are."""

    kafka: dict[str, Any]
    registry: dict[str, Any]
    side: TableSide
    table: str
    topic: str
    #: The key's columns in the key's order (set by :func:`verify_table`).
    key_names: tuple[str, ...] = ()
    #: Whether keys are placed in the database's order asked of the database (MariaDB's
    #: string and ENUM keys; set by :func:`verify_table`).
    database_order: bool = False

    def key_values(self, key: Any) -> tuple[Any, ...]:
        """A key's values in the key's column order."""
        values = dict(key)
        return tuple(values[n] for n in self.key_names)


def _reader(job: SparkVerify) -> tuple[Any, Callable[[], None]]:
    return job.side.open_reader()


def _read_ranges(job: SparkVerify, ranges: Iterator[Range]) -> Iterator[tuple[Any, ...]]:
    """On an executor: each record of the ranges as ``("k", key, (partition, offset,
    digest, where, the key's place in the database's order, record key))``, a truncate
    as ``("t", partition, offset)``."""
    from confluent_kafka import Consumer

    from bizevents.contracts.technical import AvroDecoder
    from bizevents.plumbing.registry import registry_client, schema_lookup
    from bizevents.replay.plan import READER_SETTINGS
    from bizevents.replay.task import read_range

    decoder = AvroDecoder(schema_lookup(registry_client(job.registry)))
    consumer = Consumer({**job.kafka, **READER_SETTINGS})
    reader, close = _reader(job) if job.database_order else (None, lambda: None)
    try:
        for rng in ranges:
            for _read, block in read_range(consumer, rng, _BATCH):
                keyed = []
                for record in block:
                    decoded = decoder.decode(record.key, record.value)
                    kind, key, digest, where = job.side.entry_of(
                        decoded, rng.partition, record.offset
                    )
                    if kind == "truncate":
                        yield ("t", rng.partition, record.offset)
                    elif key is not None:
                        keyed.append((key, record.offset, digest, where, record.key or b""))
                values = [job.key_values(k) for k, *_rest in keyed]
                orders = reader.order_of(values) if reader is not None else values
                for (key, offset, digest, where, raw), order in zip(keyed, orders, strict=True):
                    yield ("k", key, (rng.partition, offset, digest, where, order, raw))
    finally:
        consumer.close()
        close()


def _chunk_sums(
    job: SparkVerify, bounds: list[list[Any] | None], indexes: Iterator[int]
) -> Iterator[tuple[int, tuple[int, int, str]]]:
    """On an executor: each chunk of the table read, ``(index, (rows, xor of their
    digests, the database's position))``."""
    reader, close = _reader(job)
    try:
        for i in indexes:
            chunk = reader.between(bounds[i], bounds[i + 1])
            acc = 0
            for _key, _text, digest in chunk.rows:
                acc ^= int.from_bytes(digest, "big")
            yield i, (len(chunk.rows), acc, chunk.position)
    finally:
        close()


def _newest(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
    return a if a[1] > b[1] else b


def _latest(spark: Any, job: SparkVerify, slice_size: int) -> tuple[Any, Any]:
    """The topic's records read on the executors (persisted: the caller unpersists)
    and, from them, the newest record of each key not dropped by a later truncate."""
    sc = spark.sparkContext
    spans = Planner(job.kafka).spans(job.topic, None, None)
    ranges = slices(spans, slice_size)
    records = (
        sc.parallelize(ranges, max(1, len(ranges)))
        .mapPartitions(lambda part: _read_ranges(job, part))
        .persist()
    )
    truncated = dict(
        records.filter(lambda r: r[0] == "t").map(lambda r: (r[1], r[2])).reduceByKey(max).collect()
    )
    latest = (
        records.filter(lambda r: r[0] == "k")
        .map(lambda r: (r[1], r[2]))
        .reduceByKey(_newest)
        .filter(lambda kv: kv[1][1] > truncated.get(kv[1][0], -1))
    )
    return records, latest


def verify_table(spark: Any, job: SparkVerify, chunk_rows: int, slice_size: int) -> Any:
    """Compare one table with its topic as a Spark job; the side's report, the
    differences found key by key."""
    sc = spark.sparkContext
    reader, close = _reader(job)
    try:
        starts = reader.boundaries(chunk_rows)
        job = dataclasses.replace(
            job, key_names=reader.key_names, database_order=reader.database_order
        )
        # Chunk i holds the keys from starts[i] (the first: from the start) to starts[i+1].
        orders = reader.order_of([job.key_values(k) for k, _text in starts])
    finally:
        close()
    bounds: list[list[Any] | None] = [None] + [text for _k, text in starts[1:]] + [None]
    count = max(1, len(starts))

    def chunk_of(order: tuple[Any, ...]) -> int:
        return max(0, bisect.bisect_right(orders, order) - 1)

    records, latest = _latest(spark, job, slice_size)
    try:
        read = records.count()
        live = latest.filter(lambda kv: kv[1][2] is not None)
        topic_sums = dict(
            live.map(lambda kv: (chunk_of(kv[1][4]), (1, int.from_bytes(kv[1][2], "big"))))
            .reduceByKey(lambda a, b: (a[0] + b[0], a[1] ^ b[1]))
            .collect()
        )
        table_sums = dict(
            sc.parallelize(range(count), min(count, sc.defaultParallelism * 4))
            .mapPartitions(lambda part: _chunk_sums(job, bounds, part))
            .collect()
        )
        differing = sorted(
            i for i in range(count) if topic_sums.get(i, (0, 0)) != table_sums[i][:2]
        )
        wanted = set(differing)
        found = latest.filter(lambda kv: chunk_of(kv[1][4]) in wanted).collect()
    finally:
        records.unpersist()
    reader, close = _reader(job)
    try:
        chunks = (reader.between(bounds[i], bounds[i + 1]) for i in differing)
        state = job.side.state_of(found)
        report = job.side.compared(job.table, job.topic, read, state, chunks)
    finally:
        close()
    # The totals are the whole table's and topic's, not only the differing chunks'.
    report.rows = sum(rows for rows, _acc, _at in table_sums.values())
    report.chunks = sum(1 for rows, _acc, _at in table_sums.values() if rows)
    report.topic_rows = sum(n for n, _acc in topic_sums.values())
    if not differing:
        report.database_position = table_sums[count - 1][2]
    return report


def keys_state(spark: Any, job: SparkVerify, keys: list[Key], slice_size: int) -> Any:
    """The topic's latest state of these keys (the rechecks' topic side): the topic
    read again on the executors, only these keys' newest records brought back."""
    wanted = set(keys)
    reader, close = _reader(job)
    close()
    # Kept or dropped by their exact key here: no need of the database's order.
    job = dataclasses.replace(job, key_names=reader.key_names, database_order=False)
    records, latest = _latest(spark, job, slice_size)
    try:
        found = latest.filter(lambda kv: kv[0] in wanted).collect()
    finally:
        records.unpersist()
    return job.side.state_of(found)


def compare_on_spark(
    master: str | None,
    kafka: dict[str, Any],
    registry: dict[str, Any],
    side_of: Callable[[str], TableSide],
    chunk_rows: int,
) -> Callable[[str, str, Any], tuple[Callable[[], Any], Callable[[list[Key]], Any]]]:
    """How ``verify`` compares a table on Spark: ``(table, topic, reader) -> (the first
    comparison, the topic's state of some keys)``, the table's side from ``side_of``."""
    from functools import partial

    from bizevents.replay.session import spark_session

    session = spark_session(master, "bizevents-verify")

    def comparer(
        table: str, topic: str, _reader: Any
    ) -> tuple[Callable[[], Any], Callable[[list[Key]], Any]]:
        job = SparkVerify(kafka, registry, side_of(table), table, topic)
        return (
            partial(verify_table, session, job, chunk_rows, SLICE),
            partial(keys_state, session, job, slice_size=SLICE),
        )

    return comparer
