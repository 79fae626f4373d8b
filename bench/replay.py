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
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
import zlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

TARGET = 100_000
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.replay.store_story: the envelopes' schemas


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


def run(master: str, topic: str, settings: Any, out: str, slice_size: int) -> tuple[Any, float]:
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
        summary = ReplayJob(spec, settings.runtime(), spark=spark, listener=clock).run()
        return summary, clock.planned_at - clock.started
    finally:
        spark.stop()
        SparkSession._instantiatedSession = None


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
    sink = _FileSink(Path(_tempfile.mkdtemp()), config.output, rng)
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
    args = parser.parse_args()

    from bizevents.devstack import DevStack
    from bizevents.plumbing.settings import KafkaSettings, RegistrySettings
    from bizevents.settings import DevSettings, Settings

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    tmp = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    stack = DevStack(tmp / "stack", DevSettings(broker_port=0, registry_port=0, postgres_port=0))
    cluster: Any = None
    try:
        stack.up()
        endpoints = stack.endpoints()
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
            summary, prepared = run(master, topic, settings, out, slice_size)
            results[master] = summary
            print(
                f"{master}: {summary.total('read'):,} records → {sum(summary.events.values()):,} "
                f"events in {summary.seconds:.1f}s: {summary.records_per_s:>9,.0f} records/s "
                f"{summary.events_per_s:>9,.0f} events/s  ({summary.ranges} ranges, "
                f"{prepared:.2f}s of it preparing)"
            )
        one, two = results["local[1]"], results["local[2]"]
        print(
            f"output: {'Avro files (path:)' if args.to == 'path' else '<contract>.replay topics'}"
            f", slices of at most {slice_size:,} offsets"
        )
        print(
            f"ratio to target ({TARGET:,} events/s) on local[2]: {two.events_per_s / TARGET:.2f}"
            f"  (records/s: {two.records_per_s / TARGET:.2f})"
        )
        print(f"local[2] / local[1]: {two.events_per_s / one.events_per_s:.2f}  (target ≥ 1.6)")
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
