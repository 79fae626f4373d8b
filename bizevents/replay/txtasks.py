"""The transaction replay's work in Spark's executors: read a range, key records by
transaction, assemble and translate a transaction, write an output partition (Kafka or a
file); and the driver's prober, which reads through the same readers."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from time import monotonic
from typing import Any

from bizevents.replay.diff import DiffReport
from bizevents.replay.plan import READER_SETTINGS
from bizevents.replay.task import TaskReport
from bizevents.replay.txwiden import Scan, TxReplayConfig

__all__ = [
    "Prober",
    "assemble",
    "bounds_of",
    "output_units",
    "parquet_rows",
    "read_range",
    "scan_range",
    "with_bounds",
    "write_units",
]


class Prober:
    """:func:`widen`'s reads, on the driver."""

    def __init__(self, config: TxReplayConfig) -> None:
        self.config = config
        self._readers: Any = None

    def __call__(
        self, topic: str, partition: int, start: int, end: int
    ) -> list[tuple[int, int | None]]:
        from bizevents.translators.assembly import commit_position

        if self._readers is None:
            self._readers = _Readers(self.config)
        out: list[tuple[int, int | None]] = []
        for m in _messages(self.config, topic, partition, start, end):
            tx = self._readers.tx_id(topic, partition, m)
            out.append((int(m.offset() or 0), None if tx is None else commit_position(tx)))
        return out


# -- in the executors -----------------------------------------------------------------------

#: topic, partition, offset, key, value, headers, selects (within the asked bounds)
Raw = tuple[str, int, int, Any, Any, list[tuple[str, Any]], bool]


class _Readers:
    """The decoders of one task: the transaction id of a technical or transaction record."""

    def __init__(self, config: TxReplayConfig) -> None:
        from bizevents.contracts.technical import AutoDecoder
        from bizevents.contracts.technical.transaction import TransactionDecoder

        self.config = config
        self.client, self.lookup = _lookup(config)
        self.decoder = AutoDecoder(self.lookup)
        self.tx_decoder = TransactionDecoder(self.lookup)

    def tx_id(self, topic: str, partition: int, m: Any) -> str | None:
        """The record's transaction id; None for none or for bytes that do not decode
        (the assembling task dead-letters those with the reason)."""
        from bizevents.contracts.envelope import ChangeEvent
        from bizevents.contracts.exceptions import Coordinates, DecodeError

        value = m.value()
        if value is None:
            return None
        where = Coordinates(topic, partition, int(m.offset() or 0))
        try:
            if topic == self.config.transaction_topic:
                return str(self.tx_decoder.decode(value, where).id)
            decoded = self.decoder.decode(m.key(), value, where)
        except DecodeError:
            return None
        tx = decoded.transaction if isinstance(decoded, ChangeEvent) else None
        return None if tx is None else str(tx.id)


def _lookup(config: TxReplayConfig) -> Any:
    from bizevents.plumbing.registry import registry_client, schema_lookup

    client = registry_client(config.registry)
    return client, schema_lookup(client)


def _messages(
    config: TxReplayConfig, topic: str, partition: int, low: int, high: int
) -> Iterator[Any]:
    """The records of ``[low, high)`` of one partition, in offset order; fewer when the
    partition ends first. Raises TransientError when the partition stops answering."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from bizevents.plumbing.errors import TransientError
    from bizevents.replay.task import READ_STALL_S

    if high <= low:
        return
    # Kafka answers a fetch past the end with OFFSET_OUT_OF_RANGE: "error" hands that
    # answer over (a reset to "earliest" read the partition from its start instead)
    consumer = Consumer({**config.kafka, **READER_SETTINGS, "auto.offset.reset": "error"})
    where = TopicPartition(topic, partition)
    try:
        consumer.assign([TopicPartition(topic, partition, low)])
        position, last_progress = low, monotonic()
        while True:
            # ask for no more than the range holds: consume() waits for that many
            messages = consumer.consume(min(1000, high - position), 1.0)
            for m in messages:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    if err.code() == KafkaError._AUTO_OFFSET_RESET:
                        _, end = consumer.get_watermark_offsets(where, timeout=10)
                        if 0 <= end <= position:
                            return  # past the end: nothing to read
                    raise TransientError(f"cannot read {topic}[{partition}]: {err}")
                offset = int(m.offset() or 0)
                if offset >= high:
                    return
                yield m
                position = offset + 1
                if position >= high:
                    return
            if messages:
                last_progress = monotonic()
                continue
            # A Fetch past the end answers nothing, and no end-of-partition event follows
            _, end = consumer.get_watermark_offsets(where, cached=True)
            if 0 <= end <= position:
                return
            if monotonic() - last_progress > READ_STALL_S:
                raise TransientError(
                    f"reading {topic}[{partition}] made no progress for {READ_STALL_S:.0f} s "
                    f"at offset {position} (was the topic truncated or the broker restarted?)"
                )
    finally:
        consumer.close()


def _selects(config: TxReplayConfig, topic: str, partition: int, m: Any) -> bool:
    """Whether a record lies within the asked bounds (offsets, then timestamps)."""
    first, last = config.bounds.get(f"{topic}/{partition}", (0, -1))
    offset = int(m.offset() or 0)
    if not first <= offset < last:
        return False
    if config.since_ms is None and config.until_ms is None:
        return True
    stamp = m.timestamp()[1]
    return not (
        (config.since_ms is not None and stamp < config.since_ms)
        or (config.until_ms is not None and stamp >= config.until_ms)
    )


def scan_range(config: TxReplayConfig, work: Iterable[tuple[str, int, int, int]]) -> Iterator[Scan]:
    """A task of the selection scan: one bounded range's selecting records."""
    from bizevents.translators.assembly import commit_position

    readers = _Readers(config)
    for topic, partition, low, high in work:
        first = last = oldest = newest = None
        unpositioned = False
        for m in _messages(config, topic, partition, low, high):
            if not _selects(config, topic, partition, m):
                continue
            offset = int(m.offset() or 0)
            first = offset if first is None else first
            last = offset + 1
            tx = readers.tx_id(topic, partition, m)
            if tx is None:
                continue
            position = commit_position(tx)
            if position is None:
                unpositioned = True
                continue
            oldest = position if oldest is None else min(oldest, position)
            newest = position if newest is None else max(newest, position)
        yield Scan(topic, partition, first, last, oldest, newest, unpositioned)


def with_bounds(config: TxReplayConfig, bounds: dict[str, tuple[int, int]]) -> TxReplayConfig:
    return replace(config, bounds=bounds)


def bounds_of(spans: Mapping[tuple[str, int], tuple[int, int]]) -> dict[str, tuple[int, int]]:
    return {f"{t}/{p}": span for (t, p), span in sorted(spans.items())}


def read_range(config: TxReplayConfig, rng: tuple[str, int, int, int]) -> Iterator[tuple[str, Raw]]:
    """The records of one range, keyed by their transaction id."""
    topic, partition, low, high = rng
    readers = _Readers(config)
    for m in _messages(config, topic, partition, low, high):
        value = m.value()
        if value is None and topic != config.transaction_topic:
            continue  # a tombstone
        offset = int(m.offset() or 0)
        found = m.headers()
        headers = list(found.items()) if isinstance(found, dict) else list(found or [])
        raw: Raw = (
            topic,
            partition,
            offset,
            m.key(),
            value,
            headers,
            _selects(config, topic, partition, m),
        )
        tx = readers.tx_id(topic, partition, m)
        # a record without a transaction is alone, unless a transaction claims it
        yield (f"raw:{topic}:{partition}:{offset}" if tx is None else "tx:" + tx), raw


class _Translate:
    """The cores of one assembling task: ours, and --diff's baseline."""

    def __init__(self, config: TxReplayConfig) -> None:
        from bizevents.contracts.serde import BusinessSerializer
        from bizevents.replay.diff import ContentSerializer
        from bizevents.translators.pipeline import Pipeline, Serializer
        from bizevents.translators.registry import discover
        from bizevents.translators.transaction_api import TransactionTranslator
        from bizevents.translators.txcore import TransactionCore

        self.readers = _Readers(config)
        self.transactions = 0  # of the last group assembled
        registry = discover(names=(config.translator, config.baseline))
        translator = registry.resolve(config.translator)
        assert isinstance(translator, TransactionTranslator)
        serializer: Serializer
        if config.baseline is None:
            serializer = BusinessSerializer(
                self.readers.client, config.subject_strategy, config.auto_register
            )
        else:
            serializer = ContentSerializer()
        self.core = TransactionCore(
            [translator], serializer, replay=True, dead_letter_topic=config.dead_letter_topic
        )
        self.base_core: TransactionCore | None = None
        self.base_rows: Pipeline | None = None
        if config.baseline is not None:
            base = registry.resolve(config.baseline)
            if isinstance(base, TransactionTranslator):
                self.base_core = TransactionCore(
                    [base], serializer, replay=True, dead_letter_topic=config.dead_letter_topic
                )
            else:
                self.base_rows = Pipeline(
                    [base],
                    self.readers.decoder,
                    serializer,
                    replay=True,
                    dead_letter_topic=config.dead_letter_topic,
                )

    def assembled(self, core: Any, raws: Sequence[Raw]) -> tuple[list[Any], int]:
        """One group's records through ``core``: its output records and how many
        transactions were left out (their END lies beyond the ranges)."""
        from bizevents.contracts.envelope import ChangeEvent, Tombstone
        from bizevents.contracts.exceptions import Coordinates, DecodeError
        from bizevents.translators.assembly import Assembler, Part
        from bizevents.translators.pipeline import OutRecord, SourceRecord

        config = self.readers.config
        assembler = Assembler(core.reads)
        outcomes: list[Any] = []
        bad: list[OutRecord] = []
        for n, (topic, partition, offset, k, v, h, _selected) in enumerate(raws):
            origin = SourceRecord(topic, partition, offset, k, v, h)
            where = Coordinates(topic, partition, offset)
            try:
                if topic == config.transaction_topic:
                    part = Part(n, origin, record=self.readers.tx_decoder.decode(v, where))
                else:
                    decoded = self.readers.decoder.decode(k, v, where, h)
                    if isinstance(decoded, Tombstone):
                        continue
                    assert isinstance(decoded, ChangeEvent)
                    part = Part(n, origin, change=decoded)
            except DecodeError as exc:
                bad += core.dead_letters([Part(n, origin)], "decode", exc.reason, exc, "")
                continue
            outcomes += assembler.feed(part)
        finished, left_out = assembler.finish()
        outcomes += finished
        self.transactions = sum(1 for o in outcomes if o.tx_id is not None)
        return [*core.process(outcomes).records, *bad], left_out

    def baseline(self, raws: Sequence[Raw]) -> list[Any]:
        """--diff's version A on the same group: a transaction core, or the row path."""
        from bizevents.translators.pipeline import SourceRecord

        if self.base_core is not None:
            return self.assembled(self.base_core, raws)[0]
        assert self.base_rows is not None
        changes = [
            SourceRecord(t, p, o, k, v, h)
            for t, p, o, k, v, h, _ in raws
            if t != self.readers.config.transaction_topic
        ]
        return list(self.base_rows.process(changes).records)


def assemble(
    config: TxReplayConfig, groups: Iterable[tuple[str, Iterable[Raw]]]
) -> Iterator[tuple[Any, Any]]:
    """Each selected transaction's parts assembled and translated; events keyed by output
    partition and ordered by commit (the END's offset in the transaction topic)."""
    from bizevents.plumbing.kafka import partition_for
    from bizevents.replay.diff import compare

    work = _Translate(config)
    stats: dict[str, Any] = {"transactions": 0, "left_out": 0}
    diff = DiffReport() if config.baseline is not None else None
    for key, group in groups:
        raws = sorted(group, key=_raw_order)
        if not any(r[6] for r in raws):
            continue  # no record of it within the bounds: not selected
        records, left_out = work.assembled(work.core, raws)
        stats["left_out"] += left_out
        stats["transactions"] += work.transactions
        if diff is not None:
            compare(work.baseline(raws), records, diff)
            continue
        ends = [r[2] for r in raws if r[0] == config.transaction_topic]
        order = max(ends) if ends else -1
        for seq, out in enumerate(records):
            target = _output_topic(config, out)
            count = config.partitions.get(target, 1)
            yield (
                (target, partition_for(out.key, count)),
                (order, key, seq, out),
            )
    if diff is not None:
        stats["diff"] = diff.as_dict()
    yield ("__stats__", 0), (0, "", 0, stats)


def _output_topic(config: TxReplayConfig, out: Any) -> str:
    if out.dead_letter:
        return str(out.topic)
    if config.output_kind == "topic":
        return config.output_target
    if config.output_kind == "replay":
        from bizevents.replay.spec import REPLAY_SUFFIX

        return f"{out.topic}{REPLAY_SUFFIX}"
    return str(out.topic)


def _raw_order(raw: Raw) -> tuple[str, int, int]:
    return (raw[0], raw[1], raw[2])


def write_units(
    config: TxReplayConfig,
    finished: Any,
    width: int,
    task: int,
    outputs: Iterable[tuple[Any, Iterable[Any]]],
) -> Iterator[dict[str, int]]:
    """Each output partition's events in commit order, produced and acknowledged (or
    written to its file); the task's output partitions reported to ``finished`` at the
    end, the empty ones too."""
    totals = {"emitted": 0, "dead_lettered": 0, "transactions": 0, "left_out": 0}
    sink = _FileSink(config) if config.output_kind == "path" else _TopicSink(config)
    reports: list[TaskReport] = []
    mine = output_units(config)[task::width]
    try:
        for topic, partition, items in _partitions(outputs, totals):
            unit = f"{topic}/{partition}"
            if unit in config.done:
                continue  # written by an earlier attempt of the run
            report = TaskReport(unit)
            ordered = sorted(items, key=lambda i: i[:3])
            records = [i[3] for i in ordered]
            sink.write(topic, partition, records)
            for out in records:
                if out.dead_letter:
                    report.dead_letters += 1
                    totals["dead_lettered"] += 1
                else:
                    report.events[topic] = report.events.get(topic, 0) + 1
                    totals["emitted"] += 1
            reports.append(report)
        sink.close()
        written = {r.range_id for r in reports}
        for topic, partition in mine:
            unit = f"{topic}/{partition}"
            if unit not in written and unit not in config.done:
                reports.append(TaskReport(unit))
    except BaseException:
        sink.abort()
        raise
    finished.add(reports)
    yield totals


def _partitions(
    outputs: Iterable[tuple[Any, Iterable[Any]]], totals: dict[str, int]
) -> Iterator[tuple[str, int, Iterable[Any]]]:
    """Each output partition's items; the assembling tasks' counts (the ``__stats__``
    group) added to ``totals`` on the way."""
    for (topic, partition), items in outputs:
        if topic == "__stats__":
            for item in items:
                for k, v in item[3].items():
                    totals[k] += v
            continue
        yield topic, partition, items


def parquet_rows(
    config: TxReplayConfig, found: Any, outputs: Iterable[tuple[Any, Iterable[Any]]]
) -> Iterator[tuple[Any, ...]]:
    """Parquet rows (bizevents.replay.parquet's), each output partition's in commit order;
    the counts reported to ``found`` once the task's rows are all taken."""
    from bizevents.replay.parquet import EventReader, _row

    reader = EventReader(_lookup(config)[1])
    totals = {"emitted": 0, "dead_lettered": 0, "transactions": 0, "left_out": 0}
    reports: list[Any] = []
    for topic, partition, items in _partitions(outputs, totals):
        report = TaskReport(f"{topic}/{partition}")
        for item in sorted(items, key=lambda i: i[:3]):
            out = item[3]
            yield _row(out, topic, reader)
            if out.dead_letter:
                totals["dead_lettered"] += 1
            else:
                report.events[topic] = report.events.get(topic, 0) + 1
                totals["emitted"] += 1
        reports.append(("unit", report))
    found.add([("totals", totals), *reports])


class _TopicSink:
    def __init__(self, config: TxReplayConfig) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({**config.kafka, "enable.idempotence": True, "linger.ms": 20})
        self.failures: list[str] = []

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None and len(self.failures) < 10:
            self.failures.append(str(err))

    def write(self, topic: str, partition: int, records: Sequence[Any]) -> None:
        from bizevents.plumbing.kafka import produce

        for out in records:
            produce(
                self.producer,
                topic,
                out.value,
                out.key,
                partition=partition,
                headers=out.headers,
                on_delivery=self._delivered,
                wait_s=0.05,
            )
        self.producer.poll(0)

    def close(self) -> None:
        remaining = self.producer.flush(120)
        if self.failures or remaining:
            raise RuntimeError(
                f"Kafka did not take every event: {self.failures[:3] or remaining} left"
            )

    def abort(self) -> None:
        self.producer.purge()
        self.producer.flush(1.0)


class _FileSink:
    """Avro container files of the row path's record schema, one per output topic and
    partition (a bucket of the key): ``DIR/<topic>/part-<partition>.avro``."""

    def __init__(self, config: TxReplayConfig) -> None:
        from bizevents.replay.files import AvroFile, FileRecordEncoder

        self.root = Path(config.output_target)
        self.files: list[Any] = []
        self.encode = FileRecordEncoder()
        self.opener = AvroFile

    def write(self, topic: str, partition: int, records: Sequence[Any]) -> None:
        folder = self.root / topic
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"part-{partition:05d}"
        file = self.opener(folder / f".{stem}.{os.getpid()}.partial", folder / f"{stem}.avro")
        self.files.append(file)
        for out in records:
            file.add(self.encode(topic, out))

    def close(self) -> None:
        for file in self.files:
            file.close()  # renamed into place: a rerun replaces it whole

    def abort(self) -> None:
        for file in self.files:
            file.handle.close()
            file.partial.unlink(missing_ok=True)


def output_units(config: TxReplayConfig) -> list[tuple[str, int]]:
    """Every output partition, in a fixed order."""
    return [(t, p) for t, n in sorted(config.partitions.items()) for p in range(n)]
