"""``--to path:DIR --format parquet``: replayed events as a Parquet dataset, written by Spark.

No Python Parquet library is involved (pyarrow is not a dependency): the executor's
Python task yields one row per output record, ``spark.createDataFrame(rdd, schema)``
turns them into a DataFrame with an explicit schema (pickled rows, no Arrow), and
Spark's own JVM Parquet writer writes it.

Layout: one folder per range, ``DIR/range=<source topic>-<partition>-<start>-<end>/``,
so ``spark.read.parquet(DIR)`` reads every range at once (with a ``range`` column).
A range is written to the hidden folder ``DIR/.range=<stem>.partial`` (readers skip
names that start with ``.``), then renamed into place through Hadoop's FileSystem
API; a rerun of a range replaces its folder whole. The write is one Spark job per
range, like the other outputs, so resume works the same way.

The range's counts (a :class:`~bizevents.replay.task.TaskReport`) come back to the driver
through an accumulator: the rows go to the JVM writer, not back to Python.
"""

from __future__ import annotations

import json
from base64 import b64encode
from collections.abc import Iterator, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from io import BytesIO
from time import perf_counter
from typing import Any, Final
from uuid import UUID

from pyspark.accumulators import AccumulatorParam

from bizevents.contracts.business import (
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_TOPIC,
)
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.framing import unframe
from bizevents.replay.plan import Range
from bizevents.replay.task import TaskConfig, TaskReport, count_event, range_blocks, runtime
from bizevents.translators.pipeline import OutRecord

#: The columns of a replayed record, in the order of :func:`spark_schema`.
COLUMNS: Final = (
    "event_id",  # null for a dead letter
    "translator",  # name@version ("" when a dead letter reached no translator)
    "contract",  # the writer schema's full name; null for a dead letter
    "topic",  # the output topic (the contract's topic, or the replay dead-letter topic)
    "key",  # the source record's key
    "value",  # Confluent-framed Avro (magic byte, schema id, body); dead letters: the input
    "headers",  # array<struct<key, value>> in order (Kafka headers may repeat)
    "source_topic",
    "source_partition",
    "source_offset",
    "event",  # the decoded value as JSON; null for a dead letter
)
RANGE_COLUMN: Final = "range"
ARROW_SETTING: Final = "spark.sql.execution.arrow.pyspark.enabled"

Row = tuple[Any, ...]


def spark_schema() -> Any:
    """The explicit Spark schema of the rows (no inference, no sampling)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    header = StructType(
        [StructField("key", StringType(), False), StructField("value", BinaryType(), True)]
    )
    return StructType(
        [
            StructField("event_id", StringType(), True),
            StructField("translator", StringType(), False),
            StructField("contract", StringType(), True),
            StructField("topic", StringType(), False),
            StructField("key", BinaryType(), True),
            StructField("value", BinaryType(), True),
            StructField("headers", ArrayType(header, False), False),
            StructField("source_topic", StringType(), True),
            StructField("source_partition", IntegerType(), True),
            StructField("source_offset", LongType(), True),
            StructField("event", StringType(), True),
        ]
    )


def range_folder(rng: Range) -> str:
    return f"{RANGE_COLUMN}={rng.file_stem}"


# -- executors: rows ----------------------------------------------------------------------


class EventReader:
    """Confluent-framed Avro -> (contract full name, JSON text), writer schemas cached by id."""

    def __init__(self, schema_text: Any) -> None:
        self._schema_text = schema_text
        self._schemas: dict[int, tuple[Any, str]] = {}

    def __call__(self, value: bytes) -> tuple[str, str]:
        from fastavro import parse_schema, schemaless_reader

        schema_id, framed = unframe(value)  # FramingError (a ValueError) names what is wrong
        found = self._schemas.get(schema_id)
        if found is None:
            parsed = parse_schema(json.loads(self._schema_text(schema_id)))
            name = str(parsed.get("name", "")) if isinstance(parsed, dict) else ""
            found = self._schemas[schema_id] = (parsed, name)
        parsed, name = found
        data = schemaless_reader(BytesIO(framed), parsed, None)
        return name, json.dumps(data, default=_json_value, separators=(",", ":"))


def _json_value(value: Any) -> Any:
    """Avro logical types as JSON: decimals as strings (exact), times in ISO 8601."""
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, bytes):
        return b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _row(record: OutRecord, topic: str, reader: EventReader) -> Row:
    headers = record.headers
    found = {k: v for k, v in headers}  # the last one wins (dead letters append theirs)
    partition = found.get(HEADER_SOURCE_PARTITION)
    offset = found.get(HEADER_SOURCE_OFFSET)
    source = found.get(HEADER_SOURCE_TOPIC)
    contract = event = None
    if not record.dead_letter and record.value is not None:
        contract, event = reader(record.value)
    return (
        record.event_id or None,
        record.translator,
        contract,
        topic,
        record.key,
        record.value,
        [(k, v) for k, v in headers],
        None if source is None else source.decode(),
        None if partition is None else int(partition),
        None if offset is None else int(offset),
        event,
    )


def range_rows(
    config: TaskConfig, rng: Range, survivors: Sequence[int] | None, report: TaskReport
) -> Iterator[Row]:
    """Read, translate and yield one range's rows (runs in an executor's Python worker)."""
    started = perf_counter()
    rt = runtime(config)
    output = config.output
    assert output is not None
    reader = rt.extras.get("event_reader")
    if reader is None:
        reader = rt.extras["event_reader"] = EventReader(rt.schema_text)
    for block in range_blocks(rt, rng, survivors, report):
        result = rt.pipeline.process(block)
        report.count(result)
        for record in result.records:
            topic = record.topic if record.dead_letter else output.topic_for(record.topic)
            count_event(report, record, topic)
            yield _row(record, topic, reader)
    report.seconds = perf_counter() - started


# -- the driver: one write per range ------------------------------------------------------


class ReportsParam(AccumulatorParam):  # type: ignore[type-arg]
    """A range's reports, one per successful task attempt (the driver keeps the last)."""

    def zero(self, value: list[TaskReport]) -> list[TaskReport]:
        return []

    def addInPlace(self, a: list[TaskReport], b: list[TaskReport]) -> list[TaskReport]:
        a.extend(b)
        return a


def _rows_task(
    config: TaskConfig, rng: Range, survivors: Sequence[int] | None, reports: Any
) -> Any:
    def rows(_: Any) -> Iterator[Row]:
        report = TaskReport(rng.id)
        yield from range_rows(config, rng, survivors, report)
        reports.add([report])

    return rows


def write_range(
    spark: Any, config: TaskConfig, rng: Range, survivors: Sequence[int] | None
) -> TaskReport:
    """One Spark job: the range's rows written as Parquet, then renamed into place."""
    output = config.output
    assert output is not None and output.kind == "path"
    spark.conf.set(ARROW_SETTING, "false")  # rows travel pickled; nothing needs pyarrow
    context = spark.sparkContext
    reports = context.accumulator([], ReportsParam())
    rows = context.parallelize([0], 1).mapPartitions(_rows_task(config, rng, survivors, reports))
    frame = spark.createDataFrame(rows, spark_schema(), verifySchema=False)
    root = output.target.rstrip("/")
    partial = f"{root}/.{range_folder(rng)}.partial"
    final = f"{root}/{range_folder(rng)}"
    frame.write.mode("overwrite").parquet(partial)
    _rename(spark, partial, final)
    found: list[TaskReport] = reports.value
    if not found:
        raise TransientError(f"the Parquet write of {rng.id} returned no report")
    return found[-1]


def _rename(spark: Any, source: str, target: str) -> None:
    """Replace ``target`` with the folder ``source`` (any Hadoop file system)."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    src = jvm.org.apache.hadoop.fs.Path(source)
    dst = jvm.org.apache.hadoop.fs.Path(target)
    fs = dst.getFileSystem(conf)
    if fs.exists(dst):  # a rerun of the range: the new folder replaces the old whole
        fs.delete(dst, True)
    if not fs.rename(src, dst):
        raise TransientError(f"cannot rename {source} to {target}")
