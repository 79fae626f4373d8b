"""Signals that cannot hurt, on the real databases and broker (issue 41's
reproductions): a condition is data, never SQL that runs; no signal stops capture, on
either source; a ``--stop`` sent while capture was away ends a stored snapshot before it
resumes."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.signals import SignalTopic, new_signal, signal_table_ddl
from bizevents.capture.core.state import Ledger, Pending, StateStore
from bizevents.capture.postgres.runner import CaptureEndpoints
from bizevents.contracts.envelope import ChangeEvent
from tests.capture.capture_helpers import (
    Db,
    capture_endpoints,
    in_process,
    read_topic,
    signal_cli,
    start_cli,
    terminate,
    wait_snapshot_done,
    write_config,
)
from tests.capture.signal_fuzz import (
    TopicEnd,
    bad_records,
    bad_rows,
    send_records,
    snapshot_with,
    wait_until,
)
from tests.capture.sources import Source

pytestmark = pytest.mark.integration


def victim_exists(db: Db) -> bool:
    return bool(db.sql("SELECT to_regclass(%s)", (f"{db.schema}.victim",))[0][0])


def run_once(
    db: Db, config: CaptureConfig, endpoints: CaptureEndpoints
) -> tuple[dict[str, str], StateStore, bytes, Ledger | None]:
    """A capture run to its snapshot's end and stopped: the Kafka settings, its state
    store, its ledger's key there and the ledger it stored."""
    with in_process(config, endpoints) as run:
        run.wait_snapshot()
        run.wait_acked(db.wal_lsn())
        run.stop()
    kafka = {"bootstrap.servers": db.endpoints.bootstrap_servers}
    store = StateStore(kafka, config.offsets_topic_name, db.server)
    key = store.ledger_key(db.slot)
    return kafka, store, key, Ledger.from_json(store.read(key))


def test_a_where_that_holds_sql_drops_nothing(db: Db, tmp_path: Path) -> None:
    """``capture snapshot --where "true); DROP TABLE ...victim; SELECT (1"`` exits 1 with
    one sentence naming --where; so does a ``pg_sleep`` condition. The same condition
    written straight to the signal topic is refused by capture, which streams on;
    ``victim`` is still there."""
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, v int)")
    db.sql(f"CREATE TABLE {s}.victim (id int)")
    db.sql(f"INSERT INTO {s}.t SELECT g, 0 FROM generate_series(1, 20) g")
    config = db.config(["t"])
    config_file = write_config(tmp_path / "capture.toml", config)
    drop = f"true); DROP TABLE {s}.victim; SELECT (1"
    topic = TopicEnd(db.endpoints.bootstrap_servers, db.topic("t"))
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()

        def alive() -> None:
            assert run.error is None and run.thread.is_alive(), run.error

        for where, reason in (
            (drop, "a semicolon at character 6"),
            ("id <= 3 AND pg_sleep(5)::text = ''", "a cast (::)"),
        ):
            sent = signal_cli(config_file, db.endpoints, "--where", where, f"{s}.t")
            assert sent.returncode == 1, sent.stdout + sent.stderr
            said = " ".join(sent.stderr.split())
            assert "--where" in said and reason in said, said
            assert "Traceback" not in sent.stderr + sent.stdout
        # Past the command line: the condition as a record of the signal topic.
        kafka = {"bootstrap.servers": db.endpoints.bootstrap_servers}
        producer = Producer(kafka)
        value = json.dumps({"type": "execute-snapshot", "data": snapshot_with(f"{s}.t", drop)})
        producer.produce(config.signal_topic_name, value.encode(), b"bypass")
        assert producer.flush(10) == 0
        wait_until(lambda: run.stats.signals_refused == 1, alive, "the signal was not refused")
        before = topic.count()
        db.sql(f"UPDATE {s}.t SET v = 1 WHERE id = 1")
        topic.wait_beyond(before, alive)
        run.stop()
    topic.close()
    assert victim_exists(db)
    assert not run.runner.ledger.queue


def test_a_signal_row_whose_filter_holds_sql_changes_no_role(db: Db, tmp_path: Path) -> None:
    """A row of the signal table whose filter commits and makes a role superuser, and
    one that calls pg_sleep: both refused in capture's log with one sentence each; the
    role is as it was; the stream is not held up (a change after them arrives in
    seconds, not after the sleep)."""
    s = db.schema
    role = f"r_{uuid.uuid4().hex[:10]}"
    db.sql(f"CREATE ROLE {role} NOSUPERUSER")
    try:
        db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, v int, note text)")
        db.sql(f"INSERT INTO {s}.t SELECT g, 0, 'n' FROM generate_series(1, 20) g")
        db.sql(signal_table_ddl(f"{s}.sig", mysql=False))
        config = db.config(["t"], signal_table=f"{s}.sig")
        config_file = write_config(tmp_path / "capture.toml", config)
        log = tmp_path / "capture.log"
        process = start_cli(config_file, db.endpoints, log)
        topic = TopicEnd(db.endpoints.bootstrap_servers, db.topic("t"))
        try:
            wait_snapshot_done(db, None, process, log)

            def alive() -> None:
                assert process.poll() is None, log.read_text()[-3000:]

            filters = [
                f"true); COMMIT; ALTER ROLE {role} SUPERUSER; "
                f'SELECT "id","note" FROM ONLY {s}.t WHERE (true',
                "id <= 3 AND pg_sleep(30)::text = ''",
            ]
            for i, where in enumerate(filters):
                row = (f"sql-{i}", "execute-snapshot", snapshot_with(f"{s}.t", where))
                db.sql(f"INSERT INTO {s}.sig VALUES (%s, %s, %s)", row)
            before = topic.count()
            db.sql(f"UPDATE {s}.t SET v = 1 WHERE id = 1")
            took = topic.wait_beyond(before, alive)
            assert took < 15, f"the stream was held up {took:.1f}s"
            wait_until(lambda: log.read_text().count("signal refused") >= 2, alive, "not refused")
            assert terminate(process) == 0, log.read_text()[-3000:]
        finally:
            topic.close()
            if process.poll() is None:
                process.kill()
                process.wait(10)
        refused = [line for line in log.read_text().splitlines() if "signal refused" in line]
        assert len(refused) == 2, refused
        assert "signal 'sql-0': the condition" in refused[0] and "a semicolon" in refused[0]
        assert "signal 'sql-1': the condition" in refused[1] and "a cast (::)" in refused[1]
        assert "Traceback" not in log.read_text()
        assert db.sql("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)) == [(False,)]
    finally:
        db.sql(f"DROP ROLE IF EXISTS {role}")


def test_a_stop_sent_while_capture_was_away_ends_a_stored_snapshot_that_fails(
    db: Db, tmp_path: Path
) -> None:
    """The ledger holds a snapshot whose stored condition is SQL (as an older capture
    kept it); a ``stop-snapshot`` and then a snapshot of ``id <= 5`` wait on the signal
    topic: the restart reads them before the stored snapshot resumes. The stop is
    carried out (not refused: its snapshot was still under way), nothing is dropped,
    only the rows ``id <= 5`` are snapshotted, and capture streams."""
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, v int)")
    db.sql(f"CREATE TABLE {s}.victim (id int)")
    db.sql(f"INSERT INTO {s}.t SELECT g, 0 FROM generate_series(1, 500) g")
    config = db.config(["t"], incremental_chunk_rows=50)
    endpoints = capture_endpoints(db.endpoints, tmp_path)
    kafka, store, key, ledger = run_once(db, config, endpoints)
    assert ledger is not None
    ledger.queue = [Pending(f"{s}.t", "old", f"true); DROP TABLE {s}.victim; SELECT (1")]
    producer = Producer(kafka)
    store.write_acknowledged(producer, key, ledger.to_json())
    signals = SignalTopic(kafka, config.signal_topic_name, db.server)
    signals.send(producer, new_signal("stop-snapshot", (f"{s}.t",)))
    signals.send(producer, new_signal("execute-snapshot", (f"{s}.t",), "id <= 5"))
    assert producer.flush(10) == 0
    topic = TopicEnd(db.endpoints.bootstrap_servers, db.topic("t"))
    with in_process(config, endpoints) as run:
        run.wait_snapshot()

        def alive() -> None:
            assert run.error is None and run.thread.is_alive(), run.error

        wait_until(
            lambda: f"{s}.t" in run.stats.incremental_rows and not run.runner.ledger.queue,
            alive,
            "the snapshot of id <= 5 did not run",
        )
        before = topic.count()
        db.sql(f"UPDATE {s}.t SET v = 1 WHERE id = 1")
        topic.wait_beyond(before, alive)
        run.stop()
    topic.close()
    assert run.stats.signals_refused == 0
    assert victim_exists(db)
    records = read_topic(db.endpoints, db.topic("t"))
    snapshot = [
        int(r.decoded.after["id"])
        for r in records
        if isinstance(r.decoded, ChangeEvent)
        and r.decoded.source.snapshot_raw == "incremental"
        and r.decoded.after
    ]
    assert sorted(snapshot) == [1, 2, 3, 4, 5]


def test_no_bad_signal_stops_capture_on_either_channel(source: Source, tmp_path: Path) -> None:
    """Random text, deep JSON and conditions that hold SQL (a ``SLEEP()`` on MariaDB) as
    signal table rows, random bytes and deep JSON as signal topic records, one after
    another: each is refused; after each, capture is alive and a row changed then arrives
    on its topic within seconds (a SLEEP(30) would hold it up longer); a good snapshot
    still runs."""
    table = source.table("t")
    source.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT)")
    source.sql(f"INSERT INTO {table} VALUES " + ", ".join(f"({i}, 0)" for i in range(1, 101)))
    source.sql(signal_table_ddl(source.table("sig"), mysql=source.mysql))
    # Heartbeats every half second: MariaDB reads the signal topic between binlog events.
    config = source.config(["t"], signal_table=source.table("sig"), heartbeat_interval_s=0.5)
    rows = bad_rows(11, table, list(source.SQL_CONDITIONS))
    records = bad_records(11, table)
    endpoints = source.db.endpoints
    topic = TopicEnd(endpoints.bootstrap_servers, source.topic("t"))
    with source.in_process(config, tmp_path) as run:
        run.wait_snapshot()

        def alive() -> None:
            assert run.error is None and run.thread.is_alive(), run.error

        refused = changes = 0
        for row in rows:
            source.sql(f"INSERT INTO {source.table('sig')} VALUES (%s, %s, %s)", row)
            refused += 1
            wait_until(lambda n=refused: run.stats.signals_refused >= n, alive, f"{row[0]}")
            before = topic.count()
            changes += 1
            source.sql(f"UPDATE {table} SET v = %s WHERE id = 1", (changes,))
            took = topic.wait_beyond(before, alive)
            assert took < 15, f"after {row[0]}, the stream was held up {took:.1f}s"
        for record in records:
            send_records(endpoints.bootstrap_servers, config.signal_topic_name, [record])
            refused += 1
            wait_until(lambda n=refused: run.stats.signals_refused >= n, alive, f"{record[0]!r}")
            before = topic.count()
            changes += 1
            source.sql(f"UPDATE {table} SET v = %s WHERE id = 1", (changes,))
            topic.wait_beyond(before, alive)
        assert run.stats.signals_refused == refused
        good = new_signal("execute-snapshot", (table,), "id <= 10 OR id BETWEEN 90 AND 95")
        source.sql(f"INSERT INTO {source.table('sig')} VALUES (%s, %s, %s)", good.to_row())
        wait_until(
            lambda: table in run.stats.incremental_rows and not run.runner.ledger.queue,
            alive,
            "the good snapshot did not run",
        )
        source.caught_up(run)
        run.stop()
    topic.close()
    assert run.stats.signals_refused == refused
    snapshot = sorted(
        int(r.decoded.after["id"])
        for r in read_topic(endpoints, source.topic("t"))
        if isinstance(r.decoded, ChangeEvent)
        and r.decoded.source.snapshot_raw == "incremental"
        and r.decoded.after
    )
    assert set(snapshot) <= {*range(1, 11), *range(90, 96)} and len(snapshot) >= 15


def test_a_stored_snapshot_whose_chunk_query_fails_is_stopped_and_capture_goes_on(
    db: Db, tmp_path: Path
) -> None:
    """The ledger holds a snapshot whose condition parses but the server refuses
    (``id = 'abc'`` on an integer): its chunk query fails, the snapshot is stopped with
    the server's reason, and capture streams on (it used to stop, at every start)."""
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, v int)")
    db.sql(f"INSERT INTO {s}.t SELECT g, 0 FROM generate_series(1, 50) g")
    config = db.config(["t"])
    endpoints = capture_endpoints(db.endpoints, tmp_path)
    kafka, store, key, ledger = run_once(db, config, endpoints)
    assert ledger is not None
    ledger.queue = [Pending(f"{s}.t", "typed", "id = 'abc'")]
    store.write_acknowledged(Producer(kafka), key, ledger.to_json())
    topic = TopicEnd(db.endpoints.bootstrap_servers, db.topic("t"))
    with in_process(config, endpoints) as run:
        run.wait_snapshot()

        def alive() -> None:
            assert run.error is None and run.thread.is_alive(), run.error

        wait_until(lambda: not run.runner.ledger.queue, alive, "the snapshot was not stopped")
        before = topic.count()
        db.sql(f"UPDATE {s}.t SET v = 1 WHERE id = 1")
        topic.wait_beyond(before, alive)
        run.stop()
    topic.close()
    stored = Ledger.from_json(store.read(key))
    assert stored is not None and not stored.queue
