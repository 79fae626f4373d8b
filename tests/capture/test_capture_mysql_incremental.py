"""Incremental snapshots against the session's real MariaDB and the broker: a table
added to a capture that already ran gets all its rows, interleaved with the binlog."""

from __future__ import annotations

import random
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
