"""Capture throughput: MariaDB binlog rows into Kafka, acknowledged, beside the same
binlog read and decoded with no Kafka at all.

Each run writes N row changes (inserts, then updates of the same rows, in transactions
of ``--tx-rows`` rows) into a fresh table, then:

- *read + decode*: ``pymysqlreplication`` reads the run's binlog range and decodes
  every row (the library alone: what any Python binlog reader pays);
- *capture*: ``MysqlCapture`` resumes from the run's start position (stored in its
  offsets topic, as after a restart) and is timed until the position it stores
  covers the last change, i.e. Kafka acknowledged every event.

Prints each run, then the median of the runs with their spread (min-max), and the
ratios to the target (25,000 rows/s) and to read + decode.

    .venv/bin/python bench/capture_mysql.py                 # private stack, 3 runs
    .venv/bin/python bench/capture_mysql.py --changes 100000 --runs 5
    .venv/bin/python bench/capture_mysql.py --broker kafka   # on Apache Kafka (default tansu)
    .venv/bin/python bench/capture_mysql.py --broker both    # a run on each alternately, 3 each
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import kit

TARGET = 25_000
RATIO_TARGET = 0.8  # of the binlog read and decoded alone (DESIGN.md)


def generate(dsn: str, table: str, changes: int, tx_rows: int) -> None:
    from bizevents.capture.mariadb import queries as my

    conn = my.connect(dsn, autocommit=False)
    inserts = changes // 2
    now = datetime.now(UTC).replace(tzinfo=None)
    with conn.cursor() as cur:
        for start in range(0, inserts, tx_rows):
            ids = range(start, min(start + tx_rows, inserts))
            # all placeholders: PyMySQL sends one multi-row INSERT per transaction
            cur.executemany(
                f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s)",
                [(i, f"customer {i}", i % 97, f"{i * 1.25:.2f}", now, i % 2) for i in ids],
            )
            conn.commit()
        for start in range(0, changes - inserts, tx_rows):
            cur.execute(
                f"UPDATE {table} SET qty = qty + 1, price = price + 0.01 "
                "WHERE id >= %s AND id < %s",
                (start, start + tx_rows),
            )
            conn.commit()
    conn.close()


def read_decode(dsn: str, start_gtid: str, rows_wanted: int) -> float:
    """Seconds the library takes to read and decode ``rows_wanted`` rows from the GTID."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

    from bizevents.capture.mariadb import queries as my

    stream = BinLogStreamReader(
        connection_settings=my.connection_settings(dsn),
        server_id=990_001,
        auto_position=start_gtid,
        is_mariadb=True,
        blocking=True,
        only_events=[WriteRowsEvent, UpdateRowsEvent],
    )
    seen = 0
    t0 = time.perf_counter()
    try:
        for event in stream:
            seen += len(event.rows)
            if seen >= rows_wanted:
                break
    finally:
        stream.close()
    return time.perf_counter() - t0


def one_run(
    endpoints: Any,
    dsn: str,
    changes: int,
    tx_rows: int,
    tmp: Path,
    profile: Path | None = None,
    transaction_metadata: bool = True,
) -> tuple[float, float]:
    from confluent_kafka import Producer
    from pydantic import SecretStr

    from bizevents.capture.config import CaptureConfig
    from bizevents.capture.core.state import StateStore
    from bizevents.capture.mariadb import queries as my
    from bizevents.capture.mariadb.capture import MysqlCapture
    from bizevents.capture.metrics import CaptureStats
    from bizevents.capture.postgres.runner import CaptureEndpoints

    tag = uuid.uuid4().hex[:8]
    database = f"bench_{tag}"
    admin = my.connect(dsn)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
        cur.execute(
            f"CREATE TABLE {database}.orders (id BIGINT PRIMARY KEY, name VARCHAR(40), "
            "qty INT, price DECIMAL(12,2), at DATETIME(6), flag BOOL)"
        )
    try:
        start = my.master_position(admin)
        t0 = time.perf_counter()
        generate(dsn, f"{database}.orders", changes, tx_rows)
        end = my.master_position(admin)
        print(f"  generated {changes:,} changes in {time.perf_counter() - t0:.1f}s")
        ref_s = read_decode(dsn, start.gtid or "", changes)

        config = CaptureConfig(
            server=f"bench{tag}",
            dsn=SecretStr(dsn),
            tables=(f"{database}.orders",),
            partitions=3,
            state_dir=tmp / "state",
            transaction_metadata=transaction_metadata,
        )
        kafka = {"bootstrap.servers": endpoints.bootstrap_servers}
        # Resume from the run's start, as a restarted capture would.
        producer = Producer(kafka)
        from confluent_kafka.admin import AdminClient

        from bizevents.plumbing.kafka import ensure_topics

        ensure_topics(AdminClient(kafka), [config.offsets_topic_name], 1)
        store = StateStore(kafka, config.offsets_topic_name, config.server)
        store.write(
            producer,
            store.position_key(),
            {"file": start.file, "pos": start.pos, "gtid": start.gtid, "snapshot_done": True},
        )
        producer.flush(10)
        stats = CaptureStats(config.server, "binlog")
        runner = MysqlCapture(
            config,
            CaptureEndpoints(dsn, kafka, {"url": endpoints.registry_url}, tmp / "state"),
            stats=stats,
        )

        def run() -> None:
            if profile is None:
                runner.run()
                return
            import cProfile

            profiler = cProfile.Profile()
            profiler.runcall(runner.run)
            profiler.dump_stats(str(profile))

        thread = threading.Thread(target=run, daemon=True)
        t0 = time.perf_counter()
        thread.start()
        while thread.is_alive():
            at = runner.position
            if at is not None and (at.file, at.pos) >= (end.file, end.pos):
                break
            time.sleep(0.01)
        cap_s = time.perf_counter() - t0
        runner.request_stop()
        thread.join(60)
        at = runner.position
        if at is None or (at.file, at.pos) < (end.file, end.pos):
            raise SystemExit("capture stopped before Kafka acknowledged every change")
        return changes / cap_s, changes / ref_s
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {database}")
        admin.close()


def main() -> None:
    parser = kit.capture_parser(__doc__ or "")
    parser.add_argument("--runs", type=int, default=3)
    kit.broker_option(parser)
    args = parser.parse_args()
    if args.broker == "both":
        kit.both_brokers(
            {
                "read + decode rows/s": None,
                "capture rows/s": kit.Target(TARGET),
                "capture / read + decode": kit.Target(RATIO_TARGET),
            },
            runs=args.runs,
            child_args=("--runs", "1"),
        )
        return

    from bizevents.devstack import DevStack

    tmp = Path(tempfile.mkdtemp(prefix="bench-capture-mysql-"))
    stack = DevStack(tmp / "stack", kit.dev_settings(args.broker, mysql=True))
    try:
        stack.up()
        endpoints = stack.endpoints()
        assert endpoints.mysql_dsn is not None
        captured: list[float] = []
        decoded: list[float] = []
        for n in range(args.runs):
            print(f"run {n + 1}/{args.runs}")
            cap, ref = one_run(
                endpoints,
                endpoints.mysql_dsn,
                args.changes,
                args.tx_rows,
                tmp,
                args.profile,
                not args.no_transaction_metadata,
            )
            print(f"  read + decode {ref:>10,.0f} rows/s   capture → Kafka {cap:>10,.0f} rows/s")
            captured.append(cap)
            decoded.append(ref)
        cap_m, ref_m = statistics.median(captured), statistics.median(decoded)
        print(
            f"median of {args.runs} runs, {args.changes:,} changes "
            f"in transactions of {args.tx_rows:,}:"
        )
        print(
            f"binlog read + decode, no Kafka:   {ref_m:>10,.0f} rows/s "
            f"(spread {min(decoded):,.0f}-{max(decoded):,.0f})"
        )
        print(
            f"capture → Kafka, acknowledged:    {cap_m:>10,.0f} rows/s "
            f"(spread {min(captured):,.0f}-{max(captured):,.0f})"
        )
        print(f"ratio to target ({TARGET:,}/s):     {cap_m / TARGET:>10.2f}")
        print(f"ratio to read + decode:           {cap_m / ref_m:>10.2f}")
        kit.report_figures(
            {
                "read + decode rows/s": ref_m,
                "capture rows/s": cap_m,
                "capture / read + decode": cap_m / ref_m,
            }
        )
        metadata = "off" if args.no_transaction_metadata else "on"
        print(f"transaction metadata:             {metadata:>10}")
    finally:
        stack.down(purge=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
