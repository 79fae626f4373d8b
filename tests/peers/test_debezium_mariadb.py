"""The same MariaDB changes through bizevents capture and through Debezium's MariaDB
connector (3.5.0: 3.6.1 is not served by the registry this project reaches), compared
record by record (tests/peers/compare.py); every difference is one row of
docs/technical-envelope.md's table, held true here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bizevents.contracts.envelope import Tombstone
from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import read_topic
from tests.capture.mariadb.test_capture import EXTREMES, OTHER, TYPES_DDL
from tests.capture.mysql_helpers import MyDb, in_process, mysql_database
from tests.peers import compare, differences, harness

pytestmark = [pytest.mark.integration, pytest.mark.mysql, pytest.mark.timeout(600)]


@pytest.fixture
def db(bizevents_mysql: str, bizevents_stack: Endpoints) -> Any:
    reason = harness.missing(harness.MARIADB_TOOLS)
    if reason is not None:
        pytest.fail(reason)
    with mysql_database(bizevents_mysql, bizevents_stack) as made:
        yield made


def _insert(db: MyDb, table: str, row: dict[str, Any]) -> None:
    names = list(row)
    db.sql(
        f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})",
        [row[n] for n in names],
    )


def test_mariadb_records_equal_debeziums_but_for_the_table(db: MyDb, tmp_path: Path) -> None:
    db.sql(TYPES_DDL)
    db.sql("CREATE TABLE items (id INT PRIMARY KEY, note VARCHAR(40), qty INT)")
    db.sql("CREATE TABLE done (id INT PRIMARY KEY)")
    _insert(db, "types", OTHER)  # the initial snapshots read it
    _insert(db, "items", {"id": 100, "note": "snapshot", "qty": 1})
    db.conn.commit()

    tables = ["types", "items", "done"]
    config = db.config(tables, replica_server_id=5401)
    dbz = harness.start(
        harness.mariadb_properties(db.dsn, db.server, db.name, tables, 5400),
        tmp_path / "debezium",
        until_topic=".done",
        tools=harness.MARIADB_TOOLS,
    )
    try:
        with in_process(config, db.capture_endpoints(tmp_path / "state")) as run:
            run.wait_snapshot()
            dbz.wait_for(lambda rs: any(r.topic == db.topic("items") for r in rs))
            db.conn.autocommit(False)
            _insert(db, "types", EXTREMES)  # a multi-row transaction
            _insert(db, "items", {"id": 1, "note": "one", "qty": 1})
            db.conn.commit()
            db.conn.autocommit(True)
            db.sql("UPDATE items SET qty = 2 WHERE id = 1")
            db.sql("UPDATE items SET id = 2 WHERE id = 1")  # a key change
            db.sql("DELETE FROM items WHERE id = 100")
            db.conn.autocommit(False)
            _insert(db, "items", {"id": 9, "note": "rolled back", "qty": 9})
            db.conn.rollback()
            db.conn.autocommit(True)
            db.sql("ALTER TABLE items ADD COLUMN extra INT")
            _insert(db, "items", {"id": 3, "note": "added", "qty": 3, "extra": 33})
            db.sql("ALTER TABLE items DROP COLUMN extra")
            _insert(db, "items", {"id": 4, "note": "dropped", "qty": 4})
            db.sql("UPDATE types SET vc = 'changed' WHERE id = 0")
            _insert(db, "done", {"id": 1})
            run.wait_position(db.binlog_end())
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
    theirs = compare.debezium_changes(records, topics)
    mine, peer = compare.per_key(ours), compare.per_key(theirs)
    assert sum(isinstance(d, Tombstone) for _, d in ours) == 2  # a delete, a key change
    rows = differences.rows_for("MariaDB")
    compare.hold_table(compare.differences(mine, peer), rows, mine)
