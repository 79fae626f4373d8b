"""What a Spark task runs: read one offset range, translate it, write it, report.

Everything here runs in an executor's Python worker. The clients, the decoder (and
its cache of writer schemas), the serializer (and its cache of schema ids) and the
pipelines are built once per worker process and reused by every task it runs.

A task reads its range with a confluent-kafka consumer in assign mode (no group,
nothing committed), runs :class:`~bizevents.translators.pipeline.Pipeline` (the live worker's
translation core) with ``replay=True``, and writes the output. It returns only after
every produced record is acknowledged, or every file is complete and renamed into
place; any failure raises, which fails the task (Spark retries it) and so the range.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any, Final

from bizevents.contracts.avro_codegen.native import constructor
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import partition_for, produce
from bizevents.plumbing.process import collected_between_blocks, settle_collector
from bizevents.replay.compaction import KeyIndex, compact_in_memory
from bizevents.replay.diff import ContentSerializer, DiffReport, compare
from bizevents.replay.files import AvroFile, FileRecordEncoder
from bizevents.replay.plan import READER_SETTINGS, Range
from bizevents.replay.spec import Output
from bizevents.translators.pipeline import OutRecord, Pipeline, Result, SourceRecord

#: SourceRecord from all its fields, positionally (the extension's maker where built).
_make_record: Final = constructor(SourceRecord)

#: Seconds a read may see no progress before the range fails.
READ_STALL_S: Final = 60.0
FLUSH_TIMEOUT_S: Final = 120.0


@dataclass(frozen=True)
class TaskConfig:
    """Everything a task needs; built on the driver, shipped with every task."""

    token: str  # one per driver run: keys the per-worker cache
    kafka: dict[str, Any]  # librdkafka settings (may hold credentials; never logged)
    registry: dict[str, Any]
    translator: str
    output: Output | None  # None: a diff dry run
    diff_against: str | None = None
    compact: bool = False
    since_ms: int | None = None
    until_ms: int | None = None
    subject_strategy: str = "topic"
    auto_register: bool = True
    dead_letter_topic: str = "bizevents.dead-letter.replay"
    partitions: dict[str, int] = field(default_factory=dict)  # output topic -> count
    batch_size: int = 5000
    producer: dict[str, Any] = field(default_factory=dict)  # extra producer settings


@dataclass
class TaskReport:
    """What one range did; the driver records it in the run state."""

    range_id: str
    read: int = 0
    kept: int = 0  # after timestamp bounds and compaction
    tombstones: int = 0
    undecodable: int = 0
    unrouted: int = 0
    dropped: int = 0
    dead_letters: int = 0
    events: dict[str, int] = field(default_factory=dict)  # output topic -> count
    seconds: float = 0.0
    diff: DiffReport | None = None

    @property
    def emitted(self) -> int:
        return sum(self.events.values())

    def count(self, result: Result) -> None:
        self.tombstones += result.tombstones
        self.undecodable += result.undecodable
        self.unrouted += result.unrouted
        for counts in result.counts.values():
            self.dropped += counts.dropped


# -- the per-worker runtime ---------------------------------------------------------------


class _Runtime:
    """Clients, decoder, serializer and pipelines of one worker process, for one run."""

    def __init__(self, config: TaskConfig) -> None:
        from bizevents.contracts.serde import BusinessSerializer
        from bizevents.contracts.technical import AutoDecoder
        from bizevents.plumbing.registry import registry_client, schema_lookup
        from bizevents.translators.pipeline import Serializer
        from bizevents.translators.registry import discover

        self.config = config
        registry = discover(names=(config.translator, config.diff_against))
        client = registry_client(config.registry)
        #: ``schema id -> schema text``, cached (the decoder's and Parquet's event reader's)
        self.schema_text = schema_lookup(client)
        self.decoder = AutoDecoder(self.schema_text)
        serializer: Serializer
        if config.output is None:
            serializer = ContentSerializer()
        else:
            serializer = BusinessSerializer(client, config.subject_strategy, config.auto_register)
        self.pipeline = Pipeline(
            [registry.resolve(config.translator)],
            self.decoder,
            serializer,
            replay=True,
            dead_letter_topic=config.dead_letter_topic,
        )
        self.baseline: Pipeline | None = None
        if config.diff_against is not None:
            self.baseline = Pipeline(
                [registry.resolve(config.diff_against)],
                self.decoder,
                serializer,
                replay=True,
                dead_letter_topic=config.dead_letter_topic,
            )
        self._consumer: Any = None
        self._producer: Any = None
        #: per-run helpers of other modules (Parquet's event reader), built once per worker
        self.extras: dict[str, Any] = {}

    def consumer(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(
                {
                    **self.config.kafka,
                    **READER_SETTINGS,
                    "fetch.max.bytes": 16 << 20,
                    "max.partition.fetch.bytes": 8 << 20,
                    "queued.max.messages.kbytes": 65536,
                }
            )
        return self._consumer

    def producer(self) -> Any:
        if self._producer is None:
            from confluent_kafka import Producer

            self._producer = Producer(
                {
                    **self.config.kafka,
                    "enable.idempotence": True,
                    "linger.ms": 20,
                    "batch.num.messages": 10000,
                    "queue.buffering.max.messages": 1_000_000,
                    "queue.buffering.max.kbytes": 1 << 20,
                    "log.connection.close": False,
                    **self.config.producer,
                }
            )
        return self._producer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        if self._producer is not None:
            self._producer.flush(FLUSH_TIMEOUT_S)


_RUNTIMES: dict[str, _Runtime] = {}
_LOCK = threading.Lock()


def runtime(config: TaskConfig) -> _Runtime:
    with _LOCK:
        found = _RUNTIMES.get(config.token)
        if found is None:
            for stale in list(_RUNTIMES):  # a worker serves one run at a time
                _RUNTIMES.pop(stale).close()
            found = _RUNTIMES[config.token] = _Runtime(config)
            settle_collector()  # the run's clients and plugins are built: freeze them
        return found


def release(token: str) -> None:
    """Close the clients this process holds for run ``token`` (for in-process callers;
    a Spark worker keeps them until its next run or its exit)."""
    with _LOCK:
        found = _RUNTIMES.pop(token, None)
    if found is not None:
        found.close()


# -- reading -------------------------------------------------------------------------------


def read_range(
    consumer: Any,
    rng: Range,
    batch_size: int,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> Iterator[tuple[int, list[SourceRecord]]]:
    """``(records read, records within the timestamp bounds)`` per block, in offset order."""
    from confluent_kafka import KafkaError, TopicPartition

    consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
    try:
        position = rng.start
        last_progress = time.monotonic()
        topic, partition, end = rng.topic, rng.partition, rng.end
        while position < end:
            # ask for no more than the range holds: consume() waits for that many
            messages = consumer.consume(min(batch_size, end - position), 0.5)
            block: list[SourceRecord] = []
            read = 0
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise TransientError(f"cannot read {rng.id}: {error}")
                    if message.offset() >= end:
                        position = end  # gaps (compaction, control records) up to the end
                    continue
                offset = message.offset()
                if offset >= end:
                    position = end
                    break
                position = offset + 1
                read += 1
                if since_ms is not None or until_ms is not None:
                    stamp = message.timestamp()[1]
                    if (since_ms is not None and stamp < since_ms) or (
                        until_ms is not None and stamp >= until_ms
                    ):
                        continue
                block.append(
                    _make_record(
                        topic,
                        partition,
                        offset,
                        message.key(),
                        message.value(),
                        message.headers() or [],
                    )
                )
            if read or block:
                last_progress = time.monotonic()
                yield read, block
            elif time.monotonic() - last_progress > READ_STALL_S:
                raise TransientError(
                    f"reading {rng.id} made no progress for {READ_STALL_S:.0f} s at offset "
                    f"{position} (was the topic truncated or the broker restarted?)"
                )
    finally:
        consumer.unassign()


# -- writing -------------------------------------------------------------------------------


class _TopicSink:
    """Produces to Kafka; ``close`` returns once every record is acknowledged."""

    def __init__(self, producer: Any, output: Output, partitions: dict[str, int]) -> None:
        self.producer = producer
        self.output = output
        self.partitions = partitions
        self.errors: list[str] = []
        self._topics: dict[str, str] = {}

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None and len(self.errors) < 10:
            self.errors.append(f"{message.topic()}: {error}")

    def topic(self, record: OutRecord) -> str:
        if record.dead_letter:
            return record.topic
        found = self._topics.get(record.topic)
        if found is None:
            found = self._topics[record.topic] = self.output.topic_for(record.topic)
        return found

    def write(self, records: Sequence[OutRecord], report: TaskReport) -> None:
        for record in records:
            topic = self.topic(record)
            # the live worker's rule, so a correction lands beside the event it supersedes
            produce(
                self.producer,
                topic,
                record.value,
                record.key,
                partition=partition_for(record.key, self.partitions[topic]),
                headers=record.headers,
                on_delivery=self._delivered,
                wait_s=0.05,
            )
            count_event(report, record, topic)
        self.producer.poll(0)

    def close(self, rng: Range) -> None:
        left = self.producer.flush(FLUSH_TIMEOUT_S)
        if left:
            raise TransientError(
                f"{left} records of {rng.id} were not acknowledged within {FLUSH_TIMEOUT_S:.0f} s"
            )
        if self.errors:
            raise TransientError(f"producing {rng.id} failed: {'; '.join(self.errors)}")

    def abort(self) -> None:
        self.producer.purge()
        self.producer.flush(1.0)


class _FileSink:
    """Avro container files, one per output topic and range, renamed into place at the end."""

    def __init__(self, root: Path, output: Output, rng: Range) -> None:
        self.root = root
        self.output = output
        self.rng = rng
        self._files: dict[str, AvroFile] = {}
        #: contract topic -> output topic (asked for every event)
        self._topics: dict[str, str] = {}
        self._encode = FileRecordEncoder()

    def _file(self, topic: str) -> AvroFile:
        found = self._files.get(topic)
        if found is None:
            folder = self.root / topic
            folder.mkdir(parents=True, exist_ok=True)
            final = folder / f"{self.rng.file_stem}.avro"
            partial = folder / f".{self.rng.file_stem}.{os.getpid()}.partial"
            found = self._files[topic] = AvroFile(partial, final)
        return found

    def write(self, records: Sequence[OutRecord], report: TaskReport) -> None:
        # the block's records grouped by output topic, in order, then added per file:
        # per record only the encoding and a list append
        encode, topics = self._encode, self._topics
        by_topic: dict[str, list[bytes]] = {}
        dead: dict[str, int] = {}
        for record in records:
            if record.event_id:
                topic = topics.get(record.topic) or self._topic(record.topic)
            else:  # a dead letter, to its own topic
                topic = record.topic
                dead[topic] = dead.get(topic, 0) + 1
            bodies = by_topic.get(topic)
            if bodies is None:
                bodies = by_topic[topic] = []
            bodies.append(encode(topic, record))
        events = report.events
        for topic, bodies in by_topic.items():
            self._file(topic).extend(bodies)
            emitted = len(bodies) - dead.get(topic, 0)
            if emitted:
                events[topic] = events.get(topic, 0) + emitted
        report.dead_letters += sum(dead.values())

    def _topic(self, contract_topic: str) -> str:
        found = self._topics[contract_topic] = self.output.topic_for(contract_topic)
        return found

    def close(self, rng: Range) -> None:
        for file in self._files.values():
            file.close()

    def abort(self) -> None:
        for file in self._files.values():
            file.handle.close()
            file.partial.unlink(missing_ok=True)


def count_event(report: TaskReport, record: OutRecord, topic: str) -> None:
    if record.dead_letter:
        report.dead_letters += 1
    else:
        report.events[topic] = report.events.get(topic, 0) + 1


# -- the tasks -----------------------------------------------------------------------------


def index_range(config: TaskConfig, rng: Range) -> KeyIndex:
    """Phase one of ``--compact`` for a sliced partition: the slice's latest offset per key."""
    rt = runtime(config)
    index = KeyIndex()
    for _, block in read_range(
        rt.consumer(), rng, config.batch_size, config.since_ms, config.until_ms
    ):
        index.add_all(block)
    return index


def range_blocks(
    rt: _Runtime, rng: Range, survivors: Sequence[int] | None, report: TaskReport
) -> Iterator[list[SourceRecord]]:
    config = rt.config
    blocks = read_range(rt.consumer(), rng, config.batch_size, config.since_ms, config.until_ms)
    if not config.compact:
        for read, block in blocks:
            report.read += read
            report.kept += len(block)
            yield block
        return
    if survivors is None:  # the whole partition is this range: compact it here
        records: list[SourceRecord] = []
        for read, block in blocks:
            report.read += read
            records.extend(block)
        kept = compact_in_memory(records)
        del records
        report.kept += len(kept)
        for at in range(0, len(kept), config.batch_size):
            yield kept[at : at + config.batch_size]
        return
    keep = set(survivors)
    for read, block in blocks:
        report.read += read
        chosen = [record for record in block if record.offset in keep]
        report.kept += len(chosen)
        yield chosen


def selected_offsets(config: TaskConfig, rng: Range, survivors: Sequence[int] | None) -> list[int]:
    """The offsets ``run_range`` would translate (bounds and compaction), nothing written."""
    rt = runtime(config)
    report = TaskReport(rng.id)
    return [record.offset for block in range_blocks(rt, rng, survivors, report) for record in block]


def run_range(config: TaskConfig, rng: Range, survivors: Sequence[int] | None) -> TaskReport:
    """Read, translate and write one range; returns once its output is complete."""
    started = perf_counter()
    rt = runtime(config)
    report = TaskReport(rng.id)
    if rt.baseline is not None:  # --diff: both versions, nothing written
        report.diff = DiffReport()
        for block in range_blocks(rt, rng, survivors, report):
            ours = rt.pipeline.process(block)
            theirs = rt.baseline.process(block)
            report.count(ours)
            compare(theirs.records, ours.records, report.diff)
        report.seconds = perf_counter() - started
        return report
    assert config.output is not None
    if config.output.file_format != "avro":
        raise ValueError(
            f"{config.output.file_format} files are written by bizevents.replay.parquet"
        )
    sink: _TopicSink | _FileSink
    if config.output.kind == "path":
        sink = _FileSink(Path(config.output.target), config.output, rng)
    else:
        sink = _TopicSink(rt.producer(), config.output, config.partitions)
    try:
        with collected_between_blocks() as collect:
            for block in range_blocks(rt, rng, survivors, report):
                result = rt.pipeline.process(block)
                report.count(result)
                sink.write(result.records, report)
                del result
                collect()
        sink.close(rng)
    except BaseException:
        sink.abort()
        raise
    report.seconds = perf_counter() - started
    return report
