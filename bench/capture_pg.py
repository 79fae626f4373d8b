"""Capture throughput: PostgreSQL changes into Kafka, acknowledged, against pg_recvlogical.

Generates N row changes (inserts, then updates of the same rows, in transactions of
``--tx-rows`` rows) in a fresh table, after creating two pgoutput slots: one that
``bizevents capture`` drains into Kafka, one that ``pg_recvlogical`` drains into
/dev/null. Both read exactly the same WAL. Prints changes/s of each and the ratios to
the target (25,000 changes/s) and to pg_recvlogical (target ≥ 0.6).

    .venv/bin/python bench/capture_pg.py            # starts a private stack on free ports
    .venv/bin/python bench/capture_pg.py --changes 200000 --stack-json endpoints.json
    .venv/bin/python bench/capture_pg.py --broker kafka      # on Apache Kafka (default tansu)
    .venv/bin/python bench/capture_pg.py --broker both       # tansu and kafka alternately
"""

from __future__ import annotations

import glob
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import kit  # noqa: E402

TARGET = 25_000
RATIO_TARGET = 0.6  # of pg_recvlogical (DESIGN.md)


def pg_recvlogical() -> str:
    found = shutil.which("pg_recvlogical") or next(
        iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_recvlogical"), reverse=True)), None
    )
    if not found:
        sys.exit("pg_recvlogical not found (Debian: postgresql-client)")
    return found


def cpu_seconds() -> float:
    """This process's CPU time (all threads: the capture's and its Kafka client's)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = kit.capture_parser(__doc__)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--stack-json", type=Path, help="endpoints of a running stack")
    parser.add_argument(
        "--runs", type=int, default=3, help="with a choice of both: runs with each choice"
    )
    kit.broker_option(parser)
    args = parser.parse_args()
    if args.broker == "both":
        if args.stack_json or args.profile:
            parser.error("--broker both runs on private stacks, without --profile")
        kit.both_brokers(
            {
                "pg_recvlogical changes/s": None,
                "capture changes/s": kit.Target(TARGET),
                "capture / pg_recvlogical": kit.Target(RATIO_TARGET),
                "capture CPU-s per 100k": None,
            },
            runs=args.runs,
        )
        return

    from bizevents.capture.config import CaptureConfig
    from bizevents.capture.metrics import CaptureStats
    from bizevents.capture.postgres.runner import CaptureEndpoints, PostgresCapture

    with kit.bench_stack("bench-capture-", args.stack_json, broker=args.broker) as (
        endpoints,
        tmp,
        _,
    ):
        tag = uuid.uuid4().hex[:8]
        table = f"public.bench_{tag}"
        slot, ref_slot, pub = f"bench_{tag}", f"bench_ref_{tag}", f"bench_{tag}"
        dsn = endpoints.postgres_dsn
        admin = psycopg2.connect(dsn)
        admin.autocommit = True
        try:
            with admin.cursor() as cur:
                cur.execute(
                    f"CREATE TABLE {table} (id bigint PRIMARY KEY, name text, qty int, "
                    "price numeric(12,2), at timestamptz, flag boolean)"
                )
                cur.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
                for s in (slot, ref_slot):
                    cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (s,))
            t0 = time.perf_counter()
            kit.generate_pg(dsn, table, args.changes, args.tx_rows)
            with admin.cursor() as cur:
                cur.execute("SELECT pg_current_wal_insert_lsn()::text")
                end_lsn_text = cur.fetchone()[0]
            print(f"generated {args.changes:,} changes in {time.perf_counter() - t0:.1f}s")
            from bizevents.capture.postgres.messages import parse_lsn

            end_lsn = parse_lsn(end_lsn_text)

            # Reference: pg_recvlogical drains the same WAL into /dev/null.
            t0 = time.perf_counter()
            subprocess.run(
                [
                    pg_recvlogical(), "-d", dsn, "--slot", ref_slot, "--start", "--no-loop",
                    "-o", "proto_version=1", "-o", f"publication_names={pub}",
                    "-E", end_lsn_text, "-f", "/dev/null",
                ],
                check=True,
                timeout=600,
            )  # fmt: skip
            ref_s = time.perf_counter() - t0

            config = CaptureConfig(
                server=f"bench{tag}",
                tables=(table,),
                slot=slot,
                publication=pub,
                partitions=args.partitions,
                snapshot="never",
                state_dir=tmp / "state",
                heartbeat_interval_s=1.0,
                transaction_metadata=not args.no_transaction_metadata,
            )
            stats = CaptureStats(config.server, slot)
            runner = PostgresCapture(
                config,
                CaptureEndpoints(
                    dsn,
                    {"bootstrap.servers": endpoints.bootstrap_servers},
                    {"url": endpoints.registry_url},
                    tmp / "state",
                ),
                stats=stats,
            )
            profiler = None
            if args.profile:
                import cProfile

                profiler = cProfile.Profile()

            def run() -> None:
                if profiler is not None:
                    profiler.enable()
                runner.run()
                if profiler is not None:
                    profiler.disable()

            cpu0 = cpu_seconds()
            t0 = time.perf_counter()
            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            while stats.acknowledged_lsn < end_lsn and thread.is_alive():
                time.sleep(0.02)
            cap_s = time.perf_counter() - t0
            cap_cpu = cpu_seconds() - cpu0
            runner.request_stop()
            thread.join(60)
            if profiler is not None:
                profiler.dump_stats(str(args.profile))
            if stats.acknowledged_lsn < end_lsn:
                sys.exit("capture stopped before acknowledging every change")

            cap_rate = args.changes / cap_s
            ref_rate = args.changes / ref_s
            print(
                f"pg_recvlogical (pgoutput → /dev/null): {ref_rate:>10,.0f} changes/s "
                f"({ref_s:.2f}s)"
            )
            print(
                f"capture → Kafka, acknowledged:        {cap_rate:>10,.0f} changes/s ({cap_s:.2f}s)"
            )
            print(
                f"capture CPU-seconds per 100,000 changes: {cap_cpu * 100_000 / args.changes:>6.2f}"
            )
            metadata = "off" if args.no_transaction_metadata else "on"
            print(f"transaction metadata:                {metadata:>10}")
            print(f"ratio to target ({TARGET:,}/s):      {cap_rate / TARGET:>10.2f}")
            print(f"ratio to pg_recvlogical:             {cap_rate / ref_rate:>10.2f}")
            kit.report_figures(
                {
                    "pg_recvlogical changes/s": ref_rate,
                    "capture changes/s": cap_rate,
                    "capture / pg_recvlogical": cap_rate / ref_rate,
                    "capture CPU-s per 100k": cap_cpu * 100_000 / args.changes,
                }
            )
        finally:
            with admin.cursor() as cur:
                for s in (slot, ref_slot):
                    cur.execute(
                        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE slot_name = %s AND active_pid IS NULL",
                        (s,),
                    )
                cur.execute(f"DROP PUBLICATION IF EXISTS {pub}")
                cur.execute(f"DROP TABLE IF EXISTS {table}")
            admin.close()
            os.environ.pop("_", None)


if __name__ == "__main__":
    main()
