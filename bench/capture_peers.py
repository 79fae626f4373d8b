"""bizevents capture beside Debezium on the same machine and the same database
(PostgreSQL, or MariaDB with ``--database mariadb``): streaming changes/s and
CPU-seconds per 100,000 changes, and initial snapshot rows/s, median of the runs with
their spread, and the ratios bizevents / Debezium.

Debezium runs two ways (``--via``, both by default):

- ``embedded``: its embedded engine (tests/peers/harness.py) writing plain JSON
  (``schemas.enable=false``) to /dev/null, no broker: the cheapest path for it. Its time
  and CPU run from its first change to its last (with ``--warm-up`` from its middle
  change: the JIT's warm-up left out), its CPU the JVM's whole process (every thread,
  JIT and GC too), its start-up not counted.
- ``connect``: Kafka Connect standalone into the stack's Kafka, as a team runs it (plain
  JSON, one partition per topic). Its time runs from the first record in the table's
  topic to the last (its end offset polled every 50 ms), its CPU the JVM's whole process
  between those moments (/proc/<pid>/stat), its start-up not counted.

bizevents capture writes into the same Kafka (Avro, every event acknowledged); its time
runs from its start to the last acknowledgement, its CPU is this process's (every
thread: the capture loop and librdkafka's; the broker's is not counted). All write
transaction metadata.

Streaming: N row changes (inserts, then updates of the same rows, in transactions of
``--tx-rows`` rows). PostgreSQL: each reader's pgoutput slot of one publication exists
before the changes, so all read exactly the same WAL. MariaDB: no capture takes a start
position from outside, so each first runs once on the table with one row (its snapshot,
which stores where the binlog stood: bizevents in its offsets topic, Debezium in an
offsets file and a schema history file); the changes are written; each then resumes
from its own stored position and drains them.

Snapshot: a table of ``--snapshot-rows`` rows; bizevents from its start to the snapshot
recorded as done in Kafka, Debezium as above.

Debezium 3.6.1 on PostgreSQL; its MariaDB connector 3.5.0 (3.6.1 is not served by the
package registry this project reaches). Run it on a quiet machine (``uptime``).

    scripts/setup-debezium  # once
    .venv/bin/python bench/capture_peers.py                       # private stack, 3 runs
    .venv/bin/python bench/capture_peers.py --changes 200000 --runs 5 --warm-up
    .venv/bin/python bench/capture_peers.py --database mariadb --via connect
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2

from tests.peers import harness

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import kit  # noqa: E402

TARGET_RATIO = 1.5  # bizevents at least 1.5 times Debezium (issue 39)
COLUMNS = (
    "(id BIGINT PRIMARY KEY, name {text}, qty INT, price DECIMAL(12,2), at {time}, flag BOOLEAN)"
)
#: Debezium's batching as the embedded runs had it, the same through Connect
BATCHING = {"max.batch.size": "8192", "max.queue.size": "32768"}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu_seconds(pid: int) -> float:
    """Another process's CPU so far (all its threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Figure:
    per_s: float  # changes (or rows) per wall-clock second
    cpu_per_100k: float  # CPU seconds per 100,000 changes (or rows)


def figure(count: int, wall: float, cpu: float) -> Figure:
    return Figure(count / max(wall, 1e-9), cpu / max(count, 1) * 100_000)


def timed_capture(runner: Any, done: Callable[[], bool]) -> tuple[float, float]:
    """Wall and CPU seconds of a bizevents capture ``runner`` from its start to ``done()``."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            runner.run()
        except BaseException as exc:  # reported below
            failed.append(exc)

    cpu0, t0 = cpu_seconds(), time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while not done() and thread.is_alive():
        time.sleep(0.01)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    runner.request_stop()
    thread.join(60)
    if not done():
        sys.exit(f"bizevents capture stopped early: {failed[0] if failed else 'no reason'}")
    return wall, cpu


def embedded(props: dict[str, str], folder: Path, count: int, warm: int, tools: Path) -> Figure:
    """Debezium's embedded engine on ``props``: changes/s and CPU-s per 100,000 from its
    ``warm``-th change to its ``count``-th."""
    props = {**props, "converter.schemas.enable": "false"}
    run = harness.start(
        props,
        folder,
        max_changes=count,
        from_change=warm,
        out=Path("/dev/null"),
        tools=tools,
    )
    try:
        summary = run.finish(timeout=1800)
    finally:
        run.stop()
    if summary["changes"] < count:
        sys.exit(f"Debezium stopped after {summary['changes']} of {count}: {run.tail()}")
    wall = (summary["last_ns"] - summary["first_ns"]) / 1e9
    cpu = (summary["last_cpu_ns"] - summary["first_cpu_ns"]) / 1e9
    return figure(count - warm, wall, cpu)


class Counter:
    """Counts a topic's records as they arrive, read from its start (the broker's end
    offsets are not used: the dev stack's Tansu gave one less than the records it held)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
        self.topic = topic
        self.assigned = False
        self.n = 0

    def count(self) -> int:
        from confluent_kafka import TopicPartition

        if not self.assigned:
            meta = self.consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return 0
            self.consumer.assign([TopicPartition(self.topic, p, 0) for p in meta.partitions])
            self.assigned = True
        self.n += sum(m.error() is None for m in self.consumer.consume(10_000, timeout=0.05))
        return self.n

    def close(self) -> None:
        self.consumer.close()


@dataclass
class Job:
    """One Debezium run: its server (topic prefix), table and changes to wait for;
    ``warm``: the embedded engine's timed from that change on; Connect's: ``before``,
    the records its topic already held, and ``settle_s`` to wait (its offsets flushed)
    before it is stopped."""

    server: str
    table: str
    count: int
    snapshot: bool = False
    warm: int = 1
    before: int = 0
    settle_s: float = 0


def through_connect(peers: Any, props: dict[str, str], folder: Path, job: Job) -> Figure:
    """Debezium's connector on ``props`` in Kafka Connect standalone writing to the
    stack's Kafka: from the first record in the job's topic after those it held until
    ``job.count`` more."""
    endpoints, tools, count = peers.endpoints, peers.tools, job.count
    worker = harness.connect_worker_properties(
        endpoints.bootstrap_servers,
        folder,
        **{"key.converter.schemas.enable": "false", "value.converter.schemas.enable": "false"},
    )
    connector = harness.connect_connector_properties(props)
    counter = Counter(endpoints.bootstrap_servers, peers.topic(job.server, job.table))
    connect = harness.start_connect(worker, connector, folder, tools=tools)
    try:
        deadline = time.monotonic() + 1800
        first: tuple[float, float, int] | None = None
        while True:
            connect.check_alive()
            n = counter.count() - job.before
            now = time.perf_counter()
            if first is None and n > 0:
                first = (now, process_cpu_seconds(connect.process.pid), n)
            if n >= count and first is not None:
                cpu = process_cpu_seconds(connect.process.pid)
                time.sleep(job.settle_s)
                return figure(count - first[2], now - first[0], cpu - first[1])
            if time.monotonic() > deadline:
                sys.exit(f"Debezium through Connect: {n} of {count} records: {connect.tail()}")
    finally:
        connect.stop()
        counter.close()


def debezium(peers: Any, via: str, job: Job) -> Figure:
    """Debezium ``via`` the embedded engine or Connect."""
    props = {**peers.debezium_props(job.server, job.table, job.snapshot), **BATCHING}
    folder = peers.tmp / f"{job.server}-{via}"  # a MariaDB seed's offsets stay there
    if via == "embedded":
        return embedded(props, folder, job.count, job.warm, peers.tools)
    return through_connect(peers, props, folder, job)


class Postgres:
    name = "PostgreSQL"
    tools = harness.TOOLS

    def __init__(self, endpoints: Any, tmp: Path, tag: str) -> None:
        self.endpoints, self.tmp, self.tag = endpoints, tmp, tag
        self.dsn = endpoints.postgres_dsn
        self.admin = psycopg2.connect(self.dsn)
        self.admin.autocommit = True
        self.pubs: dict[str, str] = {}

    def sql(self, statement: str) -> Any:
        with self.admin.cursor() as cur:
            cur.execute(statement)
            return cur.fetchone() if cur.description else None

    def create(self, stream: str, snap: str, readers: list[str]) -> None:
        """The tables, one publication each, and the stream's slot of each reader."""
        for t in (stream, snap):
            self.sql(f"CREATE TABLE {t} {COLUMNS.format(text='text', time='timestamptz')}")
            self.pubs[t] = f"{t.split('.')[1]}_pub"
            self.sql(f"CREATE PUBLICATION {self.pubs[t]} FOR TABLE {t}")
        for reader in readers:  # before the changes: no snapshot has a row to read
            self.sql(
                f"SELECT pg_create_logical_replication_slot('{self.slot(reader)}', 'pgoutput')"
            )

    def slot(self, server: str) -> str:
        return f"peers_{server}_{self.tag}"

    def generate(self, stream: str, snap: str, changes: int, tx_rows: int, rows: int) -> None:
        kit.generate_pg(self.dsn, stream, changes, tx_rows)
        self.sql(
            f"INSERT INTO {snap} SELECT g, 'customer ' || g, g % 97, g * 1.25, "
            f"now(), g % 2 = 0 FROM generate_series(1, {int(rows)}) g"
        )

    def bizevents(self, server: str, table: str, snapshot: bool) -> tuple[float, float]:
        """Until the snapshot is done, or every change written so far acknowledged."""
        from bizevents.capture.config import CaptureConfig
        from bizevents.capture.metrics import CaptureStats
        from bizevents.capture.postgres.messages import parse_lsn
        from bizevents.capture.postgres.runner import CaptureEndpoints, PostgresCapture

        end = parse_lsn(self.sql("SELECT pg_current_wal_insert_lsn()::text")[0])
        config = CaptureConfig(
            server=server,
            tables=(table,),
            slot=self.slot(server),
            publication=self.pubs[table],
            partitions=3,
            snapshot="initial" if snapshot else "never",  # a slot made beforehand: "never"
            heartbeat_interval_s=1.0,
        )
        stats = CaptureStats(server, config.slot_name)
        runner = PostgresCapture(
            config,
            CaptureEndpoints(
                self.dsn,
                {"bootstrap.servers": self.endpoints.bootstrap_servers},
                {"url": self.endpoints.registry_url},
                self.tmp / server,
            ),
            stats=stats,
        )
        if snapshot:
            return timed_capture(runner, lambda: stats.snapshot_done)
        return timed_capture(runner, lambda: stats.acknowledged_lsn >= end)

    def debezium_props(self, server: str, table: str, snapshot: bool) -> dict[str, str]:
        return harness.postgres_properties(
            self.dsn,
            server,
            self.slot(server),
            self.pubs[table],
            [table],
            **{
                "snapshot.mode": "initial" if snapshot else "no_data",
                "publication.autocreate.mode": "disabled",
                "slot.drop.on.stop": False,  # dropped with the others below
            },
        )

    def topic(self, server: str, table: str) -> str:
        return f"{server}.{table}"

    def seed(self, server: str, table: str, via: str) -> None:
        """PostgreSQL's slots hold the start: nothing to do."""

    seeded = 0

    def drop(self) -> None:
        time.sleep(1)  # the slots' walsenders end
        self.sql(
            "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots "
            f"WHERE slot_name LIKE 'peers_%{self.tag}' AND active_pid IS NULL"
        )
        for t, pub in self.pubs.items():
            self.sql(f"DROP PUBLICATION IF EXISTS {pub}")
            self.sql(f"DROP TABLE IF EXISTS {t}")
        self.admin.close()


class MariaDb:
    name = "MariaDB"
    tools = harness.MARIADB_TOOLS

    def __init__(self, endpoints: Any, tmp: Path, tag: str) -> None:
        from bizevents.capture.mariadb import queries as my

        self.endpoints, self.tmp = endpoints, tmp
        self.database = f"peers_{tag}"
        self.conn = my.connect(endpoints.mysql_dsn, autocommit=False)
        self.sql(f"CREATE DATABASE {self.database}")
        self.sql(f"USE {self.database}")  # the seq_<a>_to_<b> tables live in every database

    def sql(self, statement: str, params: Any = None) -> None:
        with self.conn.cursor() as cur:
            cur.execute(statement, params)
        self.conn.commit()

    def create(self, stream: str, snap: str, readers: list[str]) -> None:
        for t in (stream, snap):
            self.sql(f"CREATE TABLE {t} {COLUMNS.format(text='VARCHAR(64)', time='DATETIME(6)')}")
        # one row: each first run snapshots it and stores where the binlog stood
        self.sql(f"INSERT INTO {stream} VALUES (0, 'seed', 0, 0, NOW(6), 0)")

    def generate(self, stream: str, snap: str, changes: int, tx_rows: int, rows: int) -> None:
        inserts = changes // 2
        for start in range(1, inserts + 1, tx_rows):
            stop = min(start + tx_rows - 1, inserts)
            self.sql(
                f"INSERT INTO {stream} SELECT seq, CONCAT('customer ', seq), seq % 97, "
                f"seq * 1.25, NOW(6), seq % 2 = 0 FROM seq_{start}_to_{stop}"
            )
        for start in range(1, changes - inserts + 1, tx_rows):
            stop = min(start + tx_rows - 1, changes - inserts)
            self.sql(
                f"UPDATE {stream} SET qty = qty + 1, price = price + 0.01 "
                "WHERE id BETWEEN %s AND %s",
                (start, stop),
            )
        self.sql(
            f"INSERT INTO {snap} SELECT seq, CONCAT('customer ', seq), seq % 97, "
            f"seq * 1.25, NOW(6), seq % 2 = 0 FROM seq_1_to_{int(rows)}"
        )

    def bizevents(self, server: str, table: str, snapshot: bool) -> tuple[float, float]:
        """Until the snapshot is done, or the stored position covers every change written
        so far (resuming from the position ``server``'s offsets topic holds)."""
        from bizevents.capture.config import CaptureConfig
        from bizevents.capture.mariadb import queries as my
        from bizevents.capture.mariadb.capture import MysqlCapture
        from bizevents.capture.metrics import CaptureStats
        from bizevents.capture.postgres.runner import CaptureEndpoints

        end = my.master_position(self.conn)
        dsn = self.endpoints.mysql_dsn
        runner = MysqlCapture(
            CaptureConfig(server=server, dsn=dsn, tables=(table,), partitions=3),
            CaptureEndpoints(
                dsn,
                {"bootstrap.servers": self.endpoints.bootstrap_servers},
                {"url": self.endpoints.registry_url},
                self.tmp / server,
            ),
            stats=CaptureStats(server, "binlog"),
        )

        def drained() -> bool:
            at = runner.position
            return at is not None and (at.file, at.pos) >= (end.file, end.pos)

        return timed_capture(runner, lambda: runner.stats.snapshot_done if snapshot else drained())

    def debezium_props(self, server: str, table: str, snapshot: bool) -> dict[str, str]:
        state = self.tmp / f"{server}-state"
        state.mkdir(exist_ok=True)
        return harness.mariadb_properties(
            self.endpoints.mysql_dsn,
            server,
            self.database,
            [table.split(".")[1]],
            6400 + zlib.crc32(server.encode()) % 1000,  # a replica id of its own
            **{
                # the embedded engine's offsets; Connect keeps them in its worker's file
                "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
                "offset.storage.file.filename": state / "offsets.dat",
                "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
                "schema.history.internal.file.filename": state / "history.dat",
            },
        )

    def topic(self, server: str, table: str) -> str:
        return f"{server}.{table}"

    def seed(self, server: str, table: str, via: str) -> None:
        """Each reader's first run: the one-row snapshot, its position stored."""
        if via == "bizevents":
            self.bizevents(server, table, snapshot=True)
        else:
            debezium(self, via, Job(server, table, 1, snapshot=True, settle_s=3))

    #: the records a reader's topic holds before the changes: the seed's snapshot read
    seeded = 1

    def drop(self) -> None:
        self.sql(f"DROP DATABASE IF EXISTS {self.database}")
        self.conn.close()


@contextmanager
def database(kind: str, endpoints: Any, tmp: Path) -> Iterator[Any]:
    made = (MariaDb if kind == "mariadb" else Postgres)(endpoints, tmp, uuid.uuid4().hex[:8])
    try:
        yield made
    finally:
        made.drop()


def one_run(
    endpoints: Any, tmp: Path, args: argparse.Namespace, vias: list[str]
) -> dict[str, Figure]:
    tag = uuid.uuid4().hex[:6]
    servers = {who: f"{who[:3]}{tag}" for who in ["bizevents", *vias]}
    figures: dict[str, Figure] = {}
    with database(args.database, endpoints, tmp) as db:
        schema = db.database if args.database == "mariadb" else "public"
        stream, snap = f"{schema}.peers_{tag}", f"{schema}.peers_snap_{tag}"
        db.create(stream, snap, list(servers.values()))
        for who, server in servers.items():
            db.seed(server, stream, who)
        db.generate(stream, snap, args.changes, args.tx_rows, args.snapshot_rows)
        figures["bizevents stream"] = figure(
            args.changes, *db.bizevents(servers["bizevents"], stream, snapshot=False)
        )
        warm = args.changes // 2 if args.warm_up else 1
        for via in vias:
            job = Job(servers[via], stream, args.changes, warm=warm, before=db.seeded)
            figures[f"debezium {via} stream"] = debezium(db, via, job)
        figures["bizevents snapshot"] = figure(
            args.snapshot_rows, *db.bizevents(f"{servers['bizevents']}s", snap, snapshot=True)
        )
        for via in vias:
            job = Job(f"{servers[via]}s", snap, args.snapshot_rows, snapshot=True)
            figures[f"debezium {via} snapshot"] = debezium(db, via, job)
    return figures


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
        help="time Debezium's embedded stream from its middle change on (the JIT warmed up)",
    )
    parser.add_argument("--database", choices=("postgresql", "mariadb"), default="postgresql")
    parser.add_argument(
        "--via",
        choices=("embedded", "connect", "both"),
        default="both",
        help="Debezium's embedded engine, Kafka Connect standalone into Kafka, or both",
    )
    parser.add_argument("--stack-json", type=Path, help="endpoints of a running stack")
    args = parser.parse_args()
    mariadb = args.database == "mariadb"
    reason = harness.missing(harness.MARIADB_TOOLS if mariadb else harness.TOOLS)
    if reason is not None:
        sys.exit(reason)
    vias = ["embedded", "connect"] if args.via == "both" else [args.via]

    with kit.bench_stack("bench-peers-", args.stack_json, mysql=mariadb) as (endpoints, tmp, _):
        runs: list[dict[str, Figure]] = []
        for i in range(args.runs):
            runs.append(one_run(endpoints, tmp, args, vias))
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
            print(f"{name + ' /s':<34}{spread([r[name].per_s for r in runs])}")
            print(f"{name + ' cpu-s/100k':<34}{spread([r[name].cpu_per_100k for r in runs])}")
        for via in vias:
            ours, theirs = "bizevents stream", f"debezium {via} stream"
            per_cpu = [r[theirs].cpu_per_100k / r[ours].cpu_per_100k for r in runs]
            stream = [r[ours].per_s / r[theirs].per_s for r in runs]
            snap = [
                r["bizevents snapshot"].per_s / r[f"debezium {via} snapshot"].per_s for r in runs
            ]
            print(f"\nbizevents / Debezium {via} (target {TARGET_RATIO}):")
            print(f"{'stream changes per cpu-s':<34}{spread(per_cpu)}")
            print(f"{'stream changes/s':<34}{spread(stream)}")
            print(f"{'snapshot rows/s':<34}{spread(snap)}")


if __name__ == "__main__":
    main()
