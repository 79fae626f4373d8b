"""Signals that cannot hurt, on the real MariaDB and broker (issue 41's reproductions):
a ``SLEEP()`` condition is refused and holds nothing up; no signal on either channel
stops capture; chunk queries are read only."""

from __future__ import annotations

from pathlib import Path

import pymysql
import pytest

from bizevents.capture.core.filters import parse_condition, resolve
from bizevents.capture.core.signals import new_signal, signal_table_ddl
from bizevents.capture.mariadb import queries as my
from bizevents.contracts.envelope import ChangeEvent
from tests.capture.capture_helpers import read_topic
from tests.capture.mysql_helpers import MyDb, in_process
from tests.capture.signal_fuzz import TopicEnd, bad_records, bad_rows, send_records, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.mysql]


def test_no_bad_signal_stops_a_mariadb_capture_on_either_channel(db: MyDb, tmp_path: Path) -> None:
    """Random text, deep JSON and ``SLEEP()`` filters as signal table rows, random bytes
    and deep JSON as signal topic records, one after another: each is refused; after
    each, capture is alive and a row changed then arrives on its topic within seconds
    (a SLEEP(5) would hold it up longer); a good snapshot still runs."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    with db.conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, 0)", [(i,) for i in range(1, 101)])
    db.sql(signal_table_ddl("sig", mysql=True))
    table = f"{db.name}.t"
    # Heartbeats every half second: the signal topic is read between binlog events.
    config = db.config(["t"], signal_table=f"{db.name}.sig", heartbeat_interval_s=0.5)
    rows = bad_rows(11, table, ["id <= 3 AND SLEEP(5) = 0", "id = 1; SELECT SLEEP(5)"])
    records = bad_records(11, table)
    topic = TopicEnd(db.endpoints.bootstrap_servers, db.topic("t"))
    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()

        def alive() -> None:
            assert run.error is None and run.thread.is_alive(), run.error

        refused = changes = 0
        for row in rows:
            db.sql("INSERT INTO sig VALUES (%s, %s, %s)", row)
            refused += 1
            wait_until(lambda n=refused: run.stats.signals_refused >= n, alive, f"{row[0]}")
            before = topic.count()
            changes += 1
            db.sql("UPDATE t SET v = %s WHERE id = 1", (changes,))
            took = topic.wait_beyond(before, alive)
            assert took < 4, f"after {row[0]}, the stream was held up {took:.1f}s"
        for record in records:
            send_records(db.endpoints.bootstrap_servers, config.signal_topic_name, [record])
            refused += 1
            wait_until(lambda n=refused: run.stats.signals_refused >= n, alive, f"{record[0]!r}")
            before = topic.count()
            changes += 1
            db.sql("UPDATE t SET v = %s WHERE id = 1", (changes,))
            topic.wait_beyond(before, alive)
        assert run.stats.signals_refused == refused
        good = new_signal("execute-snapshot", (table,), "id <= 10 OR id BETWEEN 90 AND 95")
        db.sql("INSERT INTO sig VALUES (%s, %s, %s)", good.to_row())
        wait_until(
            lambda: table in run.stats.incremental_rows and not run.runner.ledger.queue,
            alive,
            "the good snapshot did not run",
        )
        run.wait_position(db.binlog_end())
        run.stop()
    topic.close()
    assert run.stats.signals_refused == refused
    snapshot = sorted(
        int(r.decoded.after["id"])
        for r in read_topic(db.endpoints, db.topic("t"))
        if isinstance(r.decoded, ChangeEvent)
        and r.decoded.source.snapshot_raw == "incremental"
        and r.decoded.after
    )
    assert set(snapshot) <= {*range(1, 11), *range(90, 96)} and len(snapshot) >= 15


def test_mariadb_chunk_queries_are_read_only_with_bound_values(db: MyDb) -> None:
    """Defence in depth: a chunk's transaction is read only and the condition's values
    are bound; a condition the server refuses is its reason, in a sentence."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(40))")
    db.sql("INSERT INTO t VALUES (1, 'a'), (2, 'x''); DROP TABLE t; -- '), (3, 'c')")
    conn = my.connect(db.dsn, autocommit=False)
    try:
        columns = [c.name for c in my.catalog_table(conn, db.name, "t").columns]
        conn.commit()
        where = resolve(parse_condition("NOTE = 'x''); DROP TABLE t; -- '"), columns, "t")
        _position, cur = my.open_chunk(conn, db.name, "t", ("id",), None, where, 10, 2.5)
        assert [r["id"] for r in cur.fetchall()] == [2]
        with conn.cursor() as other, pytest.raises(pymysql.err.MySQLError) as caught:
            other.execute(f"INSERT INTO {db.name}.t VALUES (4, 'd')")
        assert caught.value.args[0] == 1792  # a statement a READ ONLY transaction refuses
        my.end_chunk(conn, cur)
        wrong = resolve(parse_condition("nothere = 1"), [*columns, "nothere"], "t")
        reason = my.check_condition(conn, db.name, "t", wrong, 5)
        assert reason is not None and "Unknown column 'nothere'" in reason
        assert my.check_condition(conn, db.name, "t", where, 5) is None
    finally:
        conn.close()
    assert db.sql("SELECT count(*) FROM t") == [(3,)]
