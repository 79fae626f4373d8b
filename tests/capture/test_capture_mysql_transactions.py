"""Transaction metadata from the real MariaDB's binlog into the real broker: each
streamed envelope's ``transaction`` block (the GTID as id) and the BEGIN/END records of
``<server>.transaction`` with the per-table counts."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from bizevents.contracts.envelope import ChangeEvent, Tombstone
from tests.capture.capture_helpers import read_topic
from tests.capture.mysql_helpers import MyDb, in_process
from tests.capture.test_capture_transactions import read_transactions

pytestmark = [pytest.mark.integration, pytest.mark.mysql]


def test_blocks_and_begin_end_records(db: MyDb, tmp_path: Path) -> None:
    """A multi-table transaction: BEGIN, its changes numbered in commit order across the
    tables and per table, END with the counts per table; the GTID is the id; a
    rolled-back transaction and one that touched no captured table write nothing."""
    db.sql("CREATE TABLE orders (id INT PRIMARY KEY, total DECIMAL(10,2)) ENGINE=InnoDB")
    db.sql("CREATE TABLE items (id INT PRIMARY KEY, order_id INT) ENGINE=InnoDB")
    db.sql("CREATE TABLE other (id INT PRIMARY KEY) ENGINE=InnoDB")
    with in_process(db.config(["orders", "items"]), db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("BEGIN")
        db.sql("INSERT INTO orders VALUES (1, 0)")
        db.sql("INSERT INTO items VALUES (10, 1), (11, 1)")
        db.sql("UPDATE orders SET total = 9.50 WHERE id = 1")
        db.sql("DELETE FROM items WHERE id = 11")  # a delete and its tombstone
        db.sql("UPDATE items SET id = 12 WHERE id = 10")  # a key change: d, tombstone, c
        db.sql("COMMIT")
        db.sql("BEGIN")
        db.sql("INSERT INTO orders VALUES (2, 1)")
        db.sql("ROLLBACK")
        db.sql("INSERT INTO other VALUES (1)")
        db.sql("INSERT INTO orders VALUES (3, 3)")
        run.wait_position(db.binlog_end())
        run.stop()

    records = read_transactions(db.endpoints, f"{db.server}.transaction")
    assert [r.status for r in records] == ["BEGIN", "END", "BEGIN", "END"]
    first, second = records[0].id, records[2].id
    assert records[1].id == first and records[3].id == second and first != second
    assert records[1].event_count == 7
    assert records[1].counts() == {f"{db.name}.orders": 2, f"{db.name}.items": 5}
    assert records[3].event_count == 1
    assert records[3].counts() == {f"{db.name}.orders": 1}
    assert all(r.ts_ms > 0 for r in records)

    changes: list[ChangeEvent] = []
    for table in ("orders", "items"):
        for r in read_topic(db.endpoints, db.topic(table)):
            if isinstance(r.decoded, Tombstone):
                continue
            assert isinstance(r.decoded, ChangeEvent)
            changes.append(r.decoded)
    by_tx: dict[str, list[ChangeEvent]] = defaultdict(list)
    for c in changes:
        assert c.transaction is not None
        # Debezium's MySQL id: the transaction's GTID, as in the source block
        assert c.transaction.id == c.source.position.gtid  # type: ignore[union-attr]
        by_tx[c.transaction.id].append(c)
    assert set(by_tx) == {first, second}
    tx = sorted(by_tx[first], key=lambda c: c.transaction.total_order)  # type: ignore[union-attr]
    assert [c.transaction.total_order for c in tx] == list(range(1, 8))  # type: ignore[union-attr]
    assert [(c.source.table, c.op) for c in tx] == [
        ("orders", "c"),
        ("items", "c"),
        ("items", "c"),
        ("orders", "u"),
        ("items", "d"),
        ("items", "d"),
        ("items", "c"),
    ]
    per_table: dict[str | None, list[int]] = defaultdict(list)
    for c in tx:
        per_table[c.source.table].append(c.transaction.data_collection_order)  # type: ignore[union-attr]
    assert per_table == {"orders": [1, 2], "items": [1, 2, 3, 4, 5]}
    counted = Counter(f"{db.name}.{c.source.table}" for c in tx)
    assert dict(counted) == records[1].counts()
    assert not any(c.after and c.after.get("id") == 2 for c in changes)  # rolled back


def test_switched_off(db: MyDb, tmp_path: Path) -> None:
    """transaction_metadata = false: null blocks and no transaction topic."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB")
    config = db.config(["t"], transaction_metadata=False)
    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("INSERT INTO t VALUES (1), (2)")
        run.wait_position(db.binlog_end())
        run.stop()
    events = [r.decoded for r in read_topic(db.endpoints, db.topic("t"))]
    assert len(events) == 2
    assert all(isinstance(e, ChangeEvent) and e.transaction is None for e in events)
    topics = (
        Consumer({"bootstrap.servers": db.endpoints.bootstrap_servers, "group.id": "unused"})
        .list_topics(timeout=10)
        .topics
    )
    assert f"{db.server}.transaction" not in topics
