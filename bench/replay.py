"""Replay throughput on Spark local[1] and local[2], against the 100,000 events/s target.

Starts a private stack (free ports, temporary folder), fills one technical topic
with Debezium Avro envelopes of ``store.orders`` (each order placed, then moved
through its statuses: every change gives one or two business events with orders@2),
then replays it with ``orders@2`` to Avro files (``--to path:``; ``--to replay``
produces to ``<contract topic>.replay`` instead) on local[1] and local[2]. Prints
records/s and events/s of each, the ratio to the target and local[2]/local[1].

    .venv/bin/python bench/replay.py                        # 300,000 envelopes, 6 partitions
    .venv/bin/python bench/replay.py --records 600000 --to replay
    .venv/bin/python bench/replay.py --profile              # + where one range's time goes
                                                            #   and its CPU per 100,000 events
    .venv/bin/python bench/replay.py --cluster 2            # + a loopback standalone cluster
    .venv/bin/python bench/replay.py --broker kafka         # on Apache Kafka (default tansu)
    .venv/bin/python bench/replay.py --broker both          # 3 runs on each, alternately
    .venv/bin/python bench/replay.py --broker kafka --reader both   # the two readers weighed

``--reader spark-kafka`` reads the technical topic through Spark's own Kafka source
(spark-sql-kafka-0-10, its jars fetched once with Maven from bench/spark-kafka/pom.xml)
instead of the replay's reader: the rows cross from the JVM to the Python workers
(``DataFrame.rdd``: pyarrow is not a dependency) and go through the same translation
core and Avro files. It is a measurement only (docs/replay.md: why the replay's own
reader stays); ``--reader both`` runs each reader alternately, three times, and prints
events/s and CPU-seconds per 100,000 events side by side. The CPU is the bench's and
its descendants' (Spark's JVM, the Python workers), the stack's services left out.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import tempfile
import time
import uuid
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

TARGET = 100_000
SCALING_TARGET = 1.6  # local[2] / local[1]
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.replay.store_story: the envelopes' schemas

from bench import kit  # noqa: E402

#: Spark's own Kafka source (``--reader spark-kafka``), pinned
SPARK_KAFKA_POM = Path(__file__).resolve().with_name("spark-kafka") / "pom.xml"


def fill(
    bootstrap: str, registry_url: str, topic_server: str, records: int, partitions: int
) -> str:
    """``records`` envelopes: orders placed, then paid, shipped, delivered (4 changes each)."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from tests.replay.store_story import create_topic
    from tests.store_technical import order_change, registered_orders_encoder

    topic = f"{topic_server}.store.orders"
    create_topic(bootstrap, topic, partitions)
    encoder = registered_orders_encoder(topic_server, SchemaRegistryClient({"url": registry_url}))
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000}
    )
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    steps = ("pending", "paid", "shipped", "delivered")
    orders = records // len(steps)
    lsn = 1 << 24
    for step, status in enumerate(steps):
        for order in range(1, orders + 1):
            lsn += 64
            at = t0 + timedelta(seconds=order + step * orders)
            row = {
                "id": order,
                "customer_id": order % 977,
                "status": status,
                "total": Decimal(order % 100_000) / 100,
                "currency": "EUR",
                "placed_at": t0,
                "shipped_at": at if step >= 2 else None,
                "tracking_number": f"TRK{order}" if step >= 2 else None,
                "updated_at": at,
            }
            before = None if step == 0 else {**row, "status": steps[step - 1]}
            event = order_change(
                topic_server,
                "c" if step == 0 else "u",
                before,
                row,
                lsn=lsn,
                tx_id=lsn // 64,
                ts_ms=1_700_000_000_000 + order,
            )
            key, value = encoder.encode(event)
            while True:
                try:
                    producer.produce(
                        topic, value, key, partition=zlib.crc32(key or b"") % partitions
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(120) == 0
    return topic


class _Clock:
    """The replay's listener, for when its plan was ready (the preparation's seconds)."""

    def __init__(self) -> None:
        self.started = self.planned_at = time.perf_counter()

    def planned(self, total: int, skipped: int, offsets: int) -> None:
        self.planned_at = time.perf_counter()

    def phase(self, name: str) -> None:
        pass

    def finished(self, report: Any) -> None:
        pass


@dataclass
class Figures:
    """One replay: records read, events written, its seconds and CPU-seconds."""

    read: int
    events: int
    seconds: float
    cpu: float
    prepared: float = 0.0  # seconds of it preparing (the own reader's plan)

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds

    @property
    def records_per_s(self) -> float:
        return self.read / self.seconds

    @property
    def cpu_per_100k(self) -> float:
        return 1e5 * self.cpu / self.events


def tree_cpu_s(left_out: set[int]) -> float:
    """CPU-seconds of this process and its descendants alive now, but for the subtrees
    of ``left_out`` (the stack's services)."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = int(fields[11]) + int(fields[12])  # utime + stime
    me, total = os.getpid(), 0
    for pid in ticks:
        ancestor = pid
        while ancestor not in (me, 0, 1) and ancestor not in left_out:
            ancestor = parents.get(ancestor, 0)
        if ancestor == me:
            total += ticks[pid]
    return total / os.sysconf("SC_CLK_TCK")


def run(
    master: str, topic: str, settings: Any, out: str, slice_size: int, left_out: set[int]
) -> Figures:
    from pyspark.sql import SparkSession

    from bizevents.replay import Output, ReplayJob, ReplaySpec, spark_session

    spark = spark_session(master)
    try:
        # warm the Python workers (imports, plugin discovery) as a long run would be
        spark.sparkContext.parallelize(range(8), 8).map(
            lambda x: __import__("bizevents.replay.task")
        ).count()
        spec = ReplaySpec(topic, "orders@2", Output.parse(out), slice_size=slice_size)
        clock = _Clock()
        cpu = tree_cpu_s(left_out)
        summary = ReplayJob(spec, settings.runtime(), spark=spark, listener=clock).run()
        return Figures(
            summary.total("read"),
            sum(summary.events.values()),
            summary.seconds,
            tree_cpu_s(left_out) - cpu,
            clock.planned_at - clock.started,
        )
    finally:
        spark.stop()
        SparkSession._instantiatedSession = None


def run_spark_kafka(
    master: str, topic: str, settings: Any, out: str, left_out: set[int]
) -> Figures:
    """The replay's translation and files over rows read by Spark's own Kafka source
    (one Spark partition per Kafka partition)."""
    from pyspark.sql import SparkSession

    from bizevents.replay import Output, spark_session
    from bizevents.replay.task import TaskConfig

    # the JVM reads and converts every record here: its full JIT, as for Parquet
    spark = spark_session(master, jvm_writes=True)
    try:
        spark.sparkContext.parallelize(range(8), 8).map(
            lambda x: __import__("bizevents.replay.task")
        ).count()
        config = TaskConfig(
            token=uuid.uuid4().hex,
            kafka=settings.kafka.librdkafka(),
            registry=settings.registry.client_config(),
            translator="orders@2",
            output=Output.parse(out),
        )
        cpu = tree_cpu_s(left_out)
        started = time.perf_counter()
        rows = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", settings.kafka.bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
            .select("partition", "offset", "key", "value")
        )
        counts = rows.rdd.mapPartitions(functools.partial(translate_rows, config, topic)).collect()
        seconds = time.perf_counter() - started
        return Figures(
            sum(read for read, _ in counts),
            sum(events for _, events in counts),
            seconds,
            tree_cpu_s(left_out) - cpu,
        )
    finally:
        spark.stop()
        SparkSession._instantiatedSession = None


def translate_rows(config: Any, topic: str, rows: Any) -> Any:
    """One Spark partition's rows through the replay's translation core into its Avro
    files, as a range of the own reader would go: ``(records read, events)``."""
    from bizevents.replay.plan import Range
    from bizevents.replay.task import TaskReport, _FileSink, _make_record, runtime

    rt = runtime(config)
    report = TaskReport(topic)
    sink = None
    block: list[Any] = []

    def flush() -> None:
        assert sink is not None
        result = rt.pipeline.process(block)
        report.count(result)
        sink.write(result.records, report)
        report.read += len(block)
        block.clear()

    for partition, offset, key, value in rows:
        if sink is None:
            rng = Range(topic, partition, offset, offset)
            sink = _FileSink(Path(config.output.target), config.output, rng)
        block.append(_make_record(topic, partition, offset, key, value, []))
        if len(block) >= config.batch_size:
            flush()
    if sink is not None:
        if block:
            flush()
        sink.close(rng)
    yield report.read, report.emitted


def profile_one_range(topic: str, settings: Any, out: str, records: int) -> None:
    """One range in this process under cProfile: where the time of a task goes."""
    import cProfile
    import pstats
    import uuid as _uuid

    from bizevents.replay.plan import Range
    from bizevents.replay.spec import Output
    from bizevents.replay.task import TaskConfig, release, run_range

    output = Output.parse(out)
    config = TaskConfig(
        token=_uuid.uuid4().hex,
        kafka=settings.kafka.librdkafka(),
        registry=settings.registry.client_config(),
        translator="orders@2",
        output=output,
        dead_letter_topic="bizevents.dead-letter.replay",
    )
    from bizevents.replay.plan import Planner

    low, high = Planner(settings.kafka.librdkafka()).watermarks([(topic, 0)])[(topic, 0)]
    rng = Range(topic, 0, low, min(high, low + records))
    run_range(config, Range(topic, 0, low, low + 2000), None)  # warm caches
    t0 = time.perf_counter()
    plain = run_range(config, rng, None)
    elapsed = time.perf_counter() - t0
    cpu_per_event(config, rng)
    stages(config, rng, plain.read)
    print(
        f"\none range in-process, no profiler: {plain.read:,} records, {plain.emitted:,} events "
        f"in {elapsed:.2f}s = {plain.read / elapsed:,.0f} records/s, "
        f"{1e6 * elapsed / plain.read:.1f} µs per record"
    )
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    report = run_range(config, rng, None)
    profiler.disable()
    elapsed = time.perf_counter() - t0
    print(
        f"\none range in-process: {report.read:,} records, {report.emitted:,} events in "
        f"{elapsed:.2f}s = {report.read / elapsed:,.0f} records/s, "
        f"{1e6 * elapsed / report.read:.1f} µs per record"
    )
    release(config.token)  # its consumer, before the stack goes down
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(25)


def cpu_per_event(config: Any, rng: Any, runs: int = 3) -> None:
    """The range's CPU time (this process's, the Kafka client's threads included) per
    100,000 events: what the replay's work costs, much less sensitive to other load on
    the machine than a rate."""
    import statistics

    from bizevents.replay.task import run_range

    figures = []
    for _ in range(runs):
        t0 = time.process_time()
        report = run_range(config, rng, None)
        figures.append(1e5 * (time.process_time() - t0) / report.emitted)
    print(
        f"CPU per 100,000 events of one range ({report.read:,} records, {report.emitted:,} "
        f"events), {runs} runs: median {statistics.median(figures):.3f} s "
        f"({min(figures):.3f}-{max(figures):.3f})"
    )


def stages(config: Any, rng: Any, n: int) -> None:
    """A task's stages one after the other, µs per record: read, the core, the file."""
    import tempfile as _tempfile

    from bizevents.replay.task import TaskReport, _FileSink, read_range, runtime

    rt = runtime(config)
    t0 = time.perf_counter()
    blocks = [block for _, block in read_range(rt.consumer(), rng, config.batch_size)]
    t1 = time.perf_counter()
    results = [rt.pipeline.process(block) for block in blocks]
    t2 = time.perf_counter()
    with _tempfile.TemporaryDirectory(prefix="bench-replay-stages-") as out:
        sink = _FileSink(Path(out), config.output, rng)
        report = TaskReport(rng.id)
        for result in results:
            sink.write(result.records, report)
        sink.close(rng)
        t3 = time.perf_counter()
    print(
        f"stages, µs per record: read {1e6 * (t1 - t0) / n:.1f}, translation core "
        f"{1e6 * (t2 - t1) / n:.1f}, file output {1e6 * (t3 - t2) / n:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument(
        "--slice-size", type=int, default=None, help="offsets per task (the replay's default)"
    )
    parser.add_argument("--to", default="path", choices=["path", "replay"])
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-only", action="store_true", help="skip the Spark runs")
    parser.add_argument("--master", action="append", default=[], help="another master to run")
    parser.add_argument(
        "--cluster",
        type=int,
        default=0,
        metavar="N",
        help="also run on a standalone cluster of N one-core workers started on loopback",
    )
    parser.add_argument(
        "--reader",
        choices=["own", "spark-kafka", "both"],
        default="own",
        help="the technical topic read by the replay's own reader, by Spark's Kafka source, "
        "or both: each alternately, three times, side by side",
    )
    parser.add_argument(
        "--runs", type=int, default=3, help="with a choice of both: runs with each choice"
    )
    kit.broker_option(parser)
    args = parser.parse_args()
    targets = {
        "local[1] events/s": None,
        "local[2] events/s": kit.Target(TARGET),
        "local[2] records/s": None,
        "local[2] / local[1]": kit.Target(SCALING_TARGET),
        "local[2] CPU-s per 100k events": None,
    }
    if args.broker == "both" and args.reader == "both":
        parser.error("weigh either the brokers or the readers (--broker both, --reader both)")
    if args.broker == "both":
        kit.both_brokers(targets, runs=args.runs)
        return
    if args.reader == "both":
        kit.alternately("--reader", ("own", "spark-kafka"), targets, runs=args.runs)
        return
    if args.reader == "spark-kafka":
        if args.profile or args.profile_only or args.cluster or args.to != "path":
            parser.error("--reader spark-kafka writes files on local masters, nothing more")
        from bizevents.devstack.kafkajars import classpath

        # the JVM's classpath is set at its launch, before any session
        jars = ",".join(classpath(SPARK_KAFKA_POM))
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {jars} pyspark-shell"

    from bizevents.devstack import DevStack
    from bizevents.plumbing.settings import KafkaSettings, RegistrySettings
    from bizevents.settings import Settings

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    tmp = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    stack = DevStack(tmp / "stack", kit.dev_settings(args.broker))
    cluster: Any = None
    try:
        stack.up()
        endpoints = stack.endpoints()
        left_out = {h.started.pid for h in stack.status() if h.started}
        settings = Settings(
            kafka=KafkaSettings(bootstrap_servers=endpoints.bootstrap_servers),
            registry=RegistrySettings(url=endpoints.registry_url),
            state_dir=tmp / "state",
        )
        t0 = time.perf_counter()
        topic = fill(
            endpoints.bootstrap_servers,
            endpoints.registry_url,
            f"bench{uuid.uuid4().hex[:6]}",
            args.records,
            args.partitions,
        )
        print(
            f"filled {topic}: {args.records:,} envelopes in {args.partitions} partitions "
            f"in {time.perf_counter() - t0:.1f}s"
        )
        results = {}
        if args.profile_only:
            profile_one_range(topic, settings, "path:" + str(tmp / "profile"), 20_000)
            return
        from bizevents.replay.spec import DEFAULT_SLICE_SIZE

        slice_size = args.slice_size or DEFAULT_SLICE_SIZE
        masters = ["local[1]", "local[2]", *args.master]
        if args.cluster:
            from bizevents.devstack.spark import StandaloneCluster

            cluster = StandaloneCluster(tmp / "spark-cluster", workers=args.cluster)
            masters.append(cluster.start())
        for master in masters:
            out = f"path:{tmp / master.replace('/', '_')}" if args.to == "path" else "replay"
            if args.reader == "spark-kafka":
                figures = run_spark_kafka(master, topic, settings, out, left_out)
            else:
                figures = run(master, topic, settings, out, slice_size, left_out)
            results[master] = figures
            print(
                f"{master}: {figures.read:,} records → {figures.events:,} events in "
                f"{figures.seconds:.1f}s: {figures.records_per_s:>9,.0f} records/s "
                f"{figures.events_per_s:>9,.0f} events/s, {figures.cpu_per_100k:.2f} CPU-s per "
                f"100k events  ({figures.prepared:.2f}s of it preparing)"
            )
        one, two = results["local[1]"], results["local[2]"]
        reader = "Spark's Kafka source" if args.reader == "spark-kafka" else "the replay's own"
        print(
            f"reader: {reader}; broker: {args.broker}; output: "
            f"{'Avro files (path:)' if args.to == 'path' else '<contract>.replay topics'}"
            f", slices of at most {slice_size:,} offsets"
        )
        print(
            f"ratio to target ({TARGET:,} events/s) on local[2]: {two.events_per_s / TARGET:.2f}"
            f"  (records/s: {two.records_per_s / TARGET:.2f})"
        )
        print(
            f"local[2] / local[1]: {two.events_per_s / one.events_per_s:.2f}  "
            f"(target ≥ {SCALING_TARGET})"
        )
        kit.report_figures(
            {
                "local[1] events/s": one.events_per_s,
                "local[2] events/s": two.events_per_s,
                "local[2] records/s": two.records_per_s,
                "local[2] / local[1]": two.events_per_s / one.events_per_s,
                "local[2] CPU-s per 100k events": two.cpu_per_100k,
            }
        )
        for master in masters[2:]:
            other = results[master]
            print(
                f"{master}: {other.events_per_s / TARGET:.2f} of the target, "
                f"{other.events_per_s / two.events_per_s:.2f}x local[2]"
            )
        if args.profile:
            profile_one_range(
                topic,
                settings,
                f"path:{tmp / 'profile'}" if args.to == "path" else "replay",
                min(50_000, args.records // args.partitions),
            )
    finally:
        if cluster is not None:
            cluster.stop()
        stack.down(purge=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
