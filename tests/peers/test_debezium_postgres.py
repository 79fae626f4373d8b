"""The same PostgreSQL changes through bizevents capture and through Debezium's embedded
engine, compared record by record (tests/peers/compare.py); every difference is one row
of docs/technical-envelope.md's table, held true here."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bizevents.capture.core.signals import new_signal, signal_table_ddl
from bizevents.contracts.envelope import ChangeEvent, Tombstone
from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import Db, capture_endpoints, database, in_process, read_topic
from tests.capture.postgres.test_pgoutput_live import COLUMNS, ROWS
from tests.peers import compare, differences, harness

pytestmark = pytest.mark.integration


@pytest.fixture
def db(bizevents_stack: Endpoints) -> Any:
    reason = harness.missing()
    if reason is not None:
        pytest.fail(reason)
    with database(bizevents_stack) as made:
        yield made


def _snapshot(r: harness.Record) -> str | None:
    source = (r.value or {}).get("payload", {}).get("source") or {}
    return source.get("snapshot")


def _incremental(r: harness.Record) -> bool:
    return _snapshot(r) == "incremental"


def _insert(db: Db, table: str, row: dict[str, Any]) -> None:
    names = list(row)
    db.sql(
        f"INSERT INTO {db.schema}.{table} ({', '.join(names)}) "
        f"VALUES ({', '.join(['%s'] * len(names))})",
        [row[n] for n in names],
    )


def test_postgres_records_equal_debeziums_but_for_the_table(db: Db, tmp_path: Path) -> None:
    s = db.schema
    db.sql(f"CREATE TYPE {s}.mood AS ENUM ('sad', 'ok', 'happy')")
    cols = ", ".join(f"{n} {t.format(mood=f'{s}.mood')}" for n, t in COLUMNS)
    db.sql(f"CREATE TABLE {s}.everything ({cols})")
    db.sql(f"CREATE TABLE {s}.items (id int PRIMARY KEY, note text, qty int)")
    db.sql(f"ALTER TABLE {s}.items REPLICA IDENTITY FULL")
    # the mapped types tests/capture/postgres/test_pgoutput_live.py's COLUMNS leaves out
    db.sql(f'CREATE TABLE {s}.more (id int PRIMARY KEY, m8 macaddr8, c "char")')
    db.sql(f"CREATE TABLE {s}.done (id int PRIMARY KEY)")
    db.sql(signal_table_ddl(f"{s}.sig", mysql=False))  # both read their signals from it
    rows = [dict(r) for r in ROWS]
    rows[2]["free"] = None  # NaN has no decimal in either
    rows[2]["d"] = None  # infinity: Debezium writes a day count no date holds (the table)
    _insert(db, "everything", rows[0])  # the initial snapshot reads it
    _insert(db, "items", {"id": 100, "note": "snapshot", "qty": 1})
    _insert(db, "more", {"id": 1, "m8": "08:00:2b:01:02:03:04:05", "c": "x"})

    tables = ["everything", "items", "more", "done"]
    config = db.config(tables, partitions=1, signal_table=f"{s}.sig")
    dbz = harness.start(
        harness.postgres_properties(
            db.endpoints.postgres_dsn,
            db.server,
            f"{db.slot}_dbz",
            f"{db.publication}_dbz",
            [f"{s}.{t}" for t in [*tables, "sig"]],
            **{"signal.data.collection": f"{s}.sig"},
        ),
        tmp_path / "debezium",
        until_topic=".done",
    )
    try:
        with in_process(config, capture_endpoints(db.endpoints, tmp_path / "state")) as run:
            run.wait_snapshot()
            dbz.wait_for(lambda rs: any(_snapshot(r) == "last" for r in rs))
            with db.conn:  # a multi-row transaction
                db.conn.autocommit = False
                _insert(db, "everything", rows[1])
                _insert(db, "everything", rows[2])
                _insert(db, "items", {"id": 1, "note": "one", "qty": 1})
                _insert(db, "more", {"id": 2, "m8": "08:00:2b:ff:fe:01:02:03", "c": "y"})
            db.conn.autocommit = True
            db.sql(f"UPDATE {s}.everything SET i = i - 1 WHERE id = 1")  # TOAST untouched
            db.sql(f"UPDATE {s}.items SET qty = 2 WHERE id = 1")
            db.sql(f"UPDATE {s}.items SET id = 2 WHERE id = 1")  # a key change
            db.sql(f"DELETE FROM {s}.items WHERE id = 100")
            db.conn.autocommit = False
            _insert(db, "items", {"id": 9, "note": "rolled back", "qty": 9})
            db.conn.rollback()
            db.conn.autocommit = True
            db.sql(f"ALTER TABLE {s}.items ADD COLUMN extra int")
            _insert(db, "items", {"id": 3, "note": "added", "qty": 3, "extra": 33})
            db.sql(f"ALTER TABLE {s}.items DROP COLUMN extra")
            _insert(db, "items", {"id": 4, "note": "dropped", "qty": 4})
            db.sql(f"DELETE FROM {s}.everything WHERE id = 3")
            signal = new_signal("execute-snapshot", (f"{s}.items",))
            db.sql(f"INSERT INTO {s}.sig VALUES (%s, %s, %s)", signal.to_row())
            ledger = run.runner.ledger
            deadline = time.monotonic() + 60
            while ledger.queue or not run.stats.incremental_rows:
                assert time.monotonic() < deadline, "bizevents' incremental snapshot did not end"
                time.sleep(0.1)
            dbz.wait_for(lambda rs: sum(_incremental(r) for r in rs) == 3)  # items 2, 3, 4
            _insert(db, "done", {"id": 1})
            run.wait_acked(db.wal_lsn())
            run.stop()
        dbz.finish()
    finally:
        dbz.stop()

    topics = {db.topic(t) for t in tables}
    ours = [
        (db.topic(t), r.decoded)
        for t in tables
        for r in sorted(read_topic(db.endpoints, db.topic(t)), key=lambda r: r.offset)
    ]
    records = dbz.records()
    tx_topic = f"{db.server}.transaction"
    theirs = compare.debezium_changes(records, topics)
    mine, peer = compare.per_key(ours), compare.per_key(theirs)
    assert sum(isinstance(d, Tombstone) for _, d in ours) == 3  # two deletes, a key change
    assert any(
        isinstance(d, ChangeEvent) and d.source.snapshot_raw == "incremental" for _, d in theirs
    )
    rows = differences.rows_for("PostgreSQL")
    compare.hold_table(compare.differences(mine, peer), rows, mine)
    compare.hold_transactions(
        compare.read_transactions(db.endpoints, tx_topic),
        compare.debezium_transactions(records, tx_topic),
        {f"{s}.{t}" for t in tables},
        rows["transaction.id"].holds,
    )


def test_the_table_in_the_document_is_the_table_the_tests_hold() -> None:
    assert differences.documented() == {p: r.database for p, r in differences.ROWS.items()}
