"""Capture against a broker that stops answering: backpressure, bounded memory, no loss.

Each test starts a broker of its own (the session broker serves other tests) and uses
the session's schema registry and PostgreSQL. The broker keeps its data in memory, so
an outage is a ``SIGSTOP``/``SIGCONT`` pause, never a restart (a restarted broker is
empty; see docs/broker.md), or a broker that starts listening late.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras
import pytest

from bizevents.contracts.envelope import ChangeEvent, PgPosition
from bizevents.devstack import Endpoints
from bizevents.devstack.processes import ProcessId, free_port, stop
from bizevents.devstack.services import Broker, Started
from bizevents.settings import DevSettings
from tests.capture.capture_helpers import (
    Db,
    Record,
    committed_change_lsns,
    database,
    final_state,
    read_topic,
    snapshot_recorded,
    start_cli,
    terminate,
    wait_confirmed,
    write_config,
)

pytestmark = pytest.mark.integration

MAX_IN_FLIGHT = 1_000
# Reading pauses at a Commit once MAX_IN_FLIGHT events wait; one more transaction of
# the writer (at most 2 events per statement) may already be in flight by then.
IN_FLIGHT_BOUND = MAX_IN_FLIGHT + 2 * 20
# The design's target is 30 s; the suite pauses 10 s (BIZEVENTS_TEST_OUTAGE_S overrides).
PAUSE_S = float(os.environ.get("BIZEVENTS_TEST_OUTAGE_S", "10"))
RSS_GROWTH_BOUND = 64 * 1024 * 1024


class DedicatedBroker:
    """A Tansu broker of this test only; paused, resumed and always stopped by it."""

    def __init__(self, state_dir: Path, port: int = 0) -> None:
        self.state_dir = state_dir
        self.port = port
        self.started: Started | None = None
        self.paused = False

    def start(self) -> str:
        self.started = Broker().start(self.state_dir, DevSettings(broker_port=self.port))
        return self.started.endpoint

    @property
    def process(self) -> ProcessId:
        assert self.started is not None
        return ProcessId(self.started.pid, self.started.start_ticks)

    def pause(self) -> None:
        assert self.process.alive()
        os.kill(self.process.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused and self.process.alive():
            os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False

    def close(self) -> None:
        if self.started is None:
            return
        self.resume()
        stop(self.process)


def _endpoints(stack: Endpoints, bootstrap: str) -> Endpoints:
    return replace(stack, bootstrap_servers=bootstrap)


def _metrics(log: Path, process: Any, timeout: float = 30) -> str:
    """The capture's metrics URL, from its JSON log line."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()[-3000:]
        for line in log.read_text().splitlines():
            if "metrics endpoint" in line:
                try:
                    return str(json.loads(line)["url"])
                except (ValueError, KeyError):
                    continue
        time.sleep(0.05)
    raise AssertionError("capture logged no metrics endpoint")


def _scrape(url: str) -> dict[str, float]:
    """Unlabelled-by-table capture gauges, by metric name."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("bizevents_capture_") and "table=" not in line:
            name, _, value = line.rpartition(" ")
            out[name.split("{", 1)[0]] = float(value)
    return out


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _table_state(db: Db, table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    with db.conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute(f"SELECT * FROM {db.schema}.{table}")
        return {(("id", r["id"]),): dict(r) for r in cur.fetchall()}


class Writer:
    """Commits small transactions of upserts and deletes until stopped."""

    def __init__(self, db: Db, table: str, seed: int) -> None:
        self.db = db
        self.table = table
        self.rnd = random.Random(seed)
        self.stop = threading.Event()
        self.changes = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        table = f"{self.db.schema}.{self.table}"
        try:
            conn = psycopg2.connect(self.db.endpoints.postgres_dsn)
            try:
                with conn.cursor() as cur:
                    while not self.stop.is_set():
                        for _ in range(20):
                            k = self.rnd.randrange(1, 2000)
                            if self.rnd.random() < 0.85:
                                cur.execute(
                                    f"INSERT INTO {table} VALUES (%s, 1, 'n') ON CONFLICT (id) "
                                    f"DO UPDATE SET v = {self.table}.v + 1, label = 'u'",
                                    (k,),
                                )
                            else:
                                cur.execute(f"DELETE FROM {table} WHERE id = %s", (k,))
                            self.changes += cur.rowcount
                        conn.commit()
                        time.sleep(0.005)
            finally:
                conn.close()
        except BaseException as exc:  # handed to the test
            self.error = exc

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.finish()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[DedicatedBroker]:
    made = DedicatedBroker(tmp_path / "broker")
    try:
        yield made
    finally:
        made.close()


def _streamed_lsns(records: list[Record]) -> set[int | None]:
    """The LSNs of the changes read from the WAL (not the snapshot's rows)."""
    return {
        r.decoded.source.position.lsn
        for r in records
        if isinstance(r.decoded, ChangeEvent)
        and r.decoded.op != "r"
        and isinstance(r.decoded.source.position, PgPosition)
    }


def _assert_everything_arrived(db: Db, table: str, witness: str) -> None:
    expected = committed_change_lsns(db, witness)
    records = read_topic(db.endpoints, db.topic(table))
    assert final_state(records) == _table_state(db, table)
    seen = _streamed_lsns(records)
    missing = expected - seen
    assert not missing, f"{len(missing)} of {len(expected)} committed changes never reached Kafka"


def test_broker_paused_mid_stream_backpressure_then_resume(
    bizevents_stack: Endpoints, broker: DedicatedBroker, tmp_path: Path
) -> None:
    """SIGSTOP of the broker for PAUSE_S (10 s) under load: capture lives, stops reading the slot
    with at most ~max_in_flight events waiting, confirms nothing Kafka did not take;
    after SIGCONT every committed change arrives and the slot moves on."""
    endpoints = _endpoints(bizevents_stack, broker.start())
    with database(endpoints) as db:
        db.sql(f"CREATE TABLE {db.schema}.items (id bigint PRIMARY KEY, v int, label text)")
        db.sql(f"INSERT INTO {db.schema}.items SELECT g, 0, 's' FROM generate_series(1, 300) g")
        state = tmp_path / "state"
        config = db.config(
            ["items"],
            partitions=3,
            state_dir=state,
            max_in_flight=MAX_IN_FLIGHT,
            metrics_port=0,
            linger_ms=5,
        )
        config_file = write_config(tmp_path / "capture.toml", config)
        log = tmp_path / "capture.log"
        witness = db.slot + "_witness"
        process = start_cli(config_file, endpoints, log)
        try:
            url = _metrics(log, process)
            deadline = time.monotonic() + 30
            while not snapshot_recorded(endpoints, db.server, db.slot):
                assert process.poll() is None and time.monotonic() < deadline, _tail(log)
                time.sleep(0.05)
            db.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (witness,))
            with Writer(db, "items", seed=11) as writer:
                wait_confirmed(db, db.wal_lsn(), timeout=20, process=process, log=log)
                time.sleep(1.0)  # capture is busy streaming
                rss_before = _rss(process.pid)
                broker.pause()
                time.sleep(1.5)  # answers already on the wire are read; then nothing
                pause_start = time.monotonic()
                confirmed_paused = db.confirmed()
                received: list[float] = []
                in_flight_max = 0.0
                while time.monotonic() - pause_start < PAUSE_S:
                    assert process.poll() is None, _tail(log)
                    m = _scrape(url)
                    in_flight_max = max(in_flight_max, m["bizevents_capture_in_flight"])
                    received.append(m["bizevents_capture_received_lsn"])
                    # Kafka acknowledges nothing while stopped: the slot must not move.
                    assert db.confirmed() == confirmed_paused
                    assert _rss(process.pid) - rss_before < RSS_GROWTH_BOUND
                    time.sleep(0.25)
                paused_metrics = _scrape(url)
                wal_paused = db.wal_lsn()
                changes_paused = writer.changes
                broker.resume()
                # Back to normal: the slot moves on while the writer goes on.
                wait_confirmed(db, wal_paused, timeout=30, process=process, log=log)
                time.sleep(1.0)
            assert writer.changes > changes_paused
            end = db.wal_lsn()
            wait_confirmed(db, end, timeout=30, process=process, log=log)
            assert terminate(process) == 0, _tail(log)
        finally:
            broker.resume()
            if process.poll() is None:
                process.kill()
                process.wait(10)
        # Reading paused: in flight reached the limit and stayed under the bound, the
        # slot was not read for most of the pause, while the database went on writing.
        assert MAX_IN_FLIGHT <= in_flight_max <= IN_FLIGHT_BOUND, in_flight_max
        assert paused_metrics["bizevents_capture_backpressure_pauses"] >= 1
        assert len(set(received[len(received) // 2 :])) == 1, "the slot was read while paused"
        assert wal_paused > received[-1] > confirmed_paused
        assert paused_metrics["bizevents_capture_acknowledged_lsn"] <= confirmed_paused
        assert "Kafka is not acknowledging; slot reading paused" in log.read_text()
        _assert_everything_arrived(db, "items", witness)


def _retried(log: str) -> bool:
    """Whether capture's log says it asked an absent broker again."""
    return any(
        line in log
        for line in (
            "capture interrupted, retrying",
            "the Kafka cluster is restarting or a node is down: asking again",
        )
    )


def test_broker_not_listening_at_start_retries_then_captures(
    bizevents_stack: Endpoints, tmp_path: Path
) -> None:
    """The broker comes up only after capture gave up its first metadata wait: capture
    retries with backoff, then snapshots and streams; nothing is lost."""
    port = free_port("127.0.0.1")
    broker = DedicatedBroker(tmp_path / "broker", port)
    endpoints = _endpoints(bizevents_stack, f"127.0.0.1:{port}")
    try:
        with database(endpoints) as db:
            db.sql(f"CREATE TABLE {db.schema}.items (id bigint PRIMARY KEY, v int, label text)")
            db.sql(f"INSERT INTO {db.schema}.items SELECT g, 0, 's' FROM generate_series(1, 500) g")
            # The publication first: the witness slot decodes through it from its start.
            db.sql(f"CREATE PUBLICATION {db.publication} FOR TABLE {db.schema}.items")
            witness = db.slot + "_witness"
            db.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (witness,))
            state = tmp_path / "state"
            config = db.config(
                ["items"], partitions=2, state_dir=state, max_in_flight=MAX_IN_FLIGHT
            )
            config_file = write_config(tmp_path / "capture.toml", config)
            log = tmp_path / "capture.log"
            process = start_cli(config_file, endpoints, log)
            try:
                with Writer(db, "items", seed=12) as writer:
                    # Down longer than capture's first metadata wait: it must retry (its
                    # own loop, or the one retry policy of start-up's reads and topics).
                    deadline = time.monotonic() + 30
                    while not _retried(log.read_text()):
                        assert process.poll() is None, _tail(log)
                        assert time.monotonic() < deadline, "capture never retried"
                        time.sleep(0.2)
                    time.sleep(1.0)
                    assert process.poll() is None, _tail(log)
                    # Nothing recorded while the broker is away (its record lives there).
                    assert "snapshot in Kafka" not in log.read_text()
                    assert broker.start() == f"127.0.0.1:{port}"
                    deadline = time.monotonic() + 30
                    while not snapshot_recorded(endpoints, db.server, db.slot):
                        assert process.poll() is None and time.monotonic() < deadline, _tail(log)
                        time.sleep(0.05)
                    time.sleep(1.0)
                assert writer.changes > 0
                wait_confirmed(db, db.wal_lsn(), timeout=30, process=process, log=log)
                assert terminate(process) == 0, _tail(log)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait(10)
            assert _retried(log.read_text())
            _assert_everything_arrived_after_snapshot(db, "items", witness)
    finally:
        broker.close()


def _assert_everything_arrived_after_snapshot(db: Db, table: str, witness: str) -> None:
    """Final state equals the table; every change after the snapshot point is there."""
    records = read_topic(db.endpoints, db.topic(table))
    assert final_state(records) == _table_state(db, table)
    snapshot = [
        r.decoded for r in records if isinstance(r.decoded, ChangeEvent) and r.decoded.op == "r"
    ]
    assert snapshot, "the snapshot was written"
    point = snapshot[0].source.position
    assert isinstance(point, PgPosition) and point.lsn is not None
    seen = _streamed_lsns(records)
    # Changes committed before the slot's consistent point are in the snapshot's rows.
    expected = {lsn for lsn in committed_change_lsns(db, witness) if lsn >= point.lsn}
    assert expected, "changes were streamed after the snapshot"
    missing = expected - seen
    assert not missing, f"{len(missing)} of {len(expected)} committed changes never reached Kafka"


def _tail(log: Path) -> str:
    return log.read_text()[-3000:] if log.exists() else ""
