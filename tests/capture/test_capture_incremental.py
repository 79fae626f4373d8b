"""Incremental snapshots against the real PostgreSQL and broker: a table added to a
capture that already ran gets all its rows, interleaved with the stream (DBLog)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras
import pytest

from bizevents.capture.state import Ledger, StateStore
from bizevents.contracts.envelope import ChangeEvent
from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import (
    Db,
    Record,
    capture_endpoints,
    database,
    final_state,
    in_process,
    key_of,
    read_topic,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def db(bizevents_stack: Endpoints) -> Any:
    with database(bizevents_stack) as made:
        yield made


def table_state(db: Db, table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    with db.conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute(f"SELECT * FROM {db.schema}.{table}")
        return {(("id", r["id"]),): dict(r) for r in cur.fetchall()}


def stored_ledger(db: Db) -> Ledger | None:
    store = StateStore(
        {"bootstrap.servers": db.endpoints.bootstrap_servers},
        f"{db.server}.capture.offsets",
        db.server,
    )
    return Ledger.from_json(store.read(store.ledger_key(db.slot)))


class Writer:
    """Upserts and deletes on ``table`` until stopped; every write sets ``v`` from one
    sequence, so a key's successive states carry increasing ``v``."""

    def __init__(self, db: Db, table: str, keys: int, seed: int) -> None:
        self.db, self.table, self.keys, self.seed = db, table, keys, seed
        self.stop = threading.Event()
        self.writes = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        conn = psycopg2.connect(self.db.endpoints.postgres_dsn)
        rnd = random.Random(self.seed)
        t = f"{self.db.schema}.{self.table}"
        seq = f"nextval('{self.db.schema}.seq')"
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    for _ in range(10):
                        k = rnd.randrange(1, self.keys)
                        if rnd.random() < 0.8:
                            cur.execute(
                                f"INSERT INTO {t} VALUES (%s, {seq}, 'w') "
                                f"ON CONFLICT (id) DO UPDATE SET v = {seq}, note = 'u'",
                                (k,),
                            )
                        else:
                            cur.execute(f"DELETE FROM {t} WHERE id = %s", (k,))
                        self.writes += 1
                    conn.commit()
                    time.sleep(0.002)
        finally:
            conn.close()

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


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


def test_a_table_added_later_gets_all_its_rows_under_concurrent_writes(
    db: Db, tmp_path: Path
) -> None:
    """Capture ``a``; stop; create and fill ``b``; add it; start again while a writer
    changes ``b``: ``b``'s rows arrive as op r, ``source.snapshot = incremental``,
    interleaved with its stream; the topic's latest state per key equals the table and
    no snapshot row is older than a stream change before it."""
    s = db.schema
    db.sql(f"CREATE TABLE {s}.a (id int PRIMARY KEY, v bigint)")
    db.sql(f"INSERT INTO {s}.a SELECT g, 0 FROM generate_series(1, 10) g")
    endpoints = capture_endpoints(db.endpoints, tmp_path)
    with in_process(db.config(["a"]), endpoints) as run:
        run.wait_snapshot()
        run.wait_acked(db.wal_lsn())
        run.stop()
    db.sql(f"CREATE SEQUENCE {s}.seq")
    db.sql(f"CREATE TABLE {s}.b (id int PRIMARY KEY, v bigint NOT NULL, note text)")
    db.sql(
        f"INSERT INTO {s}.b SELECT g, nextval('{s}.seq'), 'init' FROM generate_series(1, 20000) g"
    )
    config = db.config(["a", "b"], partitions=3, incremental_chunk_rows=500)
    with Writer(db, "b", 22_000, seed=5) as writer, in_process(config, endpoints) as run:
        deadline = time.monotonic() + 180
        while f"{s}.b" not in run.runner.ledger.tables:
            if run.error is not None:
                raise run.error
            assert time.monotonic() < deadline, "the incremental snapshot did not finish"
            time.sleep(0.1)
        time.sleep(0.5)
        writer.stop.set()
        writer.thread.join(30)
        run.wait_acked(db.wal_lsn())
        run.stop()
    assert writer.writes > 100
    records = read_topic(db.endpoints, db.topic("b"))
    snapshot = [
        r.decoded for r in records if isinstance(r.decoded, ChangeEvent) and r.decoded.op == "r"
    ]
    assert snapshot and {e.source.snapshot_raw for e in snapshot} == {"incremental"}
    assert len(snapshot) >= 20_000 - writer.writes
    assert any(isinstance(r.decoded, ChangeEvent) and r.decoded.op == "u" for r in records)
    assert_no_snapshot_row_older_than_the_stream(records)
    assert final_state(records) == table_state(db, "b")
    ledger = stored_ledger(db)
    assert ledger is not None and f"{s}.b" in ledger.tables and not ledger.queue
