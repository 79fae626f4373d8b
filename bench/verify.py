"""Verify's speed: rows of a captured table compared with its technical topic per second.

Fills a table of ``--rows`` rows, captures it (initial snapshot, then a round of updates
streamed), then times ``--runs`` verifications of it (topic read and reduced to its
latest state per key, table read in chunks, both through the canonical encoding) and
prints rows verified/s per run and their median (min-max). ``--spark local[2]`` times
``verify --spark`` instead (bizevents/replay/verify.py, on that master).

    .venv/bin/python bench/verify.py                      # a private stack on free ports
    .venv/bin/python bench/verify.py --rows 200000 --stack-json endpoints.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import kit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chunk-rows", type=int, default=5_000)
    parser.add_argument("--stack-json", type=Path, help="endpoints of a running stack")
    parser.add_argument("--spark", metavar="MASTER", help="time verify --spark on MASTER")
    args = parser.parse_args()

    from confluent_kafka.schema_registry import SchemaRegistryClient

    from bizevents.capture.config import CaptureConfig
    from bizevents.capture.metrics import CaptureStats
    from bizevents.capture.postgres import queries as pg
    from bizevents.capture.postgres.codec import TableCodec
    from bizevents.capture.postgres.runner import CaptureEndpoints, PostgresCapture
    from bizevents.capture.postgres.types import PgTypeMapper
    from bizevents.capture.verify import Report, compare, topic_state
    from bizevents.capture.verifytables import PgTable

    with kit.bench_stack("bench-verify-", args.stack_json) as (endpoints, tmp, _):
        tag = uuid.uuid4().hex[:8]
        table = f"public.verify_{tag}"
        dsn = endpoints.postgres_dsn
        kafka = {"bootstrap.servers": endpoints.bootstrap_servers}
        admin = psycopg2.connect(dsn)
        admin.autocommit = True
        config = CaptureConfig(
            server=f"verify{tag}", tables=(table,), slot=f"bench_v_{tag}", partitions=3
        )
        try:
            with admin.cursor() as cur:
                cur.execute(
                    f"CREATE TABLE {table} (id bigint PRIMARY KEY, name text, qty int, "
                    "price numeric(12,2), at timestamptz, flag boolean)"
                )
                cur.execute(
                    f"INSERT INTO {table} SELECT g, 'customer ' || g, g % 97, g * 1.25, now(), "
                    f"g % 2 = 0 FROM generate_series(1, {args.rows}) g"
                )
            stats = CaptureStats(config.server, config.slot_name)
            runner = PostgresCapture(
                config,
                CaptureEndpoints(dsn, kafka, {"url": endpoints.registry_url}, tmp),
                stats=stats,
            )
            thread = threading.Thread(target=runner.run, daemon=True)
            thread.start()
            while not stats.snapshot_done:
                time.sleep(0.05)
            with admin.cursor() as cur:
                cur.execute(f"UPDATE {table} SET qty = qty + 1 WHERE id % 10 = 0")
                cur.execute("SELECT pg_current_wal_lsn()::text")
                from bizevents.capture.postgres.messages import parse_lsn

                end = parse_lsn(cur.fetchone()[0])
            while stats.acknowledged_lsn < end:
                time.sleep(0.05)
            runner.request_stop()
            thread.join(60)

            registry = SchemaRegistryClient({"url": endpoints.registry_url})
            side = pg.connect(dsn)
            (info,) = pg.describe_tables(side, [table])
            rates = []
            session = None
            if args.spark:
                from bizevents.replay.session import spark_session

                session = spark_session(args.spark, "bench-verify")
            for n in range(args.runs):
                if session is not None:
                    from bizevents.capture.verifyrun import CapturedTable
                    from bizevents.replay.verify import SparkVerify, verify_table

                    registry_conf = {"url": endpoints.registry_url}
                    job = SparkVerify(
                        kafka,
                        registry_conf,
                        CapturedTable(registry_conf, dsn, config, table),
                        table,
                        f"{config.prefix}.{table}",
                    )
                    t0 = time.perf_counter()
                    report = verify_table(session, job, args.chunk_rows, 200_000)
                    took = time.perf_counter() - t0
                    if not report.ok:
                        sys.exit(f"verify --spark found {len(report.differences)} differences")
                    rates.append(report.rows / took)
                    print(
                        f"run {n + 1}: {report.rows:,} rows ({report.records_read:,} records) "
                        f"verified with Spark ({args.spark}) in {took:.1f}s: "
                        f"{rates[-1]:,.0f} rows/s"
                    )
                    continue
                conn = pg.connect(dsn, autocommit=False)
                codec = TableCodec(
                    server=config.server,
                    database="",  # the source block is not compared
                    topic=f"{config.prefix}.{table}",
                    relation=info.relation,
                    key_names=info.key_names,
                    types=PgTypeMapper(),
                )
                t0 = time.perf_counter()
                reader = PgTable(
                    conn, info, codec, lambda i: str(registry.get_schema(i).schema_str)
                )
                state = topic_state(kafka, codec.topic, reader.decoder)
                read = state.read
                t1 = time.perf_counter()
                report = Report(table, codec.topic, records_read=read)
                compare(report, state, reader.chunks(args.chunk_rows))
                t2 = time.perf_counter()
                conn.close()
                if not report.ok:
                    shown = [(d.kind, d.key, d.topic_position) for d in report.differences[:5]]
                    sys.exit(f"verify found {len(report.differences)} differences: {shown}")
                rate = report.rows / (t2 - t0)
                rates.append(rate)
                print(
                    f"run {n + 1}: {report.rows:,} rows ({read:,} records) verified in "
                    f"{t2 - t0:.1f}s ({t1 - t0:.1f}s topic, {t2 - t1:.1f}s table): "
                    f"{rate:,.0f} rows/s"
                )
            side.close()
            print(
                f"rows verified/s, median of {args.runs}: {statistics.median(rates):,.0f} "
                f"({min(rates):,.0f}-{max(rates):,.0f})"
            )
        finally:
            with admin.cursor() as cur:
                cur.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s AND active_pid IS NULL",
                    (config.slot_name,),
                )
                cur.execute(f"DROP PUBLICATION IF EXISTS {config.publication_name}")
                cur.execute(f"DROP TABLE IF EXISTS {table}")
            admin.close()


if __name__ == "__main__":
    main()
