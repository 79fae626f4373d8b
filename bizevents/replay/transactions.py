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
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from time import perf_counter
from typing import Any, Final

import structlog

from bizevents.replay.diff import DiffReport
from bizevents.replay.exceptions import RangeFailedError, ReplayConfigError, TopicNotFoundError
from bizevents.replay.plan import Planner, Range, bounded
from bizevents.replay.run import ReplayRun
from bizevents.replay.state import RunState
from bizevents.replay.task import TaskReport
from bizevents.replay.txtasks import (
    Prober,
    assemble,
    bounds_of,
    output_units,
    parquet_rows,
    read_range,
    scan_range,
    with_bounds,
    write_units,
)
from bizevents.replay.txwiden import Scan, TxReplayConfig, widen

__all__ = ["TransactionReplay", "TxReplaySummary"]

log = structlog.get_logger("replay")


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


class TransactionReplay(ReplayRun):
    """One replay run through a transaction translator."""

    def _refuse(self) -> None:
        spec = self.spec
        if spec.compact:
            raise ReplayConfigError(
                f"--compact is refused with a transaction translator ({spec.translator}): "
                "compaction keeps one change per key, so it would remove parts of "
                "transactions and leave them incomplete"
            )

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
            scans = self._scan(with_bounds(config, bounds_of(spans)), spans)
            widened = widen(marks, spans, scans, Prober(config))
        ranges = [Range(t, p, s, e) for (t, p), (s, e) in sorted(widened.items()) if e > s]
        return RunState.create(
            self.settings.state_dir,
            spec.run_id,
            self._fingerprint(),
            ranges,
            extra={"bounds": {k: list(v) for k, v in bounds_of(spans).items()}},
        )

    def _scan(
        self, config: TxReplayConfig, spans: Mapping[tuple[str, int], tuple[int, int]]
    ) -> list[Scan]:
        """The selecting records of every bounded range: one Spark job, a task a range."""
        work = [(t, p, s, e) for (t, p), (s, e) in sorted(spans.items()) if e > s]
        if not work:
            return []
        sc = self.session().sparkContext
        rdd = sc.parallelize(work, len(work)).mapPartitions(functools.partial(scan_range, config))
        return list(self._collect(rdd))

    def _collect(self, rdd: Any) -> list[Any]:
        from bizevents.replay.session import task_error

        try:
            return list(rdd.collect())
        except Exception as exc:
            raise RangeFailedError(
                f"a task failed: {task_error(exc)}; rerun with --run-id {self.spec.run_id} "
                "to continue"
            ) from exc

    def prepare(self) -> tuple[TxReplayConfig, RunState]:
        from bizevents.contracts.technical import AutoDecoder
        from bizevents.contracts.technical.transaction import transaction_topic
        from bizevents.plumbing.kafka import ensure_topics
        from bizevents.plumbing.registry import schema_lookup
        from bizevents.replay.checks import check_contracts, check_registry
        from bizevents.translators.provenance import lacking_transactions, newest_changes

        self._refuse()
        spec, settings = self.spec, self.settings
        translator, _ = self.translators()
        wait_s = settings.translate.broker_wait_s
        planner = Planner(settings.kafka.librdkafka(), wait_s=wait_s)
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
        client = check_registry(settings.registry.client_config(), settings.registry.url)
        # the live worker's start-up check: Debezium's PostgreSQL ids name each record
        newest = newest_changes(
            settings.kafka.librdkafka(),
            sorted(counts),
            AutoDecoder(schema_lookup(client)),
            wait_s=wait_s,
        )
        lacking = lacking_transactions(spec.translator, newest)
        if lacking is not None:
            raise ReplayConfigError(lacking)
        t = settings.translate
        output = spec.output
        dead_letters = t.dead_letter_topic + ".replay"
        partitions: dict[str, int] = {}
        if output is not None:
            check_contracts(client, [translator], t.subject_strategy, t.auto_register)
            dead_letters = output.dead_letter_topic(t.dead_letter_topic)
            topics = sorted({output.topic_for(c.contract_topic()) for c in translator.emits})
            if output.kind == "path":
                if output.file_format == "avro":
                    Path(output.target).mkdir(parents=True, exist_ok=True)
                else:  # Spark writes it: any Hadoop file system
                    from bizevents.replay.checks import check_parquet

                    check_parquet()
                partitions = dict.fromkeys([*topics, dead_letters], t.output_partitions)
            else:
                partitions = ensure_topics(
                    _admin(settings.kafka.librdkafka()),
                    [*topics, dead_letters],
                    t.output_partitions,
                    wait_s=wait_s,
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
        units = output_units(config)
        parquet = self.spec.jvm_writes
        names = [PARQUET_UNIT] if parquet else [f"{t}/{p}" for t, p in units]
        done = sum(1 for name in names if name in config.done)
        self.listener.planned(len(names), done, summary.read)
        if config.baseline is None and all(name in config.done for name in names):
            state.finish()  # an earlier attempt wrote everything
            summary.seconds = perf_counter() - started
            return summary
        sc = self.session().sparkContext
        width = max(1, int(sc.defaultParallelism))
        assembled = (
            sc.parallelize(ranges, max(1, len(ranges)))
            .flatMap(functools.partial(read_range, config))
            .groupByKey(width)
            .mapPartitions(functools.partial(assemble, config))
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
        from bizevents.replay.session import Reports, follow, task_error

        sc = self.session().sparkContext
        finished = sc.accumulator([], Reports())
        rdd = grouped.mapPartitionsWithIndex(
            functools.partial(write_units, config, finished, width)
        )

        def take(report: TaskReport) -> None:
            state.mark_done(report.range_id, {"events": report.events})
            summary.units += 1
            for topic, n in report.events.items():
                summary.events[topic] = summary.events.get(topic, 0) + n
            self.listener.finished(report)

        try:
            totals: list[dict[str, int]] = follow(rdd.collect, finished, take)
        except Exception as exc:
            raise RangeFailedError(
                f"a task failed: {task_error(exc)}; rerun with --run-id "
                f"{self.spec.run_id} to continue"
            ) from exc
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
        from bizevents.replay.parquet import ARROW_SETTING, RANGE_COLUMN, _rename, spark_schema
        from bizevents.replay.session import Reports, task_error

        spark = self.session()
        spark.conf.set(ARROW_SETTING, "false")  # rows travel pickled; nothing needs pyarrow
        found = spark.sparkContext.accumulator([], Reports())
        rows = grouped.mapPartitions(functools.partial(parquet_rows, config, found))
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
        self.listener.finished(TaskReport(PARQUET_UNIT, events=summary.events))


#: The unit of resume of a Parquet output: the run's whole dataset.
PARQUET_UNIT: Final = "parquet"


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
