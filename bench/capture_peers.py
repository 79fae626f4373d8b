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
- ``connect``: Kafka Connect standalone into the stack's broker, as a team runs it (plain
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

Incremental snapshot (with Connect): a table of ``--incremental-rows`` rows, a stream
table taking one row per transaction at ``--tick-rate`` a second, and a signal table.
Each reader in turn (bizevents, then Debezium through Connect) starts streaming at the
log's end into topics of its own, made beforehand with one partition and the broker's
append time as each record's timestamp; once its stream flows, it gets the signal
(bizevents: ``capture snapshot``'s record on its signal topic; Debezium: an
``execute-snapshot`` row in the signal table). Rows/s run from the signal to the last
row's append time; the stream's latency is each tick's commit (this process's wall
clock) to its record's append time (the broker's: the same clock), its p99 over the
ticks committed while the snapshot ran. Both read 1,024 rows a chunk (their defaults).

The private stack's broker is Apache Kafka (``--broker kafka``, the default; ``tansu``
for the dev stack's default), named in the output.

Debezium 3.6.1 on PostgreSQL; its MariaDB connector 3.5.0 (3.6.1 is not served by the
package registry this project reaches). Run it on a quiet machine (``uptime``).

    scripts/setup-debezium  # once
    .venv/bin/python bench/capture_peers.py                       # private stack, 3 runs
    .venv/bin/python bench/capture_peers.py --changes 200000 --runs 5 --warm-up
    .venv/bin/python bench/capture_peers.py --database mariadb --via connect
"""

from __future__ import annotations

import argparse
import json
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
    props = {**peers.debezium_props(job.server, (job.table,), job.snapshot), **BATCHING}
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

    def runner(self, server: str, tables: tuple[str, ...], snapshot: bool, partitions: int) -> Any:
        """bizevents capture of ``tables`` (the first's publication) on ``server``'s slot."""
        from bizevents.capture.config import CaptureConfig
        from bizevents.capture.metrics import CaptureStats
        from bizevents.capture.postgres.runner import CaptureEndpoints, PostgresCapture

        config = CaptureConfig(
            server=server,
            tables=tables,
            slot=self.slot(server),
            publication=self.pubs[tables[0]],
            partitions=partitions,
            snapshot="initial" if snapshot else "never",  # a slot made beforehand: "never"
            heartbeat_interval_s=1.0,
        )
        return PostgresCapture(
            config,
            CaptureEndpoints(
                self.dsn,
                {"bootstrap.servers": self.endpoints.bootstrap_servers},
                {"url": self.endpoints.registry_url},
                self.tmp / server,
            ),
            stats=CaptureStats(server, config.slot_name),
        )

    def bizevents(self, server: str, table: str, snapshot: bool) -> tuple[float, float]:
        """Until the snapshot is done, or every change written so far acknowledged."""
        from bizevents.capture.postgres.messages import parse_lsn

        end = parse_lsn(self.sql("SELECT pg_current_wal_insert_lsn()::text")[0])
        runner = self.runner(server, (table,), snapshot, partitions=3)
        stats = runner.stats
        if snapshot:
            return timed_capture(runner, lambda: stats.snapshot_done)
        return timed_capture(runner, lambda: stats.acknowledged_lsn >= end)

    def debezium_props(
        self, server: str, tables: tuple[str, ...], snapshot: bool
    ) -> dict[str, str]:
        return harness.postgres_properties(
            self.dsn,
            server,
            self.slot(server),
            self.pubs[tables[0]],
            list(tables),
            **{
                "snapshot.mode": "initial" if snapshot else "no_data",
                "publication.autocreate.mode": "disabled",
                "slot.drop.on.stop": False,  # dropped with the others below
            },
        )

    def topic(self, server: str, table: str) -> str:
        return f"{server}.{table}"

    def create_incremental(self, inc: str, tick: str, sig: str, rows: int) -> None:
        """The incremental snapshot's table of ``rows`` rows, the stream's table and the
        signal table, in one publication."""
        from bizevents.capture.core.signals import signal_table_ddl

        for t in (inc, tick):
            self.sql(f"CREATE TABLE {t} {COLUMNS.format(text='text', time='timestamptz')}")
        self.sql(signal_table_ddl(sig, mysql=False))
        pub = f"{inc.split('.')[1]}_pub"
        self.sql(f"CREATE PUBLICATION {pub} FOR TABLE {inc}, {tick}, {sig}")
        self.pubs.update({inc: pub, tick: pub, sig: pub})  # dropped with them
        self.sql(
            f"INSERT INTO {inc} SELECT g, 'customer ' || g, g % 97, g * 1.25, "
            f"now(), g % 2 = 0 FROM generate_series(1, {int(rows)}) g"
        )

    def reader(self, server: str) -> None:
        """The reader's slot, made as it starts: it reads no earlier reader's changes."""
        self.sql(f"SELECT pg_create_logical_replication_slot('{self.slot(server)}', 'pgoutput')")

    def writer(self) -> Callable[..., None]:
        """Runs a statement on a connection of its own, each its own transaction."""
        conn = psycopg2.connect(self.dsn)
        conn.autocommit = True

        def write(statement: str, params: tuple[str, ...] = ()) -> None:
            with conn.cursor() as cur:
                cur.execute(statement, params or None)

        return write

    now = "now()"

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
        for insert, first, last in kit.change_batches(changes, tx_rows):
            if insert:
                self.sql(
                    f"INSERT INTO {stream} SELECT seq, CONCAT('customer ', seq), seq % 97, "
                    f"seq * 1.25, NOW(6), seq % 2 = 0 FROM seq_{first}_to_{last}"
                )
            else:
                self.sql(kit.UPDATE_BATCH.format(stream), (first, last))
        self.sql(
            f"INSERT INTO {snap} SELECT seq, CONCAT('customer ', seq), seq % 97, "
            f"seq * 1.25, NOW(6), seq % 2 = 0 FROM seq_1_to_{int(rows)}"
        )

    def runner(self, server: str, tables: tuple[str, ...], snapshot: bool, partitions: int) -> Any:
        """bizevents capture of ``tables``: a new ``server`` snapshots them (or with
        ``snapshot`` false starts at the binlog's end); one with offsets resumes."""
        from bizevents.capture.config import CaptureConfig
        from bizevents.capture.mariadb.capture import MysqlCapture
        from bizevents.capture.metrics import CaptureStats
        from bizevents.capture.postgres.runner import CaptureEndpoints

        dsn = self.endpoints.mysql_dsn
        return MysqlCapture(
            CaptureConfig(
                server=server,
                dsn=dsn,
                tables=tables,
                partitions=partitions,
                snapshot="initial" if snapshot else "never",
            ),
            CaptureEndpoints(
                dsn,
                {"bootstrap.servers": self.endpoints.bootstrap_servers},
                {"url": self.endpoints.registry_url},
                self.tmp / server,
            ),
            stats=CaptureStats(server, "binlog"),
        )

    def bizevents(self, server: str, table: str, snapshot: bool) -> tuple[float, float]:
        """Until the snapshot is done, or the stored position covers every change written
        so far (resuming from the position ``server``'s offsets topic holds)."""
        from bizevents.capture.mariadb import queries as my

        end = my.master_position(self.conn)
        runner = self.runner(server, (table,), True, partitions=3)

        def drained() -> bool:
            at = runner.position
            return at is not None and (at.file, at.pos) >= (end.file, end.pos)

        return timed_capture(runner, lambda: runner.stats.snapshot_done if snapshot else drained())

    def debezium_props(
        self, server: str, tables: tuple[str, ...], snapshot: bool
    ) -> dict[str, str]:
        state = self.tmp / f"{server}-state"
        state.mkdir(exist_ok=True)
        return harness.mariadb_properties(
            self.endpoints.mysql_dsn,
            server,
            self.database,
            [t.split(".")[1] for t in tables],
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

    def create_incremental(self, inc: str, tick: str, sig: str, rows: int) -> None:
        """The incremental snapshot's table of ``rows`` rows, the stream's table and the
        signal table."""
        from bizevents.capture.core.signals import signal_table_ddl

        for t in (inc, tick):
            self.sql(f"CREATE TABLE {t} {COLUMNS.format(text='VARCHAR(64)', time='DATETIME(6)')}")
        self.sql(signal_table_ddl(sig, mysql=True))
        self.sql(
            f"INSERT INTO {inc} SELECT seq, CONCAT('customer ', seq), seq % 97, "
            f"seq * 1.25, NOW(6), seq % 2 = 0 FROM seq_1_to_{int(rows)}"
        )

    def reader(self, server: str) -> None:
        """Each reader starts at the binlog's end: nothing to make."""

    def writer(self) -> Callable[..., None]:
        """Runs a statement on a connection of its own, each its own transaction."""
        from bizevents.capture.mariadb import queries as my

        conn = my.connect(self.endpoints.mysql_dsn, autocommit=True)

        def write(statement: str, params: tuple[str, ...] = ()) -> None:
            with conn.cursor() as cur:
                cur.execute(statement, params or None)

        return write

    now = "NOW(6)"

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


# -- the incremental snapshot under a steady stream ----------------------------------------


@dataclass
class Incremental:
    per_s: float  # the snapshot's rows per second, from its signal to its last row in Kafka
    p99_ms: float  # the stream's commit -> record-in-topic during it, 99th percentile


class Stamps:
    """The broker's append times (ms) of a one-partition topic's records, from its start,
    and with ``key_id`` each record's key's ``id``."""

    def __init__(
        self, bootstrap: str, topic: str, key_id: Callable[[bytes], int] | None = None
    ) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "bench", "fetch.wait.max.ms": 10}
        )
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.topic, self.key_id = topic, key_id
        self.ms: list[int] = []
        self.ids: list[int] = []

    def read(self) -> int:
        from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

        for m in self.consumer.consume(10_000, timeout=0.05):
            if m.error() is not None:
                continue
            kind, ms = m.timestamp()
            if kind != TIMESTAMP_LOG_APPEND_TIME:
                sys.exit(f"{self.topic} holds a record without the broker's append time")
            self.ms.append(ms)
            if self.key_id is not None:
                self.ids.append(self.key_id(m.key() or b""))
        return len(self.ms)

    def close(self) -> None:
        self.consumer.close()


class Ticker:
    """One row inserted into ``table`` every 1/``rate`` s (each its own transaction),
    the wall-clock time of each commit by the row's id."""

    def __init__(self, db: Any, table: str, rate: float, first_id: int) -> None:
        self.write = db.writer()
        self.statement = f"INSERT INTO {table} VALUES ({{}}, 'tick', 0, 0, {db.now}, true)"
        self.interval, self.next_id = 1 / rate, first_id
        self.commits: dict[int, float] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        due = time.perf_counter()
        while not self.stopped.is_set():
            self.write(self.statement.format(self.next_id))
            self.commits[self.next_id] = time.time()
            self.next_id += 1
            due += self.interval
            time.sleep(max(0.0, due - time.perf_counter()))

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(30)


def wait(done: Callable[[], bool], alive: Callable[[], str | None], what: str) -> None:
    """Until ``done()``; the reader's failure (``alive()`` says why) ends the bench."""
    deadline = time.monotonic() + 1800
    while not done():
        reason = alive()
        if reason is not None:
            sys.exit(f"{what}: {reason}")
        if time.monotonic() > deadline:
            sys.exit(f"{what}: not within 30 minutes")
        time.sleep(0.02)


@contextmanager
def reading(
    db: Any, who: str, server: str, tables: tuple[str, str, str]
) -> Iterator[tuple[Callable[[], None], Callable[[], str | None]]]:
    """bizevents capture (``who`` "bizevents") or Debezium through Connect streaming
    ``tables`` from now on: how to send it the incremental snapshot's signal (bizevents':
    ``capture snapshot``'s record on its signal topic; Debezium's: a row of the signal
    table), and why it stopped (None while it runs)."""
    from bizevents.capture.control import send_signals
    from bizevents.capture.core.signals import new_signal

    inc, tick, sig = tables
    signal = new_signal("execute-snapshot", (inc,))
    kafka = {"bootstrap.servers": db.endpoints.bootstrap_servers}
    if who == "bizevents":
        runner = db.runner(server, (inc, tick), False, partitions=1)
        failed: list[BaseException] = []

        def run() -> None:
            try:
                runner.run()
            except BaseException as exc:  # reported by alive()
                failed.append(exc)

        def send() -> None:
            send_signals(kafka, runner.config, [signal])

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            yield (
                send,
                lambda: None if thread.is_alive() else f"bizevents capture stopped: {failed}",
            )
        finally:
            runner.request_stop()
            thread.join(60)
        return
    props = {
        **db.debezium_props(server, tables, False),
        **BATCHING,
        "signal.data.collection": sig,
        "snapshot.mode": "no_data",
    }
    folder = db.tmp / f"{server}-incremental"
    worker = harness.connect_worker_properties(
        kafka["bootstrap.servers"],
        folder,
        **{"key.converter.schemas.enable": "false", "value.converter.schemas.enable": "false"},
    )
    connect = harness.start_connect(
        worker, harness.connect_connector_properties(props), folder, tools=db.tools
    )
    try:
        yield (
            lambda: db.writer()(f"INSERT INTO {sig} VALUES (%s, %s, %s)", signal.to_row()),
            lambda: None if connect.process.poll() is None else f"Connect exited: {connect.tail()}",
        )
    finally:
        connect.stop()


def key_ids(registry_url: str, topic: str, who: str) -> Callable[[bytes], int]:
    """How a stream record's key gives its row's id: bizevents' Avro (through the
    registry) or Connect's plain JSON."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    if who != "bizevents":
        return lambda key: int(json.loads(key)["id"])
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    context = SerializationContext(topic, MessageField.KEY)
    return lambda key: int(deserialize(key, context)["id"])


def incremental(
    db: Any, who: str, server: str, args: argparse.Namespace, first_id: int
) -> Incremental:
    """``who``'s incremental snapshot of ``--incremental-rows`` rows while ``--tick-rate``
    rows a second go into the stream's table: its rows/s and the stream's p99 latency
    (commit to the broker's append time: one clock) over the ticks committed meanwhile.
    Each reader starts on its own topics (one partition, the broker's append times)."""
    from confluent_kafka.admin import AdminClient

    from bizevents.plumbing.kafka import ensure_topics

    inc, tick, _ = tables = db.incremental_tables
    bootstrap = db.endpoints.bootstrap_servers
    topics = [db.topic(server, inc), db.topic(server, tick)]
    ensure_topics(
        AdminClient({"bootstrap.servers": bootstrap}),
        topics,
        1,
        config={"message.timestamp.type": "LogAppendTime"},
    )
    rows = Stamps(bootstrap, topics[0])
    ticks = Stamps(bootstrap, topics[1], key_ids(db.endpoints.registry_url, topics[1], who))
    db.reader(server)
    try:
        with reading(db, who, server, tables) as (signal, alive):
            ticker = Ticker(db, tick, args.tick_rate, first_id)
            try:
                wait(lambda: ticks.read() > 0, alive, f"{who}: no stream")
                time.sleep(2)  # the stream steady
                start = time.time()
                signal()
                want = args.incremental_rows
                wait(lambda: rows.read() >= want, alive, f"{who}: the incremental snapshot")
            finally:
                ticker.stop()
            last = ticker.next_id - 1  # the rows before its stream began are not read

            def through() -> bool:
                ticks.read()
                return bool(ticks.ids) and ticks.ids[-1] == last

            wait(through, alive, f"{who}: the stream")
    finally:
        rows.close()
        ticks.close()
    end = max(rows.ms) / 1000
    commits = ticker.commits
    during = [
        ms / 1000 - commits[i]
        for i, ms in zip(ticks.ids, ticks.ms, strict=True)
        if start <= commits[i] <= end
    ]
    p99 = statistics.quantiles(during, n=100)[98] if len(during) > 1 else float("nan")
    return Incremental(args.incremental_rows / max(end - start, 1e-9), p99 * 1000)


def one_run(
    endpoints: Any, tmp: Path, args: argparse.Namespace, vias: list[str]
) -> tuple[dict[str, Figure], dict[str, Incremental]]:
    tag = uuid.uuid4().hex[:6]
    servers = {who: f"{who[:3]}{tag}" for who in ["bizevents", *vias]}
    figures: dict[str, Figure] = {}
    snapshots: dict[str, Incremental] = {}
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
        if "connect" in vias and args.incremental_rows:
            names = (f"peers_inc_{tag}", f"peers_tick_{tag}", f"peers_sig_{tag}")
            db.incremental_tables = tuple(f"{schema}.{n}" for n in names)
            db.create_incremental(*db.incremental_tables, args.incremental_rows)
            for first_id, who in enumerate(("bizevents", "connect")):
                found = incremental(db, who, f"{servers[who]}i", args, first_id * 10**8 + 1)
                snapshots[who] = found
    return figures, snapshots


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
    kit.broker_option(parser, "kafka", both=False)
    parser.add_argument(
        "--incremental-rows",
        type=int,
        default=100_000,
        help="the incremental snapshot's table (with --via connect or both; 0: none)",
    )
    parser.add_argument(
        "--tick-rate",
        type=float,
        default=200,
        help="rows a second written to the stream during the incremental snapshot",
    )
    parser.add_argument("--stack-json", type=Path, help="endpoints of a running stack")
    args = parser.parse_args()
    mariadb = args.database == "mariadb"
    reason = harness.missing(harness.MARIADB_TOOLS if mariadb else harness.TOOLS)
    if reason is not None:
        sys.exit(reason)
    vias = ["embedded", "connect"] if args.via == "both" else [args.via]
    broker = "Apache Kafka" if args.broker == "kafka" else "Tansu"
    if args.stack_json is not None:
        broker = f"the broker of {args.stack_json}"

    with kit.bench_stack("bench-peers-", args.stack_json, mysql=mariadb, broker=args.broker) as (
        endpoints,
        tmp,
        _,
    ):
        runs: list[dict[str, Figure]] = []
        snaps: list[dict[str, Incremental]] = []
        for i in range(args.runs):
            figures, snapshots = one_run(endpoints, tmp, args, vias)
            runs.append(figures)
            snaps.append(snapshots)
            line = "  ".join(
                f"{name}: {f.per_s:,.0f}/s {f.cpu_per_100k:.2f} cpu-s"
                for name, f in figures.items()
            )
            line += "".join(
                f"  {who} incremental: {f.per_s:,.0f} rows/s p99 {f.p99_ms:,.0f} ms"
                for who, f in snapshots.items()
            )
            print(f"run {i + 1}: {line}", flush=True)
        print(
            f"\n{'MariaDB' if mariadb else 'PostgreSQL'} into {broker}, {args.changes:,} changes, "
            f"{args.snapshot_rows:,} snapshot rows, "
            f"median of {args.runs} (min-max):"
        )
        for name in runs[0]:
            print(f"{name + ' /s':<34}{spread([r[name].per_s for r in runs])}")
            print(f"{name + ' cpu-s/100k':<34}{spread([r[name].cpu_per_100k for r in runs])}")
        for who in snaps[0]:
            print(f"{who + ' incremental rows/s':<34}{spread([r[who].per_s for r in snaps])}")
            print(f"{who + ' incremental p99 ms':<34}{spread([r[who].p99_ms for r in snaps])}")
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
            if via == "connect" and snaps[0]:
                inc = [r["bizevents"].per_s / r["connect"].per_s for r in snaps]
                p99 = [r["connect"].p99_ms / r["bizevents"].p99_ms for r in snaps]
                print(f"{'incremental snapshot rows/s':<34}{spread(inc)}")
                print(f"{'stream p99 during it (theirs/ours)':<34}{spread(p99)}")


if __name__ == "__main__":
    main()
