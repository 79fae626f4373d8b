"""``bizevents verify`` (plain and ``--spark``) on MariaDB against the real server and
broker: keys are placed among the chunks in the server's order (a case-insensitive
collation, an ENUM), 0 differences on a captured table, every key of a planted gap found
and repaired."""

from __future__ import annotations

import bisect
import re
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.state import StateStore
from bizevents.capture.mariadb import queries as my
from bizevents.capture.mariadb.codec import MyTableCodec
from bizevents.capture.verifytables import MyTable
from bizevents.contracts.binary import zigzag
from tests.capture.capture_helpers import write_config
from tests.capture.mysql_helpers import MyDb, in_process
from tests.capture.test_verify import (
    clean_after_repair,
    found_differences,
    found_lines,
    records_by_id,
    snapshots_run,
    verify,
)

pytestmark = [pytest.mark.integration, pytest.mark.mysql]

#: A key of an ENUM whose labels are not in Python's order, and a string under a
#: case-insensitive collation: the server orders ('zeta', 'b2') before ('alpha', 'A1'),
#: and 'a3' before 'B2', where Python's order says the opposite.
TABLE = (
    "CREATE TABLE t (kind ENUM('zeta', 'alpha') NOT NULL, "
    "name VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL, "
    "v INT, PRIMARY KEY (kind, name))"
)


def rows(n: int) -> list[tuple[str, str, int]]:
    """Names whose case alternates, so that Python's order is not the server's."""
    names = [f"{'aBcD'[i % 4]}{i:04d}" for i in range(n)]
    return [("zeta" if i % 3 else "alpha", name, i) for i, name in enumerate(names)]


def test_keys_are_placed_in_the_chunks_the_server_reads_them_in(db: MyDb) -> None:
    """The reader's order of keys is the server's ``ORDER BY`` (Python's own is not),
    every row the server returns for a chunk's key range is placed in that chunk, and
    paging by key goes past an ENUM's labels in the server's order."""
    db.sql(TABLE)
    with db.conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", rows(300))
    layout = my.catalog_table(db.conn, db.name, "t")
    codec = MyTableCodec(
        server=db.server, topic=db.topic("t"), table=layout, key_names=layout.primary_key
    )
    chunks = my.connect(db.dsn, autocommit=False)
    try:
        reader = MyTable(chunks, db.name, "t", codec, lambda i: pytest.fail(f"schema {i}"))
        assert reader.database_order
        server = [(k, n) for k, n in db.sql("SELECT kind, name FROM t ORDER BY kind, name")]
        assert sorted(server) != server, "the data does not tell the orders apart"
        orders = reader.order_of(server)
        assert sorted(orders) == orders
        assert len(set(orders)) == len(orders)

        starts = reader.boundaries(64)
        assert len(starts) == 5
        bounds = [None] + [text for _k, text in starts[1:]] + [None]
        placed = reader.order_of([tuple(text) for _k, text in starts])
        for i in range(len(starts)):
            chunk = reader.between(bounds[i], bounds[i + 1])
            assert len(chunk.rows) == (64 if i < 4 else 300 - 256)
            keys = [tuple(text) for _k, text, _d in chunk.rows]
            for order in reader.order_of(keys):
                assert bisect.bisect_right(placed, order) - 1 == i
        # The plain verify's chunks page by key past the ENUM's labels too.
        paged = [k for chunk in reader.chunks(64) for _k, k, _d in chunk.rows]
        assert [tuple(k) for k in paged] == server
    finally:
        chunks.close()


def text(value: str) -> bytes:
    raw = value.encode()
    return zigzag(len(raw)) + raw


def test_verify_as_a_spark_job_on_mariadb_finds_the_planted_gap(db: MyDb, tmp_path: Path) -> None:
    """``verify --spark --master local[2]`` on a MariaDB table whose key the server
    orders otherwise than Python: 0 differences on the captured table; then a tombstone
    for a live row, a row overwritten with another's values and a key the table does not
    have are each found (and found again by the recheck), exit 1."""
    db.sql(TABLE)
    with db.conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", rows(1200))
    config = db.config(["t"], partitions=2)
    config_file = write_config(tmp_path / "capture.toml", config)

    spark = ("--spark", "--master", "local[2]", "--chunk-rows", "500")
    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("UPDATE t SET v = -1 WHERE v % 100 = 0")
        db.sql("DELETE FROM t WHERE name = 'D1199'")
        run.wait_position(db.binlog_end())
        clean = verify(config_file, db, *spark, timeout=240)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert "1199 rows in 3 chunks, 1199 keys" in clean.stdout, clean.stdout
        assert "the topic holds the table" in clean.stdout

        topic = db.topic("t")
        records = records_by_id(db, topic)
        header = next(iter(records))[:5]

        def key(kind: str, name: str) -> bytes:
            return header + text(kind) + text(name)

        # rows(): i=42 is ('alpha', 'c0042'), i=7 ('zeta', 'D0007'), i=8 ('zeta', 'a0008').
        gone, overwritten, donor = key("alpha", "c0042"), key("zeta", "D0007"), key("zeta", "a0008")
        assert {gone, overwritten, donor} <= set(records)
        value8 = records[donor][1]
        producer = Producer(
            {"bootstrap.servers": db.endpoints.bootstrap_servers, "partitioner": "murmur2_random"}
        )
        producer.produce(topic, None, gone)
        producer.produce(topic, value8, overwritten)
        producer.produce(topic, value8, key("alpha", "ZZ-not-in-the-table"))
        producer.flush(10)
        found = verify(config_file, db, *spark, "--rechecks", "1", timeout=240)
        starts = [
            "missing kind='alpha', name='c0042':",
            "differs kind='zeta', name='D0007':",
            "extra kind='alpha', name='ZZ-not-in-the-table':",
        ]
        lines = found_lines(found, starts)
        assert "1199 rows in 3 chunks" in found.stdout, found.stdout
        missing = next(line for line in lines if line.startswith("missing"))
        assert "tombstone" in missing, missing
        run.stop()


def test_an_incremental_snapshot_of_an_enum_keyed_table_gets_every_row(
    db: MyDb, tmp_path: Path
) -> None:
    """A table keyed by an ENUM (labels not in Python's order) and a case-insensitive
    string, added to a capture that already ran, snapshotted in 64-row chunks: every row
    arrives (a chunk's bound past the last 'zeta' once skipped every 'alpha' row)."""
    from tests.capture.capture_helpers import final_state, read_topic

    db.sql("CREATE TABLE a (id INT PRIMARY KEY)")
    db.sql(TABLE)
    with db.conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", rows(300))
    endpoints = db.capture_endpoints(tmp_path)
    with in_process(db.config(["a"]), endpoints) as run:
        run.wait_snapshot()  # its position is past t's rows: they come by the snapshot
        run.wait_position(db.binlog_end())
        run.stop()
    config = db.config(["a", "t"], partitions=2, incremental_chunk_rows=64)
    with in_process(config, endpoints) as run:
        deadline = time.monotonic() + 120
        while f"{db.name}.t" not in run.runner.ledger.tables:
            if run.error is not None:
                raise run.error
            assert time.monotonic() < deadline, "the incremental snapshot did not finish"
            time.sleep(0.1)
        run.stop()
    records = read_topic(db.endpoints, db.topic("t"))
    assert {r.decoded.op for r in records} == {"r"}  # type: ignore[union-attr]
    state = final_state(records)
    assert sorted(k for k in state) == sorted(
        (("kind", kind), ("name", name)) for kind, name, _v in rows(300)
    )


def _table_of_1200_rows(db: MyDb, tmp_path: Path) -> tuple[CaptureConfig, Path]:
    """Table ``t`` (id, v, note) with rows 1 to 1200, and a capture of it: its config and
    that config's file."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT, note VARCHAR(20))")
    with db.conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO t VALUES (%s, %s, %s)", [(i, i * 2, f"row {i}") for i in range(1, 1201)]
        )
    config = db.config(["t"], partitions=2)
    return config, write_config(tmp_path / "capture.toml", config)


def test_verify_finds_a_planted_gap_in_a_mariadb_table_and_repair_closes_it(
    db: MyDb, tmp_path: Path
) -> None:
    """``bizevents verify`` on a MariaDB table: 0 differences; a hand-written tombstone
    for a live row is found as missing; ``--repair`` snapshots its chunk again; 0."""
    config, config_file = _table_of_1200_rows(db, tmp_path)

    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("UPDATE t SET v = -1 WHERE id % 100 = 0")
        db.sql("DELETE FROM t WHERE id = 1200")
        run.wait_position(db.binlog_end())
        clean = verify(config_file, db, "--chunk-rows", "500")
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
        before = snapshots_run(run)
        found = verify(config_file, db, "--chunk-rows", "500", "--repair")
        assert found.returncode == 1, found.stdout + found.stderr
        assert "missing id=42:" in found.stdout and "1 differences" in found.stdout
        assert "repair: signal" in found.stdout and "Traceback" not in found.stderr
        clean_after_repair(run, before, config_file, db, lambda: run.wait_position(db.binlog_end()))
        run.stop()


def test_verify_finds_the_rows_changed_while_capture_was_stopped_and_its_position_lost(
    db: MyDb, tmp_path: Path
) -> None:
    """MariaDB's planted gap: capture runs and stops; its stored binlog position is
    lost (tombstoned, as after a purged binlog and a new offsets topic); rows are
    inserted, updated and deleted; capture starts again at the binlog's end without a
    snapshot. Verify names every one of those keys and exits 1; ``--repair`` tombstones
    the deletes the topic lacks and brings the inserts and updates back; then 0."""
    first, config_file = _table_of_1200_rows(db, tmp_path)

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

        found = verify(config_file, db, "--chunk-rows", "500", "--rechecks", "1")
        lines = found_differences(found, inserted, updated, deleted)
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

        before = snapshots_run(run)
        repaired = verify(config_file, db, "--chunk-rows", "500", "--repair")
        assert repaired.returncode == 1 and "repair: signal" in repaired.stdout, repaired.stdout
        assert f"repair: {len(deleted)} tombstones written" in repaired.stdout, repaired.stdout
        expect = "1204 rows in 3 chunks, 1204 keys"
        clean_after_repair(
            run, before, config_file, db, lambda: run.wait_position(db.binlog_end()), expect
        )
        run.stop()
