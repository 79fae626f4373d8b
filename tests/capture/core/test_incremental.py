"""Incremental snapshots (capture/core/incremental.py, DBLog) against the real databases
and broker: a table added to a capture that already ran gets all its rows, interleaved
with the stream, on either source; signals, pause and resume, a kill mid-snapshot."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from bizevents.capture.core.signals import Signal, SignalTopic, new_signal, signal_table_ddl
from bizevents.contracts.envelope import ChangeEvent
from tests.capture.capture_helpers import (
    REPO,
    Db,
    Record,
    capture_endpoints,
    cli_env,
    final_state,
    in_process,
    key_of,
    read_topic,
    signal_cli,
    start_cli,
    terminate,
    wait_confirmed,
    wait_for,
    wait_snapshot_done,
    write_config,
)
from tests.capture.mysql_helpers import MyDb
from tests.capture.sources import MySource, PgSource, Source

pytestmark = pytest.mark.integration


def assert_no_snapshot_row_older_than_the_stream(records: list[Record]) -> None:
    """Per key, in topic order, ``v`` never goes back: no snapshot row follows a later
    stream change of its key."""
    last: dict[tuple[Any, ...], int] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        d = r.decoded
        if not isinstance(d, ChangeEvent) or d.after is None or d.key is None:
            continue
        k = key_of(d.key)
        v = int(d.after["v"])
        assert v >= last.get(k, -1), f"key {k}: {d.op} with v={v} after v={last[k]}"
        last[k] = v


def _incremental_rows(records: list[Record]) -> list[ChangeEvent]:
    """The change events an incremental snapshot wrote."""
    return [
        r.decoded
        for r in records
        if isinstance(r.decoded, ChangeEvent) and r.decoded.source.snapshot_raw == "incremental"
    ]


def test_a_table_added_later_gets_all_its_rows_under_concurrent_writes(
    source: Source, tmp_path: Path
) -> None:
    """Capture ``a``; stop; create and fill ``b``; add it; start again while a writer
    changes ``b``: ``b``'s rows arrive as op r, ``source.snapshot = incremental``,
    interleaved with its stream; the topic's latest state per key equals the table and
    no snapshot row is older than a stream change before it."""
    source.sql(f"CREATE TABLE {source.table('a')} (id INT PRIMARY KEY, v BIGINT)")
    source.sql(f"INSERT INTO {source.table('a')} VALUES (1, 0), (2, 0)")
    with source.in_process(source.config(["a"]), tmp_path) as run:
        run.wait_snapshot()
        source.caught_up(run)
        run.stop()
    source.sequenced_table("b", 20_000)
    config = source.config(["a", "b"], partitions=3, incremental_chunk_rows=500)
    with (
        source.writer("b", 22_000, seed=5) as writer,
        source.in_process(config, tmp_path) as run,
    ):
        wait_for(
            lambda: source.table("b") in run.runner.ledger.tables,
            run,
            "the incremental snapshot did not finish",
            180,
        )
        time.sleep(0.5)
        writer.stop.set()
        writer.thread.join(30)
        source.caught_up(run)
        run.stop()
    assert writer.writes > 100
    records = read_topic(source.db.endpoints, source.topic("b"))
    snapshot = [
        r.decoded for r in records if isinstance(r.decoded, ChangeEvent) and r.decoded.op == "r"
    ]
    assert snapshot and {e.source.snapshot_raw for e in snapshot} == {"incremental"}
    assert len(snapshot) >= 20_000 - writer.writes
    assert any(isinstance(r.decoded, ChangeEvent) and r.decoded.op == "u" for r in records)
    assert_no_snapshot_row_older_than_the_stream(records)
    assert final_state(records) == source.table_state("b")
    ledger = source.stored_ledger()
    assert ledger is not None and source.table("b") in ledger.tables and not ledger.queue


def test_an_on_demand_snapshot_under_updates_can_be_paused_and_resumed(
    db: Db, tmp_path: Path
) -> None:
    """A snapshot of a captured table with a condition, asked for through the signal
    table in the same transaction as a pause, while a writer changes the table (over
    1,000 changes/s): paused, it writes nothing; resumed with ``bizevents capture snapshot
    --resume``, it ends with the topic's state equal to the table and no snapshot row
    older than a stream change of its key."""
    s = db.schema
    pg = PgSource(db)
    pg.sequenced_table("t", 20_000)
    db.sql(signal_table_ddl(f"{s}.sig", mysql=False))
    config = db.config(["t"], partitions=3, incremental_chunk_rows=200, signal_table=f"{s}.sig")
    config_file = write_config(tmp_path / "capture.toml", config)
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        ledger = run.runner.ledger
        with pg.writer("t", 21_000, seed=9) as writer:
            snapshot, pause = (
                new_signal("execute-snapshot", (f"{s}.t",), "id > 5000"),
                new_signal("pause-snapshot"),
            )
            with db.conn.cursor() as cur:
                cur.execute("BEGIN")
                for sig in (snapshot, pause):
                    cur.execute(f"INSERT INTO {s}.sig VALUES (%s, %s, %s)", sig.to_row())
                cur.execute("COMMIT")
            wait_for(lambda: bool(ledger.queue) and ledger.queue[0].paused, run, "never paused")
            time.sleep(1.5)
            assert ledger.queue and ledger.queue[0].rows == 0, "a paused snapshot went on"
            resumed = signal_cli(config_file, db.endpoints, "--resume")
            assert resumed.returncode == 0, resumed.stderr
            wait_for(lambda: not ledger.queue, run, "the snapshot did not finish")
            time.sleep(0.5)
        run.wait_acked(db.wal_lsn())
        run.stop()
    assert writer.writes > 500
    records = read_topic(db.endpoints, db.topic("t"))
    incremental = _incremental_rows(records)
    assert incremental and all(int(e.after["id"]) > 5000 for e in incremental if e.after)
    assert len(incremental) >= 15_000 - writer.writes
    assert_no_snapshot_row_older_than_the_stream(records)
    assert final_state(records) == PgSource(db).table_state("t")


def test_bad_signals_get_one_sentence_and_capture_goes_on(db: Db, tmp_path: Path) -> None:
    """Through the signal table: a table not captured, a condition that does not parse,
    a second snapshot of a table being snapshotted, an unknown type: one sentence each in
    the log; capture streams on and the good snapshot ends."""
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, v bigint)")
    db.sql(f"CREATE TABLE {s}.other (id int PRIMARY KEY)")
    db.sql(f"INSERT INTO {s}.t SELECT g, 0 FROM generate_series(1, 3000) g")
    db.sql(signal_table_ddl(f"{s}.sig", mysql=False))
    config = db.config(["t"], signal_table=f"{s}.sig", incremental_chunk_rows=100)
    config_file = write_config(tmp_path / "capture.toml", config)
    log = tmp_path / "capture.log"
    process = start_cli(config_file, db.endpoints, log)
    try:
        wait_snapshot_done(db, None, process, log)

        def signal(sid: str, kind: str, data: str) -> None:
            db.sql(f"INSERT INTO {s}.sig VALUES (%s, %s, %s)", (sid, kind, data))

        def snapshot_of(table: str, where: str | None = None) -> str:
            data: dict[str, Any] = {"data-collections": [table]}
            if where is not None:
                data["additional-conditions"] = [{"data-collection": table, "filter": where}]
            return json.dumps(data)

        signal("s1", "execute-snapshot", snapshot_of(f"{s}.other"))
        signal("s2", "execute-snapshot", snapshot_of(f"{s}.t", "id >>> 3"))
        signal("s3", "execute-snapshot", snapshot_of(f"{s}.t"))
        signal("s4", "execute-snapshot", snapshot_of(f"{s}.t"))
        signal("s5", "drop-everything", "{}")
        db.sql(f"UPDATE {s}.t SET v = 1 WHERE id = 1")
        wait_confirmed(db, db.wal_lsn(), process=process, log=log)
        deadline = time.monotonic() + 60
        while "incremental snapshot done" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        assert terminate(process) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    text = log.read_text()
    refused = [line for line in text.splitlines() if "signal refused" in line]
    assert len(refused) == 4, refused
    assert f"table {s}.other is not captured here" in refused[0]
    assert "does not parse" in refused[1] and "id >>> 3" in refused[1]
    assert "already being snapshotted (signal 's3')" in refused[2]
    assert "has type 'drop-everything'" in refused[3]
    assert "Traceback" not in text
    records = read_topic(db.endpoints, db.topic("t"))
    snapshot_ids = [
        int(r.decoded.after["id"])
        for r in records
        if isinstance(r.decoded, ChangeEvent) and r.decoded.source.snapshot_raw == "incremental"
    ]
    # Row 1's update may have superseded its snapshot row (it fell in its window).
    assert set(range(2, 3001)) <= set(snapshot_ids) <= set(range(1, 3001))
    assert len(snapshot_ids) == len(set(snapshot_ids))
    assert final_state(records) == PgSource(db).table_state("t")


def test_a_missing_signal_table_stops_start_up_with_its_ddl(db: Db, tmp_path: Path) -> None:
    """A configured signal table that does not exist: exit 1, one sentence with the DDL."""
    db.sql(f"CREATE TABLE {db.schema}.t (id int PRIMARY KEY)")
    config = db.config(["t"], signal_table=f"{db.schema}.nosuch")
    config_file = write_config(tmp_path / "capture.toml", config)
    result = subprocess.run(
        [sys.executable, "-m", "bizevents", "capture", "postgres", str(config_file)],
        env=cli_env(db.endpoints),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 1
    assert f"CREATE TABLE {db.schema}.nosuch (id varchar(42) PRIMARY KEY" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_kill_9_during_an_incremental_snapshot_resumes_from_the_last_acknowledged_chunk(
    db: Db, tmp_path: Path
) -> None:
    """kill -9 mid-snapshot: the restart reads on from the last chunk whose rows Kafka
    acknowledged (no key up to it is written twice); the table ends complete. With
    ``progress = "always"`` and the log in a file, the snapshot's progress is in the log
    of both runs, and the resumed run's done line counts its own rows."""
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, v bigint)")
    db.sql(f"INSERT INTO {s}.t SELECT g, 0 FROM generate_series(1, 30000) g")
    # Tiny chunks: each one a round trip through the WAL, so the kill lands mid-way.
    config = db.config(["t"], incremental_chunk_rows=10, progress="always")
    config_file = write_config(tmp_path / "capture.toml", config)
    log = tmp_path / "capture.log"
    process = start_cli(config_file, db.endpoints, log)
    try:
        wait_snapshot_done(db, None, process, log)
        # Straight to the signal topic (the CLI's Python start-up takes longer than the
        # snapshot).
        kafka = {"bootstrap.servers": db.endpoints.bootstrap_servers}
        producer = Producer(kafka)
        SignalTopic(kafka, config.signal_topic_name, db.server).send(
            producer, new_signal("execute-snapshot", (f"{s}.t",))
        )
        producer.flush(10)
        deadline = time.monotonic() + 90
        while True:
            ledger = PgSource(db).stored_ledger()
            if ledger is not None and ledger.queue and ledger.queue[0].rows >= 2000:
                break
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        process.kill()  # SIGKILL
        process.wait(10)
        first_run = log.read_text()
        assert "snapshot progress" in first_run, first_run[-3000:]
        at_kill = PgSource(db).stored_ledger()
        assert at_kill is not None and at_kill.queue
        acked = at_kill.queue[0]
        assert acked.after is not None and 0 < acked.rows < 30_000
        process = start_cli(config_file, db.endpoints, log)
        deadline = time.monotonic() + 120
        while True:
            ledger = PgSource(db).stored_ledger()
            if ledger is not None and not ledger.queue:
                break
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        assert terminate(process) == 0, log.read_text()[-3000:]
        second_run = log.read_text()[len(first_run) :]
        assert "snapshot progress" in second_run, second_run[-3000:]
        (done,) = [
            json.loads(line)
            for line in second_run.splitlines()
            if "incremental snapshot done" in line
        ]
        rows = int(done["rows"])
        # this run's rows: those after the last acknowledged chunk (and the chunks in
        # flight at the kill, written again), not the ledger's count of both runs
        assert 30_000 - acked.rows <= rows < 30_000 - acked.rows + 1_000, done
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    records = read_topic(db.endpoints, db.topic("t"))
    incremental = [
        int(r.decoded.after["id"])
        for r in records
        if isinstance(r.decoded, ChangeEvent) and r.decoded.source.snapshot_raw == "incremental"
    ]
    up_to = int(acked.after[0] or 0)
    assert up_to == acked.rows  # ids 1..n, one chunk after another
    early = [i for i in incremental if i <= up_to]
    assert sorted(early) == list(range(1, up_to + 1)), (
        "a key up to the last acknowledged chunk was read twice"
    )
    assert set(incremental) == set(range(1, 30_001))
    assert final_state(records) == PgSource(db).table_state("t")


@pytest.mark.mysql
def test_mariadb_signal_table_snapshots_with_a_condition_and_refuses_bad_signals(
    db: MyDb, tmp_path: Path
) -> None:
    """Signals through MariaDB's signal table: a snapshot of the rows ``id > 500``
    (under writes) ends with the topic equal to the table; a signal for a table not
    captured and a condition that does not parse are refused; capture goes on."""
    source = MySource(db)
    source.sequenced_table("b", 3000)
    db.sql(signal_table_ddl("sig", mysql=True))
    config = db.config(["b"], incremental_chunk_rows=200, signal_table=f"{db.name}.sig")
    with (
        source.writer("b", 3_200, seed=4) as writer,
        source.in_process(config, tmp_path) as run,
    ):
        run.wait_snapshot()
        ledger = run.runner.ledger
        for sig in (
            new_signal("execute-snapshot", (f"{db.name}.nope",)),
            # Written by hand: new_signal refuses a condition that does not parse.
            Signal("bad", "execute-snapshot", (f"{db.name}.b",), ((f"{db.name}.b", "id >>> 2"),)),
            new_signal("execute-snapshot", (f"{db.name}.b",), "id > 500"),
        ):
            db.sql("INSERT INTO sig VALUES (%s, %s, %s)", sig.to_row())

        def ended() -> bool:
            return not ledger.queue and run.stats.signals_refused >= 2

        wait_for(ended, run, "the snapshot did not end")
        time.sleep(0.3)
        writer.stop.set()
        writer.thread.join(30)
        run.wait_position(db.binlog_end())
        run.stop()
    assert run.stats.signals_refused == 2
    records = read_topic(db.endpoints, db.topic("b"))
    incremental = _incremental_rows(records)
    assert incremental and all(int(e.after["id"]) > 500 for e in incremental if e.after)
    assert_no_snapshot_row_older_than_the_stream(records)
    assert final_state(records) == source.table_state("b")
