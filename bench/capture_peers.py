"""bizevents capture beside Debezium's embedded engine on the same machine and the same
PostgreSQL: streaming changes/s and CPU-seconds per 100,000 changes, and initial snapshot
rows/s, median of the runs with their spread, and the ratios bizevents / Debezium.

Streaming: N row changes (inserts, then updates of the same rows, in transactions of
``--tx-rows`` rows) are written after two pgoutput slots of one publication were created,
so both read exactly the same WAL. bizevents capture drains its slot into Kafka (Avro,
every event acknowledged); Debezium 3.6.1's embedded engine drains the other into
/dev/null (plain JSON, ``schemas.enable=false``, no broker: the cheaper path for it).
Both write transaction metadata. bizevents' time runs from its start to the last
acknowledgement, its CPU is this process's (every thread: the capture loop and
librdkafka's; the broker's is not counted); Debezium's time and CPU run from its first
change to its last (with ``--warm-up`` from its middle change: the JIT's warm-up left
out), its CPU the JVM's whole process (every thread, JIT and GC too, as /proc/<pid>/stat
counts it), its start-up not counted.

Snapshot: a table of ``--snapshot-rows`` rows; bizevents from its start to the snapshot
recorded as done in Kafka, Debezium from its first row to its last.

MariaDB (``--database mariadb``): the same workload and figures against Debezium's
MariaDB connector 3.5.0 (3.6.1 is not served by the package registry this project
reaches). Neither capture takes a start position from outside, so each first runs once
on the table with one row (its snapshot, which stores where the binlog stood: bizevents
in its offsets topic, Debezium in an offsets file and a schema history file); the
changes are written; each then resumes from its own stored position and drains them.

Run it on a quiet machine (``uptime``): the two share the cores with nothing else.

    scripts/setup-debezium  # once
    .venv/bin/python bench/capture_peers.py                       # private stack, 3 runs
    .venv/bin/python bench/capture_peers.py --changes 200000 --runs 5 --warm-up
    .venv/bin/python bench/capture_peers.py --database mariadb
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2

from tests.peers import harness

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import kit  # noqa: E402

TARGET_RATIO = 1.5  # bizevents at least 1.5 times Debezium (issue 39)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Figure:
    per_s: float  # changes (or rows) per wall-clock second
    cpu_per_100k: float  # CPU seconds per 100,000 changes (or rows)


def run_bizevents(
    endpoints: Any,
    tmp: Path,
    table: str,
    slot: str,
    pub: str,
    snapshot: bool,
    done: Callable[[Any], bool],
) -> tuple[float, float]:
    """Wall and CPU seconds of a bizevents capture run until ``done(stats)``."""
    from bizevents.capture.config import CaptureConfig
    from bizevents.capture.metrics import CaptureStats
    from bizevents.capture.postgres.runner import CaptureEndpoints, PostgresCapture

    server = f"peer{uuid.uuid4().hex[:8]}"
    config = CaptureConfig(
        server=server,
        tables=(table,),
        slot=slot,
        publication=pub,
        partitions=3,
        snapshot="initial" if snapshot else "never",  # a slot made beforehand: "never"
        heartbeat_interval_s=1.0,
    )
    stats = CaptureStats(server, slot)
    runner = PostgresCapture(
        config,
        CaptureEndpoints(
            endpoints.postgres_dsn,
            {"bootstrap.servers": endpoints.bootstrap_servers},
            {"url": endpoints.registry_url},
            tmp / server,
        ),
        stats=stats,
    )
    failed: list[BaseException] = []

    def run() -> None:
        try:
            runner.run()
        except BaseException as exc:  # reported below
            failed.append(exc)

    cpu0, t0 = cpu_seconds(), time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while not done(stats) and thread.is_alive():
        time.sleep(0.01)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    runner.request_stop()
    thread.join(60)
    if not done(stats):
        sys.exit(f"bizevents capture stopped early: {failed[0] if failed else 'no reason'}")
    return wall, cpu


def run_debezium(
    endpoints: Any,
    tmp: Path,
    table: str,
    slot: str,
    pub: str,
    count: int,
    snapshot: bool,
    warm_up: bool,
) -> Figure:
    """Debezium's changes/s and CPU-s per 100,000 from its first change (or, with
    ``warm_up``, its ``count // 2``-th: the JIT warmed up) to its ``count``-th."""
    server = f"dbz{uuid.uuid4().hex[:8]}"
    props = harness.postgres_properties(
        endpoints.postgres_dsn,
        server,
        slot,
        pub,
        [table],
        **{
            "snapshot.mode": "initial" if snapshot else "no_data",
            "publication.autocreate.mode": "disabled",
            "slot.drop.on.stop": False,  # dropped with the others below
            "converter.schemas.enable": False,
            "max.batch.size": 8192,
            "max.queue.size": 32768,
        },
    )
    warm = count // 2 if warm_up else 1
    run = harness.start(
        props, tmp / server, max_changes=count, from_change=warm, out=Path("/dev/null")
    )
    try:
        summary = run.finish(timeout=1800)
    finally:
        run.stop()
    if summary["changes"] < count:
        sys.exit(f"Debezium stopped after {summary['changes']} of {count}: {run.tail()}")
    wall = (summary["last_ns"] - summary["first_ns"]) / 1e9
    cpu = (summary["last_cpu_ns"] - summary["first_cpu_ns"]) / 1e9
    return Figure((count - warm) / wall, cpu / (count - warm) * 100_000)


def one_run(endpoints: Any, tmp: Path, args: argparse.Namespace) -> dict[str, Figure]:
    from bizevents.capture.postgres.messages import parse_lsn

    tag = uuid.uuid4().hex[:8]
    table, pub = f"public.peers_{tag}", f"peers_{tag}"
    snap_table = f"public.peers_snap_{tag}"
    ours, theirs = f"peers_{tag}", f"peers_dbz_{tag}"
    snap_ours, snap_theirs = f"peers_snap_{tag}", f"peers_snap_dbz_{tag}"
    dsn = endpoints.postgres_dsn
    admin = psycopg2.connect(dsn)
    admin.autocommit = True
    columns = (
        "(id bigint PRIMARY KEY, name text, qty int, price numeric(12,2), at timestamptz, "
        "flag boolean)"
    )
    try:
        with admin.cursor() as cur:
            for t in (table, snap_table):
                cur.execute(f"CREATE TABLE {t} {columns}")
            cur.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
            cur.execute(f"CREATE PUBLICATION {pub}_snap FOR TABLE {snap_table}")
        # the streaming slots exist before the changes: no snapshot has a row to read
        with admin.cursor() as cur:
            for s in (ours, theirs):
                cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (s,))
        kit.generate_pg(dsn, table, args.changes, args.tx_rows)
        with admin.cursor() as cur:
            cur.execute(
                f"INSERT INTO {snap_table} SELECT g, 'customer ' || g, g % 97, g * 1.25, "
                f"now(), g % 2 = 0 FROM generate_series(1, {int(args.snapshot_rows)}) g"
            )
            cur.execute("SELECT pg_current_wal_insert_lsn()::text")
            end_lsn = parse_lsn(cur.fetchone()[0])
        figures: dict[str, Figure] = {}

        def figure(count: int, wall: float, cpu: float) -> Figure:
            return Figure(count / wall, cpu / count * 100_000)

        wall, cpu = run_bizevents(
            endpoints, tmp, table, ours, pub, False, lambda s: s.acknowledged_lsn >= end_lsn
        )
        figures["bizevents stream"] = figure(args.changes, wall, cpu)
        figures["debezium stream"] = run_debezium(
            endpoints, tmp, table, theirs, pub, args.changes, False, args.warm_up
        )
        wall, cpu = run_bizevents(
            endpoints, tmp, snap_table, snap_ours, f"{pub}_snap", True, lambda s: s.snapshot_done
        )
        figures["bizevents snapshot"] = figure(args.snapshot_rows, wall, cpu)
        figures["debezium snapshot"] = run_debezium(
            endpoints, tmp, snap_table, snap_theirs, f"{pub}_snap", args.snapshot_rows, True, False
        )
        return figures
    finally:
        time.sleep(1)  # the slots' walsenders end
        with admin.cursor() as cur:
            cur.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name LIKE %s AND active_pid IS NULL",
                (f"peers_%{tag}",),
            )
            for p in (pub, f"{pub}_snap"):
                cur.execute(f"DROP PUBLICATION IF EXISTS {p}")
            for t in (table, snap_table):
                cur.execute(f"DROP TABLE IF EXISTS {t}")
        admin.close()


# -- MariaDB ------------------------------------------------------------------------------


def mariadb_generate(conn: Any, table: str, changes: int, tx_rows: int) -> None:
    inserts = changes // 2
    with conn.cursor() as cur:
        for start in range(1, inserts + 1, tx_rows):
            stop = min(start + tx_rows - 1, inserts)
            cur.execute(
                f"INSERT INTO {table} SELECT seq, CONCAT('customer ', seq), seq % 97, "
                f"seq * 1.25, NOW(6), seq % 2 = 0 FROM seq_{start}_to_{stop}"
            )
            conn.commit()
        for start in range(1, changes - inserts + 1, tx_rows):
            stop = min(start + tx_rows - 1, changes - inserts)
            cur.execute(
                f"UPDATE {table} SET qty = qty + 1, price = price + 0.01 "
                "WHERE id BETWEEN %s AND %s",
                (start, stop),
            )
            conn.commit()


def mariadb_bizevents(
    endpoints: Any, tmp: Path, server: str, table: str, done: Callable[[Any], bool]
) -> tuple[float, float]:
    """Wall and CPU seconds of a bizevents MariaDB capture run (resuming from the
    position ``server``'s offsets topic holds) until ``done(runner)``."""
    from bizevents.capture.config import CaptureConfig
    from bizevents.capture.mariadb.capture import MysqlCapture
    from bizevents.capture.metrics import CaptureStats
    from bizevents.capture.postgres.runner import CaptureEndpoints

    config = CaptureConfig(server=server, dsn=endpoints.mysql_dsn, tables=(table,), partitions=3)
    runner = MysqlCapture(
        config,
        CaptureEndpoints(
            endpoints.mysql_dsn,
            {"bootstrap.servers": endpoints.bootstrap_servers},
            {"url": endpoints.registry_url},
            tmp / server,
        ),
        stats=CaptureStats(server, "binlog"),
    )
    failed: list[BaseException] = []

    def run() -> None:
        try:
            runner.run()
        except BaseException as exc:  # reported below
            failed.append(exc)

    cpu0, t0 = cpu_seconds(), time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while not done(runner) and thread.is_alive():
        time.sleep(0.01)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    runner.request_stop()
    thread.join(60)
    if not done(runner):
        sys.exit(f"bizevents capture stopped early: {failed[0] if failed else 'no reason'}")
    return wall, cpu


def mariadb_debezium(
    endpoints: Any, tmp: Path, server: str, database: str, table: str, count: int, warm_up: bool
) -> Figure:
    """Debezium's MariaDB connector resuming from its offsets file (or snapshotting
    when there is none), as :func:`run_debezium` measures it."""
    state = tmp / f"{server}-state"
    state.mkdir(exist_ok=True)
    props = harness.mariadb_properties(
        endpoints.mysql_dsn,
        server,
        database,
        [table],
        6400 + zlib.crc32(server.encode()) % 1000,  # a replica id of its own
        **{
            "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
            "offset.storage.file.filename": state / "offsets.dat",
            "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
            "schema.history.internal.file.filename": state / "history.dat",
            "converter.schemas.enable": False,
            "max.batch.size": 8192,
            "max.queue.size": 32768,
        },
    )
    warm = count // 2 if warm_up else 1
    run = harness.start(
        props,
        tmp / f"{server}-{count}",
        max_changes=count,
        from_change=warm,
        out=Path("/dev/null"),
        tools=harness.MARIADB_TOOLS,
    )
    try:
        summary = run.finish(timeout=1800)
    finally:
        run.stop()
    if summary["changes"] < count:
        sys.exit(f"Debezium stopped after {summary['changes']} of {count}: {run.tail()}")
    wall = max((summary["last_ns"] - summary["first_ns"]) / 1e9, 1e-9)
    cpu = (summary["last_cpu_ns"] - summary["first_cpu_ns"]) / 1e9
    return Figure((count - warm) / wall, cpu / max(count - warm, 1) * 100_000)


def one_run_mariadb(endpoints: Any, tmp: Path, args: argparse.Namespace) -> dict[str, Figure]:
    from bizevents.capture.mariadb import queries as my

    tag = uuid.uuid4().hex[:8]
    database = f"peers_{tag}"
    table, snap_table = f"{database}.t", f"{database}.snap"
    conn = my.connect(endpoints.mysql_dsn, autocommit=False)
    columns = (
        "(id BIGINT PRIMARY KEY, name VARCHAR(64), qty INT, price DECIMAL(12,2), "
        "at DATETIME(6), flag BOOLEAN)"
    )
    ours, theirs = f"peer{tag}", f"dbz{tag}"
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {database}")
            cur.execute(f"USE {database}")  # the seq_<a>_to_<b> tables live in every database
            for t in (table, snap_table):
                cur.execute(f"CREATE TABLE {t} {columns}")
            # one row: each first run snapshots it and stores where the binlog stood
            cur.execute(f"INSERT INTO {table} VALUES (0, 'seed', 0, 0, NOW(6), 0)")
        conn.commit()
        mariadb_bizevents(endpoints, tmp, ours, table, lambda r: r.stats.snapshot_done)
        mariadb_debezium(endpoints, tmp, theirs, database, "t", 1, False)
        mariadb_generate(conn, table, args.changes, args.tx_rows)
        with conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {snap_table} SELECT seq, CONCAT('customer ', seq), seq % 97, "
                f"seq * 1.25, NOW(6), seq % 2 = 0 FROM seq_1_to_{int(args.snapshot_rows)}"
            )
        conn.commit()
        end = my.master_position(conn)
        figures: dict[str, Figure] = {}

        def figure(count: int, wall: float, cpu: float) -> Figure:
            return Figure(count / wall, cpu / count * 100_000)

        def drained(runner: Any) -> bool:
            at = runner.position
            return at is not None and (at.file, at.pos) >= (end.file, end.pos)

        wall, cpu = mariadb_bizevents(endpoints, tmp, ours, table, drained)
        figures["bizevents stream"] = figure(args.changes, wall, cpu)
        figures["debezium stream"] = mariadb_debezium(
            endpoints, tmp, theirs, database, "t", args.changes, args.warm_up
        )
        wall, cpu = mariadb_bizevents(
            endpoints, tmp, f"{ours}s", snap_table, lambda r: r.stats.snapshot_done
        )
        figures["bizevents snapshot"] = figure(args.snapshot_rows, wall, cpu)
        figures["debezium snapshot"] = mariadb_debezium(
            endpoints, tmp, f"{theirs}s", database, "snap", args.snapshot_rows, False
        )
        return figures
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {database}")
        conn.commit()
        conn.close()


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):>10,.1f} ({min(values):,.1f}-{max(values):,.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--snapshot-rows", type=int, default=100_000)
    parser.add_argument("--tx-rows", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--warm-up",
        action="store_true",
        help="time Debezium's stream from its middle change on (the JIT warmed up)",
    )
    parser.add_argument("--database", choices=("postgresql", "mariadb"), default="postgresql")
    parser.add_argument("--stack-json", type=Path, help="endpoints of a running stack")
    args = parser.parse_args()
    mariadb = args.database == "mariadb"
    reason = harness.missing(harness.MARIADB_TOOLS if mariadb else harness.TOOLS)
    if reason is not None:
        sys.exit(reason)

    with kit.bench_stack("bench-peers-", args.stack_json, mysql=mariadb) as (endpoints, tmp, _):
        runs: list[dict[str, Figure]] = []
        for i in range(args.runs):
            runs.append((one_run_mariadb if mariadb else one_run)(endpoints, tmp, args))
            line = "  ".join(
                f"{name}: {f.per_s:,.0f}/s {f.cpu_per_100k:.2f} cpu-s"
                for name, f in runs[-1].items()
            )
            print(f"run {i + 1}: {line}", flush=True)
        print(
            f"\n{'MariaDB' if mariadb else 'PostgreSQL'}, {args.changes:,} changes, "
            f"{args.snapshot_rows:,} snapshot rows, "
            f"median of {args.runs} (min-max):"
        )
        for name in runs[0]:
            print(f"{name + ' /s':<28}{spread([r[name].per_s for r in runs])}")
            print(f"{name + ' cpu-s/100k':<28}{spread([r[name].cpu_per_100k for r in runs])}")
        per_cpu = [
            r["debezium stream"].cpu_per_100k / r["bizevents stream"].cpu_per_100k for r in runs
        ]
        stream = [r["bizevents stream"].per_s / r["debezium stream"].per_s for r in runs]
        snap = [r["bizevents snapshot"].per_s / r["debezium snapshot"].per_s for r in runs]
        print(f"\nbizevents / Debezium (target {TARGET_RATIO}):")
        print(f"{'stream changes per cpu-s':<28}{spread(per_cpu)}")
        print(f"{'stream changes/s':<28}{spread(stream)}")
        print(f"{'snapshot rows/s':<28}{spread(snap)}")


if __name__ == "__main__":
    main()
