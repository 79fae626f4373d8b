"""Replay through a transaction translator: whole transactions assembled in Spark.

``bizevents replay --translator orders@3 --topics 'shop.store.*' --to ...`` with a
transaction translator runs here instead of :mod:`bizevents.replay.job`:

1. Plan (driver): the transaction topic's watermarks are read first (its Fetch high
   watermark), then every technical partition's, so the technical ranges end *after*
   the last END read: a transaction whose END is in range has its changes in range
   (they are written before its END). ``--from``/``--until`` bound every partition, the
   transaction topic's too (offsets, or record timestamps).
2. Selection and widening (only with ``--from``/``--until``): a transaction is
   *selected* when any of its records (a change, its BEGIN or its END) lies within the
   bounds. A Spark job scans the bounded ranges for the selected transactions' commit
   positions (a PostgreSQL id ``<xid>:<lsn>`` carries its commit LSN); then each range
   is widened on the driver, back until a record of a transaction committed before the
   oldest selected one, forward until one committed after the newest: capture writes
   every partition in commit order (the assembler relies on it live too), so every
   record of a selected transaction lies within. A selected id without a commit
   position (MySQL/MariaDB GTIDs) widens every range to its whole partition.
   The plan (the widened ranges and the bounds) is the run state, so a rerun with the
   same run id reads the same records.
3. Spark reads each widened range in a task and keys every record by its transaction
   id (the envelope's ``transaction.id``, the END's ``id``; a change without one is its
   own group), then groups by that key (a shuffle): each transaction's parts meet in one
   task, which keeps the selected ones, assembles them (:mod:`bizevents.translators.
   assembly`) and translates them with the live worker's core (:mod:`bizevents.
   translators.txcore`): same ids, ``replay`` set in the lineage.
4. The events are grouped by their output partition (files: a bucket of the key) and
   written in commit order (the END's offset in the transaction topic), so per key the
   order is the live path's. An output partition is the unit of resume: a task reports
   the ones it wrote once Kafka acknowledged them (or the file is renamed into place),
   the driver records them in the run state, and a rerun with the same run id writes
   only the others (it reads and assembles everything again; the ids are the same).
   Parquet (``--format parquet``): the rows of :mod:`bizevents.replay.parquet`, one
   dataset for the run written by Spark's JVM in one job,
   ``DIR/range=transactions-<run id>/``, renamed into place; it is the run's one unit
   of resume.

``--diff name@A`` runs both versions on each assembled transaction, publishing
nothing: A may be a row translator (it reads the transaction's changes one by one, as
the row path would) or a transaction translator; events pair up by event id.

Outcomes: a transaction complete in the ranges is translated; one whose END lies beyond
the snapshot (it committed after the plan) is left out and counted; one whose END is in
range but lacks changes, or a change with no transaction block, is dead-lettered with
the reason, as live.

Refused with a sentence: ``--compact`` (it keeps one change per key, so it would remove
parts of transactions).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from time import monotonic, perf_counter
from typing import Any, Final

import structlog

from bizevents.replay.diff import DiffReport
from bizevents.replay.exceptions import RangeFailedError, ReplayConfigError, TopicNotFoundError
from bizevents.replay.plan import READER_SETTINGS, Planner, Range, bounded
from bizevents.replay.spec import ReplaySpec
from bizevents.replay.state import RunState
from bizevents.replay.task import TaskReport
from bizevents.translators.settings import RuntimeSettings

__all__ = ["TransactionReplay", "TxReplayConfig", "TxReplaySummary", "widen"]

log = structlog.get_logger("replay")

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


@dataclass
class TxReplaySummary:
    run_id: str
    state_path: Path | None = None
    read: int = 0
    transactions: int = 0
    emitted: int = 0
    dead_lettered: int = 0
    left_out: int = 0
    seconds: float = 0.0
    ranges: list[tuple[str, int, int, int]] = field(default_factory=list)
    units: int = 0  # output partitions written by this attempt
    skipped: int = 0  # written by an earlier attempt of the run id
    events: dict[str, int] = field(default_factory=dict)
    diff: DiffReport | None = None


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


class TransactionReplay:
    """One replay run through a transaction translator."""

    def __init__(
        self,
        spec: ReplaySpec,
        settings: RuntimeSettings,
        *,
        spark: Any = None,
        master: str | None = None,
        listener: Any = None,
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.spark = spark
        self.master = master
        self.listener = listener

    def _refuse(self) -> None:
        spec = self.spec
        if spec.compact:
            raise ReplayConfigError(
                f"--compact is refused with a transaction translator ({spec.translator}): "
                "compaction keeps one change per key, so it would remove parts of "
                "transactions and leave them incomplete"
            )

    def _session(self) -> Any:
        from bizevents.replay.job import spark_session

        if self.spark is None:
            self.spark = spark_session(self.master, jvm_writes=self.spec.jvm_writes)
        return self.spark

    def _fingerprint(self) -> dict[str, Any]:
        return {**self.spec.fingerprint(), "kind": "transactions"}

    def _plan(
        self, config: TxReplayConfig, marks: Mapping[tuple[str, int], tuple[int, int]]
    ) -> RunState:
        """A new run's state: the bounded ranges, widened, saved before anything runs."""
        spec = self.spec
        spans = {
            (t, p): bounded(low, high, spec.start, spec.until)
            for (t, p), (low, high) in marks.items()
        }
        if spec.start is None and spec.until is None:
            widened = dict(spans)
        else:
            scans = self._scan(_with_bounds(config, _bounds(spans)), spans)
            widened = widen(marks, spans, scans, _Prober(config))
        ranges = [Range(t, p, s, e) for (t, p), (s, e) in sorted(widened.items()) if e > s]
        return RunState.create(
            self.settings.state_dir,
            spec.run_id,
            self._fingerprint(),
            ranges,
            extra={"bounds": {k: list(v) for k, v in _bounds(spans).items()}},
        )

    def _scan(
        self, config: TxReplayConfig, spans: Mapping[tuple[str, int], tuple[int, int]]
    ) -> list[Scan]:
        """The selecting records of every bounded range: one Spark job, a task a range."""
        work = [(t, p, s, e) for (t, p), (s, e) in sorted(spans.items()) if e > s]
        if not work:
            return []
        sc = self._session().sparkContext
        rdd = sc.parallelize(work, len(work)).mapPartitions(functools.partial(_scan, config))
        return list(self._collect(rdd))

    def _collect(self, rdd: Any) -> list[Any]:
        from bizevents.replay.job import task_error

        try:
            return list(rdd.collect())
        except Exception as exc:
            raise RangeFailedError(
                f"a task failed: {task_error(exc)}; rerun with --run-id {self.spec.run_id} "
                "to continue"
            ) from exc

    def prepare(self) -> tuple[TxReplayConfig, RunState]:
        from bizevents.contracts.technical.transaction import transaction_topic
        from bizevents.plumbing.kafka import ensure_topics
        from bizevents.replay.job import _check_contracts, _check_registry
        from bizevents.translators.registry import discover

        self._refuse()
        spec, settings = self.spec, self.settings
        registry = discover(names=(spec.translator, spec.diff_against))
        translator = registry.resolve(spec.translator)
        if spec.diff_against is not None:
            registry.resolve(spec.diff_against)
        planner = Planner(settings.kafka.librdkafka())
        counts = planner.topics(spec.topics)
        prefixes = {t.rsplit(".", 2)[0] for t in counts}
        if len(prefixes) != 1:
            raise ReplayConfigError(
                f"--topics {spec.topics!r} spans several capture prefixes "
                f"({', '.join(sorted(prefixes))}); a transaction replay reads one"
            )
        tx_topic = transaction_topic(prefixes.pop())
        try:
            planner.topics(tx_topic)
        except TopicNotFoundError:
            raise ReplayConfigError(
                f"{tx_topic} does not exist: a transaction translator needs the capture's "
                "transaction metadata"
            ) from None
        client = _check_registry(settings.registry.client_config(), settings.registry.url)
        t = settings.translate
        output = spec.output
        dead_letters = t.dead_letter_topic + ".replay"
        partitions: dict[str, int] = {}
        if output is not None:
            _check_contracts(client, [translator], t.subject_strategy, t.auto_register)
            dead_letters = output.dead_letter_topic(t.dead_letter_topic)
            topics = sorted({output.topic_for(c.contract_topic()) for c in translator.emits})
            if output.kind == "path":
                if output.file_format == "avro":
                    Path(output.target).mkdir(parents=True, exist_ok=True)
                else:  # Spark writes it: any Hadoop file system
                    from bizevents.replay.job import _check_parquet

                    _check_parquet()
                partitions = dict.fromkeys([*topics, dead_letters], t.output_partitions)
            else:
                partitions = ensure_topics(
                    _admin(settings.kafka.librdkafka()),
                    [*topics, dead_letters],
                    t.output_partitions,
                )
        config = TxReplayConfig(
            kafka=settings.kafka.librdkafka(),
            registry=settings.registry.client_config(),
            translator=spec.translator,
            transaction_topic=tx_topic,
            dead_letter_topic=dead_letters,
            subject_strategy=t.subject_strategy,
            auto_register=t.auto_register,
            partitions=partitions,
            output_kind="diff" if output is None else output.kind,
            output_target="" if output is None else output.target,
            baseline=spec.diff_against,
            since_ms=None if spec.start is None else spec.start.timestamp_ms,
            until_ms=None if spec.until is None else spec.until.timestamp_ms,
        )
        state = RunState.load(settings.state_dir, spec.run_id)
        if state is not None:  # a rerun: the plan of the first attempt
            state.check(self._fingerprint())
            log.info("resuming", run_id=spec.run_id, done=len(state.done))
        else:
            # the transaction topic's end first: every change of a transaction ended by
            # then is in the technical ranges planned after it
            tx_marks = planner.watermarks([(tx_topic, 0)])
            marks = planner.watermarks(
                [(t, p) for t, n in sorted(counts.items()) for p in range(n)]
            )
            state = self._plan(config, {**tx_marks, **marks})
        bounds = {k: (int(v[0]), int(v[1])) for k, v in state.extra.get("bounds", {}).items()}
        return replace(config, bounds=bounds, done=frozenset(state.done)), state

    def run(self) -> TxReplaySummary:
        started = perf_counter()
        config, state = self.prepare()
        ranges = [(r.topic, r.partition, r.start, r.end) for r in state.ranges]
        summary = TxReplaySummary(
            self.spec.run_id, state.path, ranges=ranges, skipped=len(config.done)
        )
        summary.read = sum(high - low for _, _, low, high in ranges)
        units = _units(config)
        parquet = self.spec.jvm_writes
        names = [PARQUET_UNIT] if parquet else [f"{t}/{p}" for t, p in units]
        if self.listener is not None:
            done = sum(1 for name in names if name in config.done)
            self.listener.planned(len(names), done, summary.read)
        if config.baseline is None and all(name in config.done for name in names):
            state.finish()  # an earlier attempt wrote everything
            summary.seconds = perf_counter() - started
            return summary
        sc = self._session().sparkContext
        width = max(1, int(sc.defaultParallelism))
        assembled = (
            sc.parallelize(ranges, max(1, len(ranges)))
            .flatMap(functools.partial(_read_range, config))
            .groupByKey(width)
            .mapPartitions(functools.partial(_assemble, config))
        )
        if config.baseline is not None:
            summary.diff = DiffReport()
            for _, (_order, _key, _seq, stats) in self._collect(
                assembled.filter(lambda item: item[0][0] == "__stats__")
            ):
                _add_stats(summary, stats)
                summary.diff.merge(DiffReport.from_dict(stats["diff"]))
            summary.seconds = perf_counter() - started
            return summary
        # each output partition to a chosen task, so a task knows the ones it writes
        # (and reports the empty ones too)
        place = functools.partial(_place, {u: i for i, u in enumerate(units)})
        grouped = assembled.groupByKey(width, place)
        if parquet:
            self._write_parquet(config, state, grouped, summary)
        else:
            self._write(config, state, grouped, width, summary)
        state.finish()
        summary.seconds = perf_counter() - started
        return summary

    def _write(
        self,
        config: TxReplayConfig,
        state: RunState,
        grouped: Any,
        width: int,
        summary: TxReplaySummary,
    ) -> None:
        """The write stage as one job; each task's output partitions recorded in the run
        state as the driver learns of them (the accumulator grows as tasks succeed)."""
        from bizevents.replay.job import _Reports

        sc = self._session().sparkContext
        finished = sc.accumulator([], _Reports())
        rdd = grouped.mapPartitionsWithIndex(functools.partial(_write, config, finished, width))
        outcome: list[BaseException] = []
        totals: list[dict[str, int]] = []

        def run() -> None:
            try:
                totals.extend(rdd.collect())
            except BaseException as exc:  # handed to the driver's thread, raised there
                outcome.append(exc)

        thread = threading.Thread(target=run, name="replay-tx-job", daemon=True)
        thread.start()
        seen: set[str] = set()

        def record() -> None:
            for report in list(finished.value):
                if report.range_id in seen:
                    continue  # a retried or speculated task's second report
                seen.add(report.range_id)
                state.mark_done(report.range_id, {"events": report.events})
                summary.units += 1
                for topic, n in report.events.items():
                    summary.events[topic] = summary.events.get(topic, 0) + n
                if self.listener is not None:
                    self.listener.finished(report)

        while thread.is_alive():
            thread.join(0.2)
            record()
        record()
        if outcome:
            from bizevents.replay.job import task_error

            raise RangeFailedError(
                f"a task failed: {task_error(outcome[0])}; rerun with --run-id "
                f"{self.spec.run_id} to continue"
            ) from outcome[0]
        for item in totals:
            _add_stats(summary, item)

    def _write_parquet(
        self,
        config: TxReplayConfig,
        state: RunState,
        grouped: Any,
        summary: TxReplaySummary,
    ) -> None:
        """One Parquet dataset for the run, written by Spark's JVM in one job (the rows
        of each output partition in commit order), then renamed into place: the run's
        one unit of resume."""
        from bizevents.replay.job import _Reports, task_error
        from bizevents.replay.parquet import ARROW_SETTING, RANGE_COLUMN, _rename, spark_schema

        spark = self._session()
        spark.conf.set(ARROW_SETTING, "false")  # rows travel pickled; nothing needs pyarrow
        found = spark.sparkContext.accumulator([], _Reports())
        rows = grouped.mapPartitions(functools.partial(_rows, config, found))
        root = config.output_target.rstrip("/")
        folder = f"{RANGE_COLUMN}=transactions-{self.spec.run_id}"
        try:
            frame = spark.createDataFrame(rows, spark_schema(), verifySchema=False)
            frame.write.mode("overwrite").parquet(f"{root}/.{folder}.partial")
            _rename(spark, f"{root}/.{folder}.partial", f"{root}/{folder}")
        except Exception as exc:
            raise RangeFailedError(
                f"the Parquet write failed: {task_error(exc)}; rerun with --run-id "
                f"{self.spec.run_id} to write it again"
            ) from exc
        seen: set[str] = set()
        for kind, item in found.value:
            if kind == "totals":
                _add_stats(summary, item)
            elif item.range_id not in seen:  # a retried task's second report
                seen.add(item.range_id)
                for topic, n in item.events.items():
                    summary.events[topic] = summary.events.get(topic, 0) + n
        summary.units = 1
        state.mark_done(PARQUET_UNIT, {"events": summary.events, "folder": folder})
        if self.listener is not None:
            self.listener.finished(TaskReport(PARQUET_UNIT, events=summary.events))


#: The unit of resume of a Parquet output: the run's whole dataset.
PARQUET_UNIT: Final = "parquet"


def _units(config: TxReplayConfig) -> list[tuple[str, int]]:
    """Every output partition, in a fixed order."""
    return [(t, p) for t, n in sorted(config.partitions.items()) for p in range(n)]


def _place(index: Mapping[Any, int], key: Any) -> int:
    """The write task of an output partition (the stats go to the first)."""
    return index.get(key, 0)


def _add_stats(summary: TxReplaySummary, stats: Mapping[str, Any]) -> None:
    summary.transactions += int(stats.get("transactions", 0))
    summary.emitted += int(stats.get("emitted", 0))
    summary.dead_lettered += int(stats.get("dead_lettered", 0))
    summary.left_out += int(stats.get("left_out", 0))


def _admin(kafka: dict[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({**kafka, "log.connection.close": False})


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


class _Prober:
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
            messages = consumer.consume(1000, 1.0)
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


def _scan(config: TxReplayConfig, work: Iterable[tuple[str, int, int, int]]) -> Iterator[Scan]:
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


def _with_bounds(config: TxReplayConfig, bounds: dict[str, tuple[int, int]]) -> TxReplayConfig:
    return replace(config, bounds=bounds)


def _bounds(spans: Mapping[tuple[str, int], tuple[int, int]]) -> dict[str, tuple[int, int]]:
    return {f"{t}/{p}": span for (t, p), span in sorted(spans.items())}


def _read_range(
    config: TxReplayConfig, rng: tuple[str, int, int, int]
) -> Iterator[tuple[str, Raw]]:
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


def _assemble(
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


def _write(
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
    mine = _units(config)[task::width]
    try:
        for (topic, partition), items in outputs:
            if topic == "__stats__":
                for item in items:
                    for k, v in item[3].items():
                        totals[k] += v
                continue
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


def _rows(
    config: TxReplayConfig, found: Any, outputs: Iterable[tuple[Any, Iterable[Any]]]
) -> Iterator[tuple[Any, ...]]:
    """Parquet rows (bizevents.replay.parquet's), each output partition's in commit order;
    the counts reported to ``found`` once the task's rows are all taken."""
    from bizevents.replay.parquet import EventReader, _row

    reader = EventReader(_lookup(config)[1])
    totals = {"emitted": 0, "dead_lettered": 0, "transactions": 0, "left_out": 0}
    reports: list[Any] = []
    for (topic, partition), items in outputs:
        if topic == "__stats__":
            for item in items:
                for k, v in item[3].items():
                    totals[k] += v
            continue
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
        from bizevents.replay.task import AvroFile, FileRecordEncoder

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
