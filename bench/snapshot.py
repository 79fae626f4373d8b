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

import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import kit  # noqa: E402

TARGET_IDLE = 60_000


def pg_writer(dsn: str, big: str, probe: str, rows: int, rate: int) -> kit.RateWriter:
    """Updates ``rate`` rows/s of the big table and 50/s of the probe table."""

    def step(cur: Any, ids: list[int], probe_id: int | None) -> None:
        cur.execute(f"UPDATE {big} SET qty = qty + 1 WHERE id = ANY(%s)", (ids,))
        if probe_id is not None:
            cur.execute(f"UPDATE {probe} SET n = n + 1 WHERE id = %s", (probe_id,))
        cur.connection.commit()

    return kit.RateWriter(lambda: psycopg2.connect(dsn), step, rows, rate)


def commit_ms(event: Any) -> int | None:
    """A probe change's commit time: its source's ts_ms."""
    return int(event.source.ts_ms) if event.source.ts_ms else None


def one_run(
    endpoints: Any, rows: int, rate: int, load_s: float, chunk: int, tmp: Path
) -> dict[str, float]:
    from bizevents.capture.config import CaptureConfig
    from bizevents.capture.postgres.runner import PostgresCapture

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
    runner, stats, thread = kit.capture_thread(PostgresCapture, config, dsn, endpoints, slot, tmp)
    out: dict[str, float] = {}

    def incremental() -> float:
        return kit.incremental_rate(kafka, config, runner, thread, big, rows)

    try:
        t0 = time.perf_counter()
        thread.start()
        kit.wait_snapshot_done(stats, thread)
        out["initial rows/s"] = rows / (time.perf_counter() - t0)
        time.sleep(2)
        writer = pg_writer(dsn, big, probe, rows, rate)
        writer.start()
        time.sleep(1)
        idle_from = int(time.time() * 1000)
        time.sleep(load_s)
        idle_to = int(time.time() * 1000)
        writer.stop_event.set()
        writer.join()
        time.sleep(2)
        out["incremental idle rows/s"] = incremental()
        writer = pg_writer(dsn, big, probe, rows, rate)
        writer.start()
        time.sleep(1)
        during_from = int(time.time() * 1000)
        changes_start, started = writer.changes, time.perf_counter()
        out["incremental under load rows/s"] = incremental()
        during_to = int(time.time() * 1000)
        out["writer changes/s"] = (writer.changes - changes_start) / (time.perf_counter() - started)
        lat = kit.stopped_probe(writer, endpoints, f"{config.prefix}.{probe}", commit_ms)
        out |= kit.probe_figures(lat, (idle_from, idle_to), (during_from, during_to), "idle")
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
    parser = kit.snapshot_parser(__doc__, rows=1_000_000, rate=5_000, load_s=10.0)
    parser.add_argument("--stack-json", type=Path, help="endpoints of a running stack")
    args = parser.parse_args()

    with kit.bench_stack("bench-snapshot-", args.stack_json) as (endpoints, tmp, _):
        runs = kit.each_run(
            args.runs,
            lambda n: one_run(
                endpoints, args.rows, args.rate, args.load_seconds, args.chunk_rows, tmp / f"s{n}"
            ),
        )
        kit.print_runs(runs, f"{args.rows:,} rows, {args.runs} runs, median (min-max):")
        idle = statistics.median(r["incremental idle rows/s"] for r in runs)
        print(f"  incremental idle / target {TARGET_IDLE:,}: {idle / TARGET_IDLE:.2f}")
        ratio = statistics.median(r["stream p99 during ms"] / r["stream p99 idle ms"] for r in runs)
        print(f"  stream p99 during / idle (target <= 2): {ratio:.2f}")


if __name__ == "__main__":
    main()
