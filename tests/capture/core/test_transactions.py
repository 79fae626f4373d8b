"""Transaction metadata (capture/core/transactions.py) from the real PostgreSQL 15 and
MariaDB into the real broker: every streamed envelope's ``transaction`` block (MariaDB's
GTID as id) and the BEGIN/END records of ``<server>.transaction`` with the per-table
counts."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.capture.postgres.messages import Begin
from bizevents.capture.postgres.pgoutput import PgOutputDecoder
from bizevents.contracts.envelope import ChangeEvent, PgPosition, Tombstone
from bizevents.contracts.technical.transaction import TransactionDecoder, TransactionRecord
from bizevents.devstack import Endpoints
from bizevents.plumbing.kafka import ensure_topics
from tests.capture import mysql_helpers
from tests.capture.capture_helpers import (
    Db,
    capture_endpoints,
    in_process,
    read_topic,
)
from tests.capture.mysql_helpers import MyDb
from tests.kafka import read_all

pytestmark = pytest.mark.integration


def read_transactions(endpoints: Endpoints, topic: str) -> list[TransactionRecord]:
    """The transaction topic's records in order, each keyed by its transaction's id."""
    registry = SchemaRegistryClient({"url": endpoints.registry_url})
    decoder = TransactionDecoder(lambda i: registry.get_schema(i).schema_str)
    out: list[TransactionRecord] = []
    for m in read_all(endpoints.bootstrap_servers, topic, isolation="read_committed"):
        record = decoder.decode(m.value)
        assert m.key is not None and record.id.encode() in m.key
        out.append(record)
    return out


def assert_no_transaction_metadata(db: Db | MyDb) -> None:
    """Two inserts into ``t`` with null transaction blocks, and no transaction topic."""
    events = [r.decoded for r in read_topic(db.endpoints, db.topic("t"))]
    assert len(events) == 2
    assert all(isinstance(e, ChangeEvent) and e.transaction is None for e in events)
    consumer = Consumer({"bootstrap.servers": db.endpoints.bootstrap_servers, "group.id": "unused"})
    assert f"{db.server}.transaction" not in consumer.list_topics(timeout=10).topics


def _witness_begins(db: Db, slot: str) -> list[Begin]:
    decoder = PgOutputDecoder()
    with db.conn.cursor() as cur:
        cur.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
            "'proto_version', '1', 'publication_names', %s)",
            (slot, db.publication),
        )
        messages = [decoder.decode(bytes(row[0])) for row in cur]
    return [m for m in messages if isinstance(m, Begin)]


def test_blocks_and_begin_end_records(db: Db, tmp_path: Path) -> None:
    """A multi-table transaction's events carry one id, orders 1..n in commit order and
    per table; END counts what arrived; tombstones and snapshot reads carry no block."""
    s = db.schema
    db.sql(f"CREATE TABLE {s}.orders (id int PRIMARY KEY, total numeric(10,2))")
    db.sql(f"CREATE TABLE {s}.items (id int PRIMARY KEY, order_id int, price numeric(10,2))")
    db.sql(f"INSERT INTO {s}.orders VALUES (100, 1)")  # read by the snapshot
    # Its truncate events have no key: a topic not compacted takes them.
    admin = AdminClient({"bootstrap.servers": db.endpoints.bootstrap_servers})
    ensure_topics(admin, [db.topic("orders")], 2, config={"cleanup.policy": "delete"})
    config = db.config(["orders", "items"], partitions=2, truncate_events=True)
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        witness = db.slot + "_w"
        db.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (witness,))
        db.sql(
            f"BEGIN; INSERT INTO {s}.orders VALUES (1, 0); "
            f"INSERT INTO {s}.items VALUES (10, 1, 2.50), (11, 1, 4.00); "
            f"UPDATE {s}.orders SET total = 6.50 WHERE id = 1; COMMIT"
        )
        db.sql(f"UPDATE {s}.items SET id = 12 WHERE id = 11")  # key change: d, tombstone, c
        db.sql(f"BEGIN; DELETE FROM {s}.items WHERE id = 10; TRUNCATE {s}.orders; COMMIT")
        run.wait_acked(db.wal_lsn())
    begins = _witness_begins(db, witness)
    ids = [f"{b.xid}:{b.final_lsn}" for b in begins]
    assert len(ids) == 3

    events = [
        r.decoded
        for topic in ("orders", "items")
        for r in read_topic(db.endpoints, db.topic(topic))
    ]
    changes = [e for e in events if isinstance(e, ChangeEvent)]
    assert all(e.transaction is None for e in changes if e.op == "r")
    streamed = [e for e in changes if e.op != "r"]
    assert all(e.transaction is not None for e in streamed)
    by_tx: dict[str, list[ChangeEvent]] = defaultdict(list)
    for e in streamed:
        assert e.transaction is not None
        by_tx[e.transaction.id].append(e)
        assert str(e.source.tx_id) == e.transaction.id.split(":")[0]
    assert sorted(by_tx) == sorted(ids)

    for txe in by_tx.values():
        txe.sort(key=lambda e: e.transaction.total_order if e.transaction else 0)
        assert [e.transaction.total_order for e in txe if e.transaction] == list(
            range(1, len(txe) + 1)
        )
        per_table: dict[str, list[int]] = defaultdict(list)
        for e in txe:
            assert e.transaction is not None
            per_table[e.source.qualified_table].append(e.transaction.data_collection_order)
        for orders in per_table.values():
            assert orders == list(range(1, len(orders) + 1))
        positions = [
            e.source.position.lsn
            for e in txe
            if isinstance(e.source.position, PgPosition) and e.source.position.lsn is not None
        ]
        assert positions == sorted(positions)  # total order is commit order
    assert [e.op for e in by_tx[ids[0]]] == ["c", "c", "c", "u"]
    assert [e.op for e in by_tx[ids[1]]] == ["d", "c"]
    # the truncate goes to both partitions of orders: two events, each counted
    assert [e.op for e in by_tx[ids[2]]] == ["d", "t", "t"]

    records = read_transactions(db.endpoints, f"{db.server}.transaction")
    assert [(r.status, r.id) for r in records] == [
        (status, tx_id) for tx_id in ids for status in ("BEGIN", "END")
    ]
    for end in records[1::2]:
        arrived = Counter(e.source.qualified_table for e in by_tx[end.id])
        assert end.event_count == len(by_tx[end.id])
        assert end.counts() == dict(arrived)
    assert records[1].counts() == {f"{s}.orders": 2, f"{s}.items": 2}
    assert records[0].ts_ms == records[1].ts_ms == begins[0].commit_ts // 1000
    tombstones = [
        r for r in read_topic(db.endpoints, db.topic("items")) if isinstance(r.decoded, Tombstone)
    ]
    assert len(tombstones) == 2


def test_switched_off(db: Db, tmp_path: Path) -> None:
    """transaction_metadata = false: null blocks and no transaction topic records."""
    db.sql(f"CREATE TABLE {db.schema}.t (id int PRIMARY KEY)")
    config = db.config(["t"], transaction_metadata=False)
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        db.sql(f"INSERT INTO {db.schema}.t VALUES (1), (2)")
        run.wait_acked(db.wal_lsn())
    assert_no_transaction_metadata(db)


@pytest.mark.mysql
def test_mariadb_blocks_and_begin_end_records(db: MyDb, tmp_path: Path) -> None:
    """A multi-table transaction: BEGIN, its changes numbered in commit order across the
    tables and per table, END with the counts per table; the GTID is the id; a
    rolled-back transaction and one that touched no captured table write nothing."""
    db.sql("CREATE TABLE orders (id INT PRIMARY KEY, total DECIMAL(10,2)) ENGINE=InnoDB")
    db.sql("CREATE TABLE items (id INT PRIMARY KEY, order_id INT) ENGINE=InnoDB")
    db.sql("CREATE TABLE other (id INT PRIMARY KEY) ENGINE=InnoDB")
    with mysql_helpers.in_process(
        db.config(["orders", "items"]), db.capture_endpoints(tmp_path)
    ) as run:
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


@pytest.mark.mysql
def test_mariadb_switched_off(db: MyDb, tmp_path: Path) -> None:
    """transaction_metadata = false: null blocks and no transaction topic."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB")
    config = db.config(["t"], transaction_metadata=False)
    with mysql_helpers.in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("INSERT INTO t VALUES (1), (2)")
        run.wait_position(db.binlog_end())
        run.stop()
    assert_no_transaction_metadata(db)
