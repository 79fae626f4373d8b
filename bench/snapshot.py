"""Snapshot rates: the initial snapshot, and the incremental one idle and under a stream.

Per run, on a fresh table of ``--rows`` rows (and a small probe table):

1. ``capture postgres`` takes its initial snapshot: rows/s until every row is in Kafka;
2. a writer changes the big table at ``--rate`` changes/s (transactions of 50 rows) and
   the probe table 50 times a second, without a snapshot: the stream's commit ->
   technical-topic latency (probe records: Kafka timestamp minus ``source.ts_ms``);
3. an incremental snapshot of the big table (a signal on the signal topic), idle;
4. the same under the writer's load, with the probe's latency during it.

Prints each figure per run, then the median of the runs with min-max, and the ratios to
the targets (incremental >= 60,000 rows/s idle; stream p99 during <= 2x idle p99).

    .venv/bin/python bench/snapshot.py                 # a private stack on free ports
    .venv/bin/python bench/snapshot.py --rows 200000 --runs 1 --stack-json endpoints.json
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg2

TARGET_IDLE = 60_000
CHUNK = 50


class Writer(threading.Thread):
    """Updates ``rate`` rows/s of the big table and 50/s of the probe table."""

    def __init__(self, dsn: str, big: str, probe: str, rows: int, rate: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.big, self.probe, self.rows, self.rate = dsn, big, probe, rows, rate
        self.stop_event = threading.Event()
        self.changes = 0

    def run(self) -> None:
        conn = psycopg2.connect(self.dsn)
        rnd = random.Random(1)
        per_tx = CHUNK
        interval = per_tx / self.rate
        next_at = time.perf_counter()
        n = 0
        with conn.cursor() as cur:
            while not self.stop_event.is_set():
                ids = [rnd.randrange(1, self.rows + 1) for _ in range(per_tx)]
                cur.execute(f"UPDATE {self.big} SET qty = qty + 1 WHERE id = ANY(%s)", (ids,))
                n += 1
                if n % max(1, self.rate // per_tx // 50) == 0:
                    cur.execute(
                        f"UPDATE {self.probe} SET n = n + 1 WHERE id = %s", (rnd.randrange(1, 101),)
                    )
                conn.commit()
                self.changes += per_tx
                next_at += interval
                delay = next_at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -0.1:
                    next_at = time.perf_counter()  # behind: no burst to catch up
        conn.close()


def probe_latencies(endpoints: Any, topic: str) -> list[tuple[int, float]]:
    """(commit ms, latency s) of every streamed probe change."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from bizevents.contracts.envelope import ChangeEvent
    from bizevents.contracts.technical import AvroDecoder

    registry = SchemaRegistryClient({"url": endpoints.registry_url})
    decoder = AvroDecoder(lambda i: registry.get_schema(i).schema_str)
    consumer = Consumer(
        {
            "bootstrap.servers": endpoints.bootstrap_servers,
            "group.id": "bench",
            "enable.partition.eof": True,
        }
    )
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    ends, out = 0, []
    while ends < len(meta.partitions):
        for m in consumer.consume(1000, timeout=5):
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"reading {topic}: {err}")
                ends += 1
                continue
            d = decoder.decode(m.key(), m.value())
            if isinstance(d, ChangeEvent) and d.op == "u" and d.source.ts_ms:
                out.append((d.source.ts_ms, (m.timestamp()[1] - d.source.ts_ms) / 1000))
    consumer.close()
    return out


def p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def one_run(
    endpoints: Any, rows: int, rate: int, load_s: float, chunk: int, tmp: Path
) -> dict[str, float]:
    from confluent_kafka import Producer

    from bizevents.capture.config import CaptureConfig
    from bizevents.capture.core.signals import SignalTopic, new_signal
    from bizevents.capture.metrics import CaptureStats
    from bizevents.capture.postgres.runner import CaptureEndpoints, PostgresCapture

    tag = uuid.uuid4().hex[:8]
    big, probe = f"public.snap_{tag}", f"public.probe_{tag}"
    slot = f"bench_snap_{tag}"
    dsn = endpoints.postgres_dsn
    admin = psycopg2.connect(dsn)
    admin.autocommit = True
    kafka = {"bootstrap.servers": endpoints.bootstrap_servers}
    with admin.cursor() as cur:
        cur.execute(
            f"CREATE TABLE {big} (id bigint PRIMARY KEY, name text, qty int, "
            "price numeric(12,2), at timestamptz, flag boolean)"
        )
        cur.execute(
            f"INSERT INTO {big} SELECT g, 'customer ' || g, g % 97, g * 1.25, now(), "
            f"g % 2 = 0 FROM generate_series(1, {rows}) g"
        )
        cur.execute(f"CREATE TABLE {probe} (id int PRIMARY KEY, n int)")
        cur.execute(f"INSERT INTO {probe} SELECT g, 0 FROM generate_series(1, 100) g")
    config = CaptureConfig(
        server=f"snap{tag}",
        tables=(big, probe),
        slot=slot,
        partitions=3,
        heartbeat_interval_s=1.0,
        incremental_chunk_rows=chunk,
    )
    stats = CaptureStats(config.server, slot)
    runner = PostgresCapture(
        config,
        CaptureEndpoints(dsn, kafka, {"url": endpoints.registry_url}, tmp),
        stats=stats,
    )
    thread = threading.Thread(target=runner.run, daemon=True)
    out: dict[str, float] = {}
    signals = SignalTopic(kafka, config.signal_topic_name, config.server)
    producer = Producer(kafka)

    def incremental() -> float:
        sent_at = time.perf_counter()
        signals.send(producer, new_signal("execute-snapshot", (big,)))
        producer.flush(10)
        while not runner.ledger.queue:
            assert thread.is_alive(), "capture stopped"
            time.sleep(0.005)
        while runner.ledger.queue:
            assert thread.is_alive(), "capture stopped"
            time.sleep(0.01)
        return rows / (time.perf_counter() - sent_at)

    try:
        t0 = time.perf_counter()
        thread.start()
        while not stats.snapshot_done:
            assert thread.is_alive(), "capture stopped"
            time.sleep(0.01)
        out["initial rows/s"] = rows / (time.perf_counter() - t0)
        time.sleep(2)
        writer = Writer(dsn, big, probe, rows, rate)
        writer.start()
        time.sleep(1)
        idle_from = int(time.time() * 1000)
        time.sleep(load_s)
        idle_to = int(time.time() * 1000)
        writer.stop_event.set()
        writer.join()
        time.sleep(2)
        out["incremental idle rows/s"] = incremental()
        writer = Writer(dsn, big, probe, rows, rate)
        writer.start()
        time.sleep(1)
        during_from = int(time.time() * 1000)
        changes_start, started = writer.changes, time.perf_counter()
        out["incremental under load rows/s"] = incremental()
        during_to = int(time.time() * 1000)
        out["writer changes/s"] = (writer.changes - changes_start) / (time.perf_counter() - started)
        writer.stop_event.set()
        writer.join()
        time.sleep(3)
        lat = probe_latencies(endpoints, f"{config.prefix}.{probe}")
        idle = [s for ms, s in lat if idle_from <= ms <= idle_to]
        during = [s for ms, s in lat if during_from <= ms <= during_to]
        out["stream p99 idle ms"] = p99(idle) * 1000
        out["stream p99 during ms"] = p99(during) * 1000
        out["probe changes idle"] = float(len(idle))
        out["probe changes during"] = float(len(during))
    finally:
        runner.request_stop()
        thread.join(60)
        with admin.cursor() as cur:
            cur.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND active_pid IS NULL",
                (slot,),
            )
            cur.execute(f"DROP PUBLICATION IF EXISTS {config.publication_name}")
            cur.execute(f"DROP TABLE IF EXISTS {big}, {probe}")
        admin.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=5_000, help="stream changes/s under load")
    parser.add_argument("--load-seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chunk-rows", type=int, default=1024, help="incremental chunk size")
    parser.add_argument("--stack-json", type=Path, help="endpoints of a running stack")
    args = parser.parse_args()

    from bizevents.devstack import DevStack, Endpoints
    from bizevents.settings import DevSettings

    tmp = Path(tempfile.mkdtemp(prefix="bench-snapshot-"))
    stack = None
    if args.stack_json:
        endpoints = Endpoints(**json.loads(args.stack_json.read_text()))
    else:
        stack = DevStack(
            tmp / "stack", DevSettings(broker_port=0, registry_port=0, postgres_port=0)
        )
        stack.up()
        endpoints = stack.endpoints()
    try:
        runs = []
        for n in range(args.runs):
            result = one_run(
                endpoints, args.rows, args.rate, args.load_seconds, args.chunk_rows, tmp / f"s{n}"
            )
            runs.append(result)
            print(f"run {n + 1}: " + ", ".join(f"{k} {v:,.1f}" for k, v in result.items()))
            sys.stdout.flush()
        print(f"{args.rows:,} rows, {args.runs} runs, median (min-max):")
        for key in runs[0]:
            if key.startswith("probe"):
                continue
            values = [r[key] for r in runs]
            print(
                f"  {key:32} {statistics.median(values):>10,.0f} "
                f"({min(values):,.0f}-{max(values):,.0f})"
            )
        idle = statistics.median(r["incremental idle rows/s"] for r in runs)
        print(f"  incremental idle / target {TARGET_IDLE:,}: {idle / TARGET_IDLE:.2f}")
        ratio = statistics.median(r["stream p99 during ms"] / r["stream p99 idle ms"] for r in runs)
        print(f"  stream p99 during / idle (target <= 2): {ratio:.2f}")
    finally:
        if stack is not None:
            stack.down(purge=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
