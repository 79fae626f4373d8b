"""The replay driver: check, plan (or resume), run the ranges as one Spark job, record, sum up.

The pending ranges are the partitions of one RDD (one range, one partition) and one
job runs them all (``mapPartitions``), so Spark schedules, retries (``spark.task.
maxFailures``), speculates and shows the tasks. Each task adds its range's report to an
accumulator; Spark merges a task's accumulator updates on the driver when the task
succeeds, so the driver, polling it while the job runs, learns of each finished range
at once, writes it to the run state (a killed driver loses at most the ranges in
flight, and their output carries the same event ids when they run again), and shows
progress as ranges finish.

Parquet output is the exception: the JVM writes each range's DataFrame, which a task
cannot start, so those ranges stay one Spark job each, from a pool of driver threads.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any, Final

import structlog

from bizevents.plumbing.errors import BizeventsError
from bizevents.replay.checks import (
    check_contracts,
    check_parquet,
    check_registry,
    ensure_output_topics,
)
from bizevents.replay.compaction import KeyIndex
from bizevents.replay.diff import DiffReport
from bizevents.replay.exceptions import (
    RangeFailedError,
)
from bizevents.replay.plan import Planner, Range, slices
from bizevents.replay.run import ReplayRun
from bizevents.replay.session import Reports, follow, task_error
from bizevents.replay.spec import ReplaySpec
from bizevents.replay.state import RunState
from bizevents.replay.task import TaskConfig, TaskReport, index_range, run_range, selected_offsets
from bizevents.translators.settings import RuntimeSettings

log = structlog.get_logger("replay")


@dataclass
class Summary:
    """What a run did (this attempt, plus what earlier attempts of the run id did)."""

    run_id: str
    state_path: Path
    ranges: int
    skipped: int  # finished by an earlier attempt
    reports: list[TaskReport] = field(default_factory=list)
    seconds: float = 0.0
    diff: DiffReport | None = None

    def total(self, name: str) -> int:
        return int(sum(getattr(r, name) for r in self.reports))

    @property
    def events(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for report in self.reports:
            for topic, n in report.events.items():
                found[topic] = found.get(topic, 0) + n
        return found

    @property
    def records_per_s(self) -> float:
        return self.total("read") / self.seconds if self.seconds else 0.0

    @property
    def events_per_s(self) -> float:
        return sum(self.events.values()) / self.seconds if self.seconds else 0.0


class ReplayJob(ReplayRun):
    """One run of ``bizevents replay``."""

    def __init__(
        self,
        spec: ReplaySpec,
        settings: RuntimeSettings,
        *,
        parallel_jobs: int | None = None,
        producer: dict[str, Any] | None = None,
        **run: Any,
    ) -> None:
        super().__init__(spec, settings, **run)
        self.parallel_jobs = parallel_jobs
        self.producer = producer or {}

    # -- preparation (no Spark yet: errors come fast) ---------------------------------

    def _state(self) -> RunState:
        state_dir = self.settings.state_dir
        fingerprint = self.spec.fingerprint()
        state = RunState.load(state_dir, self.spec.run_id)
        if state is not None:
            state.check(fingerprint)
            log.info("resuming", run_id=self.spec.run_id, done=len(state.done))
            return state
        planner = Planner(
            self.settings.kafka.librdkafka(), wait_s=self.settings.translate.broker_wait_s
        )
        spans = planner.spans(self.spec.topics, self.spec.start, self.spec.until)
        return RunState.create(
            state_dir, self.spec.run_id, fingerprint, slices(spans, self.spec.slice_size)
        )

    def prepare(self) -> tuple[RunState, TaskConfig]:
        spec, settings = self.spec, self.settings
        ours, theirs = self.translators()
        client = check_registry(settings.registry.client_config(), settings.registry.url)
        state = self._state()
        kafka = settings.kafka.librdkafka()
        dead_letters = settings.translate.dead_letter_topic
        partitions: dict[str, int] = {}
        output = spec.output
        if output is not None:
            dead_letters = output.dead_letter_topic(dead_letters)
            check_contracts(
                client,
                [ours],
                settings.translate.subject_strategy,
                settings.translate.auto_register,
            )
            if output.kind == "path" and output.file_format == "avro":
                Path(output.target).mkdir(parents=True, exist_ok=True)
            elif output.kind == "path":  # Spark writes it: any Hadoop file system
                check_parquet()
            else:
                topics = sorted(
                    {output.topic_for(c.contract_topic()) for c in ours.emits} | {dead_letters}
                )
                partitions = ensure_output_topics(
                    kafka,
                    topics,
                    settings.translate.output_partitions,
                    wait_s=settings.translate.broker_wait_s,
                )
        config = TaskConfig(
            token=uuid.uuid4().hex,
            kafka=kafka,
            registry=settings.registry.client_config(),
            translator=ours.ref,
            output=output,
            diff_against=None if theirs is None else theirs.ref,
            compact=spec.compact,
            since_ms=None if spec.start is None else spec.start.timestamp_ms,
            until_ms=None if spec.until is None else spec.until.timestamp_ms,
            subject_strategy=settings.translate.subject_strategy,
            auto_register=settings.translate.auto_register,
            dead_letter_topic=dead_letters,
            partitions=partitions,
            producer=self.producer,
        )
        return state, config

    # -- running --------------------------------------------------------------------------

    def run(self) -> Summary:
        started = perf_counter()
        state, config = self.prepare()
        pending = state.pending()
        summary = Summary(
            state.run_id, state.path, len(state.ranges), len(state.ranges) - len(pending)
        )
        self.listener.planned(len(state.ranges), summary.skipped, sum(r.size for r in state.ranges))
        if pending:
            self.session()
            survivors = self._survivors(state, pending, config) if config.compact else {}
            self.listener.phase("replay")
            work = [(rng, survivors.get(rng.id)) for rng in pending]
            output = config.output
            parquet = output is not None and output.kind == "path"
            parquet = parquet and output is not None and output.file_format == "parquet"
            run = self._run_range_jobs if parquet else self._dataflow
            summary.reports = run(state, work, config)
        if self.spec.dry_run:
            summary.diff = DiffReport()
            for report in summary.reports:
                if report.diff is not None:
                    summary.diff.merge(report.diff)
        else:
            state.finish()
        summary.seconds = perf_counter() - started
        return summary

    def selection(self) -> dict[str, list[int]]:
        """Per range, the offsets a run would translate (for checks); runs no translator."""
        state, config = self.prepare()
        self.session()
        survivors = self._survivors(state, state.ranges, config) if config.compact else {}
        with self._pool() as pool:
            futures = {
                pool.submit(self._job, selected_offsets, config, r, survivors.get(r.id)): r
                for r in state.ranges
            }
            return {rng.id: self._result(future, rng) for future, rng in futures.items()}

    def _pool(self) -> ThreadPoolExecutor:
        width = self.parallel_jobs or int(self.spark.sparkContext.defaultParallelism) + 1
        return ThreadPoolExecutor(max_workers=max(1, width), thread_name_prefix="replay-job")

    def _job(self, func: Callable[..., Any], *args: Any) -> Any:
        def one(_: Any) -> Any:
            return func(*args)

        return self.spark.sparkContext.parallelize([0], 1).map(one).collect()[0]

    def _range(self, config: TaskConfig, rng: Range, survivors: list[int] | None) -> TaskReport:
        """One range, one Spark job: a task that writes (topics, Avro) or a Parquet write."""
        output = config.output
        if output is not None and output.kind == "path" and output.file_format == "parquet":
            from bizevents.replay.parquet import write_range

            return write_range(self.spark, config, rng, survivors)
        report: TaskReport = self._job(run_range, config, rng, survivors)
        return report

    def _survivors(
        self, state: RunState, pending: Sequence[Range], config: TaskConfig
    ) -> dict[str, list[int]]:
        """Phase one of ``--compact`` for partitions cut in several slices."""
        partitions = {(r.topic, r.partition) for r in pending if r.slices > 1}
        if not partitions:
            return {}
        self.listener.phase("compaction index")
        wanted = [r for r in state.ranges if (r.topic, r.partition) in partitions]
        merged: dict[tuple[str, int], KeyIndex] = {}
        indexes = self._one_job(functools.partial(_index_ranges, config), wanted)
        for rng, index in zip(wanted, indexes, strict=True):
            found = merged.get((rng.topic, rng.partition))
            if found is None:
                merged[(rng.topic, rng.partition)] = index
            else:
                found.merge(index)
        result: dict[str, list[int]] = {}
        for rng in pending:
            index = merged.get((rng.topic, rng.partition))
            if index is not None:
                result[rng.id] = [o for o in index.survivors() if rng.start <= o < rng.end]
        return result

    def _one_job(
        self, func: Callable[[Iterable[Any]], Iterator[Any]], items: Sequence[Any]
    ) -> list[Any]:
        """``func`` over ``items``, one item per partition of one job; the results in
        order. A failed task's error names its range (``_failed``)."""
        rdd = self.spark.sparkContext.parallelize(list(items), max(1, len(items)))
        try:
            return list(rdd.mapPartitions(func).collect())
        except Exception as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: BaseException) -> RangeFailedError:
        found = _RANGE_ERROR.search(str(exc))
        what = f"range {found.group(1)}" if found else "a range"
        return RangeFailedError(
            f"{what} failed: {task_error(exc)}; rerun with --run-id {self.spec.run_id} to continue"
        )

    def _result(self, future: Future[Any], rng: Range) -> Any:
        try:
            return future.result()
        except BizeventsError:
            raise
        except Exception as exc:
            raise RangeFailedError(
                f"range {rng.id} failed: {task_error(exc)}; "
                f"rerun with --run-id {self.spec.run_id} to continue"
            ) from exc

    def _recorded(self, state: RunState, report: TaskReport) -> TaskReport:
        """A finished range in the run state (not in a dry run), and said."""
        if not self.spec.dry_run:
            state.mark_done(report.range_id, _report_dict(report))
        self.listener.finished(report)
        return report

    def _dataflow(
        self, state: RunState, work: Sequence[Work], config: TaskConfig
    ) -> list[TaskReport]:
        """The ranges as the partitions of one job; each finished range recorded as the
        driver learns of it (the accumulator's value grows as tasks succeed)."""
        sc = self.spark.sparkContext
        finished = sc.accumulator([], Reports())
        rdd = sc.parallelize(work, max(1, len(work))).mapPartitions(
            functools.partial(_run_ranges, config, finished)
        )
        reports: list[TaskReport] = []
        try:
            follow(rdd.count, finished, lambda r: reports.append(self._recorded(state, r)))
        except Exception as exc:
            raise self._failed(exc) from exc
        return reports

    def _run_range_jobs(
        self, state: RunState, work: Sequence[Work], config: TaskConfig
    ) -> list[TaskReport]:
        """One Spark job per range (Parquet: the JVM writes each range's DataFrame)."""
        reports: list[TaskReport] = []
        failure: RangeFailedError | None = None
        with self._pool() as pool:
            running: dict[Future[Any], Range] = {}
            queue = list(work)
            width = pool._max_workers
            while queue or running:
                while queue and len(running) < width and failure is None:
                    rng, survivors = queue.pop(0)
                    future = pool.submit(self._range, config, rng, survivors)
                    running[future] = rng
                if not running:
                    break
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    rng = running.pop(future)
                    try:
                        report: TaskReport = self._result(future, rng)
                    except RangeFailedError as exc:
                        failure = failure or exc
                        continue
                    reports.append(self._recorded(state, report))
        if failure is not None:
            raise failure
        return reports


#: A range and, under ``--compact``, the offsets of it that survive compaction.
Work = tuple[Range, list[int] | None]

_RANGE_ERROR: Final = re.compile(r"range (\S+) failed in its task")


def _run_ranges(config: TaskConfig, finished: Any, work: Iterable[Work]) -> Iterator[str]:
    """A task: its ranges (one), each reported to ``finished`` once written."""
    for rng, survivors in work:
        try:
            report = run_range(config, rng, survivors)
        except Exception as exc:
            raise RuntimeError(
                f"range {rng.id} failed in its task: {type(exc).__name__}: {exc}"
            ) from exc
        finished.add([report])
        yield rng.id


def _index_ranges(config: TaskConfig, work: Iterable[Range]) -> Iterator[KeyIndex]:
    """A task of ``--compact``'s first phase: its slice's latest offset per key."""
    for rng in work:
        try:
            yield index_range(config, rng)
        except Exception as exc:
            raise RuntimeError(
                f"range {rng.id} failed in its task: {type(exc).__name__}: {exc}"
            ) from exc


def _report_dict(report: TaskReport) -> dict[str, Any]:
    data = asdict(report)
    data.pop("diff", None)
    return data
