"""Incremental snapshots against the session's real MariaDB and the broker: a table
added to a capture that already ran gets all its rows, interleaved with the binlog."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bizevents.capture.core.signals import Signal, new_signal, signal_table_ddl
from bizevents.capture.core.state import Ledger, StateStore
from bizevents.capture.mariadb import queries as my
from bizevents.contracts.envelope import ChangeEvent
from tests.capture.capture_helpers import final_state, read_topic
from tests.capture.mysql_helpers import MyDb, in_process
from tests.capture.test_capture_incremental import assert_no_snapshot_row_older_than_the_stream

pytestmark = [pytest.mark.integration, pytest.mark.mysql]


def stored_ledger(db: MyDb) -> Ledger | None:
    store = StateStore(
        {"bootstrap.servers": db.endpoints.bootstrap_servers},
        f"{db.server}.capture.offsets",
        db.server,
    )
    return Ledger.from_json(store.read(store.ledger_key("binlog")))


class Writer:
    """Upserts and deletes until stopped; ``v`` comes from one sequence."""

    def __init__(self, db: MyDb, table: str, keys: int, seed: int) -> None:
        self.db, self.table, self.keys, self.seed = db, table, keys, seed
        self.stop = threading.Event()
        self.writes = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        conn = my.connect(self.db.dsn)
        rnd = random.Random(self.seed)
        t = f"{self.db.name}.{self.table}"
        seq = f"NEXTVAL({self.db.name}.seq)"
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    k = rnd.randrange(1, self.keys)
                    if rnd.random() < 0.8:
                        cur.execute(
                            f"INSERT INTO {t} VALUES (%s, {seq}, 'w') "
                            f"ON DUPLICATE KEY UPDATE v = {seq}, note = 'u'",
                            (k,),
                        )
                    else:
                        cur.execute(f"DELETE FROM {t} WHERE id = %s", (k,))
                    self.writes += 1
                    time.sleep(0.001)
        finally:
            conn.close()

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def test_a_table_added_later_gets_all_its_rows_under_concurrent_writes(
    db: MyDb, tmp_path: Path
) -> None:
    """Capture ``a``; stop; create and fill ``b``; add it; start again while a writer
    changes ``b``: its rows arrive as op r with ``source.snapshot = incremental``; the
    topic's latest state per key equals the table; no snapshot row is older than a
    stream change of its key before it."""
    db.sql("CREATE TABLE a (id INT PRIMARY KEY, v BIGINT)")
    db.sql("INSERT INTO a VALUES (1, 0), (2, 0)")
    endpoints = db.capture_endpoints(tmp_path)
    with in_process(db.config(["a"]), endpoints) as run:
        run.wait_snapshot()
        run.wait_position(db.binlog_end())
        run.stop()
    db.sql("CREATE SEQUENCE seq")
    db.sql("CREATE TABLE b (id INT PRIMARY KEY, v BIGINT NOT NULL, note VARCHAR(10))")
    with db.conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO b VALUES (%s, NEXTVAL(seq), 'init')", [(i,) for i in range(1, 10_001)]
        )
    config = db.config(["a", "b"], partitions=3, incremental_chunk_rows=500)
    with Writer(db, "b", 11_000, seed=3) as writer, in_process(config, endpoints) as run:
        deadline = time.monotonic() + 180
        while f"{db.name}.b" not in run.runner.ledger.tables:
            if run.error is not None:
                raise run.error
            assert time.monotonic() < deadline, "the incremental snapshot did not finish"
            time.sleep(0.1)
        time.sleep(0.5)
        writer.stop.set()
        writer.thread.join(30)
        run.wait_position(db.binlog_end())
        run.stop()
    assert writer.writes > 100
    records = read_topic(db.endpoints, db.topic("b"))
    snapshot = [
        r.decoded for r in records if isinstance(r.decoded, ChangeEvent) and r.decoded.op == "r"
    ]
    assert snapshot and {e.source.snapshot_raw for e in snapshot} == {"incremental"}
    assert len(snapshot) >= 10_000 - writer.writes
    assert any(isinstance(r.decoded, ChangeEvent) and r.decoded.op == "u" for r in records)
    assert_no_snapshot_row_older_than_the_stream(records)
    table = {
        (("id", i),): {"id": i, "v": v, "note": note}
        for i, v, note in db.sql("SELECT id, v, note FROM b")
    }
    assert final_state(records) == table
    ledger = stored_ledger(db)
    assert ledger is not None and f"{db.name}.b" in ledger.tables and not ledger.queue


def test_signal_table_snapshots_with_a_condition_and_refuses_bad_signals(
    db: MyDb, tmp_path: Path
) -> None:
    """Signals through MariaDB's signal table: a snapshot of the rows ``id > 500``
    (under writes) ends with the topic equal to the table; a signal for a table not
    captured and a condition that does not parse are refused; capture goes on."""
    db.sql("CREATE SEQUENCE seq")
    db.sql("CREATE TABLE b (id INT PRIMARY KEY, v BIGINT NOT NULL, note VARCHAR(10))")
    with db.conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO b VALUES (%s, NEXTVAL(seq), 'init')", [(i,) for i in range(1, 3001)]
        )
    db.sql(signal_table_ddl("sig", mysql=True))
    config = db.config(["b"], incremental_chunk_rows=200, signal_table=f"{db.name}.sig")
    with (
        Writer(db, "b", 3_200, seed=4) as writer,
        in_process(config, db.capture_endpoints(tmp_path)) as run,
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
        deadline = time.monotonic() + 120
        while ledger.queue or run.stats.signals_refused < 2:
            if run.error is not None:
                raise run.error
            assert time.monotonic() < deadline, "the snapshot did not end"
            time.sleep(0.1)
        time.sleep(0.3)
        writer.stop.set()
        writer.thread.join(30)
        run.wait_position(db.binlog_end())
        run.stop()
    assert run.stats.signals_refused == 2
    records = read_topic(db.endpoints, db.topic("b"))
    incremental = [
        r.decoded
        for r in records
        if isinstance(r.decoded, ChangeEvent) and r.decoded.source.snapshot_raw == "incremental"
    ]
    assert incremental and all(int(e.after["id"]) > 500 for e in incremental if e.after)
    assert_no_snapshot_row_older_than_the_stream(records)
    table = {
        (("id", i),): {"id": i, "v": v, "note": note}
        for i, v, note in db.sql("SELECT id, v, note FROM b")
    }
    assert final_state(records) == table


def test_verify_finds_a_planted_gap_in_a_mariadb_table_and_repair_closes_it(
    db: MyDb, tmp_path: Path
) -> None:
    """``bizevents verify`` on a MariaDB table: 0 differences; a hand-written tombstone
    for a live row is found as missing; ``--repair`` snapshots its chunk again; 0."""
    from confluent_kafka import Producer

    from bizevents.contracts.binary import zigzag
    from tests.capture.capture_helpers import cli_env
    from tests.capture.test_verify import records_by_id

    db.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT, note VARCHAR(20))")
    with db.conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO t VALUES (%s, %s, %s)", [(i, i * 2, f"row {i}") for i in range(1, 1201)]
        )
    config = db.config(["t"], partitions=2)
    config_file = tmp_path / "capture.toml"
    config_file.write_text(
        f'server = "{db.server}"\ndsn = "{db.dsn}"\ntables = ["{db.name}.t"]\npartitions = 2\n'
    )

    def verify(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bizevents", "verify", str(config_file), *args],
            env=cli_env(db.endpoints),
            capture_output=True,
            text=True,
            timeout=180,
        )

    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("UPDATE t SET v = -1 WHERE id % 100 = 0")
        db.sql("DELETE FROM t WHERE id = 1200")
        run.wait_position(db.binlog_end())
        clean = verify("--chunk-rows", "500")
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert "1199 rows in 3 chunks, 1199 keys" in clean.stdout
        topic = db.topic("t")
        by_id = {k[5:]: v for k, v in records_by_id(db, topic).items()}
        key42, _ = by_id[zigzag(42)]
        producer = Producer(
            {"bootstrap.servers": db.endpoints.bootstrap_servers, "partitioner": "murmur2_random"}
        )
        producer.produce(topic, None, key42)
        producer.flush(10)
        found = verify("--chunk-rows", "500", "--repair")
        assert found.returncode == 1, found.stdout + found.stderr
        assert "missing id=42:" in found.stdout and "1 differences" in found.stdout
        assert "repair: signal" in found.stdout and "Traceback" not in found.stderr
        ledger = run.runner.ledger
        deadline = time.monotonic() + 60
        while not ledger.queue and time.monotonic() < deadline:
            time.sleep(0.1)
        while ledger.queue and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not ledger.queue, "the repair's snapshot did not run"
        run.wait_position(db.binlog_end())
        after = verify("--chunk-rows", "500")
        assert after.returncode == 0, after.stdout + after.stderr
        run.stop()


def test_verify_finds_the_rows_changed_while_capture_was_stopped_and_its_position_lost(
    db: MyDb, tmp_path: Path
) -> None:
    """MariaDB's planted gap: capture runs and stops; its stored binlog position is
    lost (tombstoned, as after a purged binlog and a new offsets topic); rows are
    inserted, updated and deleted; capture starts again at the binlog's end without a
    snapshot. Verify names every one of those keys and exits 1; ``--repair`` tombstones
    the deletes the topic lacks and brings the inserts and updates back; then 0."""
    from confluent_kafka import Producer

    from tests.capture.capture_helpers import cli_env
    from tests.capture.test_verify import wait_repaired

    db.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT, note VARCHAR(20))")
    with db.conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO t VALUES (%s, %s, %s)", [(i, i * 2, f"row {i}") for i in range(1, 1201)]
        )
    config_file = tmp_path / "capture.toml"
    config_file.write_text(
        f'server = "{db.server}"\ndsn = "{db.dsn}"\ntables = ["{db.name}.t"]\npartitions = 2\n'
    )

    def verify(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bizevents", "verify", str(config_file), *args],
            env=cli_env(db.endpoints),
            capture_output=True,
            text=True,
            timeout=180,
        )

    first = db.config(["t"], partitions=2)
    with in_process(first, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("UPDATE t SET v = -1 WHERE id % 250 = 0")
        run.wait_position(db.binlog_end())
        run.stop()
    kafka = {"bootstrap.servers": db.endpoints.bootstrap_servers}
    store = StateStore(kafka, first.offsets_topic_name, first.server)
    store.write_acknowledged(Producer(kafka), store.position_key(), None)
    assert db.stored_offset(first) is None

    inserted = list(range(1201, 1206))
    updated = [5, 600, 1100]
    deleted = [10, 900]
    with db.conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s, 'late')", [(i, i) for i in inserted])
    db.sql("UPDATE t SET note = 'changed' WHERE id IN (5, 600, 1100)")
    db.sql("DELETE FROM t WHERE id IN (10, 900)")

    again = db.config(["t"], partitions=2, snapshot="never")
    with in_process(again, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("INSERT INTO t VALUES (3000, 3000, 'after the restart')")
        run.wait_position(db.binlog_end())

        found = verify("--chunk-rows", "500", "--rechecks", "1")
        assert found.returncode == 1, found.stdout + found.stderr
        assert "Traceback" not in found.stderr
        lines = [line.strip() for line in found.stdout.splitlines()]
        expected = (
            [f"missing id={i}:" for i in inserted]
            + [f"differs id={i}:" for i in updated]
            + [f"extra id={i}:" for i in deleted]
        )
        for start in expected:
            assert any(line.startswith(start) for line in lines), (start, found.stdout)
        assert f"{len(expected)} differences" in found.stdout, found.stdout
        assert "1204 rows in 3 chunks" in found.stdout, found.stdout
        # Each key with the positions between which it changed: the topic's last record
        # (binlog file:pos, GTID) and the binlog position the chunk's snapshot matched.
        binlog = r"([\w.-]+):(\d+)(?: GTID [\d,-]+)?"
        for i in updated + deleted:
            kind = "differs" if i in updated else "extra"
            line = next(x for x in lines if x.startswith(f"{kind} id={i}:"))
            got = re.search(
                rf"last record of it \(partition \d+ offset \d+: r at {binlog}\) "
                rf"and the database at {binlog}$",
                line,
            )
            assert got is not None, line
            topic_at = (got.group(1), int(got.group(2)))
            assert topic_at < (got.group(3), int(got.group(4))), line
        for i in inserted:
            line = next(x for x in lines if x.startswith(f"missing id={i}:"))
            assert re.search(rf"holds no record of this key\) and the database at {binlog}$", line)

        repaired = verify("--chunk-rows", "500", "--repair")
        assert repaired.returncode == 1 and "repair: signal" in repaired.stdout, repaired.stdout
        assert f"repair: {len(deleted)} tombstones written" in repaired.stdout, repaired.stdout
        wait_repaired(run)
        run.wait_position(db.binlog_end())
        after = verify("--chunk-rows", "500")
        assert after.returncode == 0, after.stdout + after.stderr
        assert "1204 rows in 3 chunks, 1204 keys" in after.stdout, after.stdout
        run.stop()
