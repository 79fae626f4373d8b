"""MariaDB's queries of capture (capture/mariadb/queries.py) on the session's real
server: a chunk's query is read only, its condition's values bound."""

from __future__ import annotations

import pymysql
import pytest

from bizevents.capture.core.filters import parse_condition, resolve
from bizevents.capture.mariadb import queries as my
from tests.capture.mysql_helpers import MyDb

pytestmark = [pytest.mark.integration, pytest.mark.mysql]


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
