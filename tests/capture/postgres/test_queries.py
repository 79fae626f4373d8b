"""PostgreSQL's queries of capture (capture/postgres/queries.py) on the stack's real
server: a chunk's query is read only and timed, its condition's values bound."""

from __future__ import annotations

import pytest

from bizevents.capture.core.filters import parse_condition, resolve
from bizevents.capture.postgres import queries as pg
from tests.capture.capture_helpers import Db

pytestmark = pytest.mark.integration


def test_chunk_queries_are_read_only_and_timed(db: Db) -> None:
    """Defence in depth: a chunk's query runs in a read-only transaction under the
    statement timeout it is given, with the condition's values bound; a condition the
    server refuses is its reason, in a sentence, and the connection stays usable."""
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, note text)")
    db.sql(f"INSERT INTO {s}.t VALUES (1, 'a'), (2, 'x''); DROP TABLE t; --'), (3, 'c')")
    conn = pg.connect(db.endpoints.postgres_dsn, autocommit=False)
    try:
        (info,) = pg.describe_tables(conn, [f"{s}.t"])
        conn.rollback()  # open_chunk starts its own transaction
        columns = [c.name for c in info.relation.columns]
        where = resolve(parse_condition("NOTE = 'x''); DROP TABLE t; --'"), columns, f"{s}.t")
        _snapshot, cur = pg.open_chunk(conn, info.relation, ["id"], None, where, 10, 7.5)
        try:
            assert [r[0] for r in cur.fetchall()] == ["2"]
            cur.execute("SHOW transaction_read_only")
            assert cur.fetchone() == ("on",)
            cur.execute("SHOW statement_timeout")
            assert cur.fetchone() == ("7500ms",)
        finally:
            pg.end_chunk(conn, cur)
        wrong = resolve(parse_condition("id = 'abc'"), columns, f"{s}.t")
        reason = pg.check_condition(conn, info.relation, wrong, 5)
        assert reason is not None and "invalid input syntax for type integer" in reason
        assert pg.check_condition(conn, info.relation, where, 5) is None
        with conn.cursor() as cur2:
            cur2.execute("SELECT count(*) FROM " + f"{s}.t")
            assert cur2.fetchone() == (3,)
        conn.rollback()
    finally:
        conn.close()
