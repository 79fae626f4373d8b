"""The same PostgreSQL changes through bizevents capture and through Debezium's embedded
engine, compared record by record (tests/peers/sidebyside.py); every difference is one
row of docs/technical-envelope.md's table, held true here."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.signals import signal_table_ddl
from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import Db, capture_endpoints, database, in_process
from tests.capture.postgres.test_pgoutput_live import COLUMNS, ROWS
from tests.peers import differences, harness, sidebyside

pytestmark = pytest.mark.integration


class PostgresPeer:
    database = "PostgreSQL"
    tools = harness.TOOLS
    # the mapped types tests/capture/postgres/test_pgoutput_live.py's COLUMNS leaves out
    tables = ("everything", "more")
    tombstones = 3  # two deletes, a key change

    def __init__(self, db: Db) -> None:
        self.db = db
        self.rows = [dict(r) for r in ROWS]
        self.rows[2]["free"] = None  # NaN has no decimal in either
        self.rows[2]["d"] = None  # infinity: Debezium writes a day count no date holds

    def name(self, table: str) -> str:
        return f"{self.db.schema}.{table}"

    def topic(self, table: str) -> str:
        return self.db.topic(table)

    def create(self) -> None:
        s, sql = self.db.schema, self.db.sql
        sql(f"CREATE TYPE {s}.mood AS ENUM ('sad', 'ok', 'happy')")
        cols = ", ".join(f"{n} {t.format(mood=f'{s}.mood')}" for n, t in COLUMNS)
        sql(f"CREATE TABLE {s}.everything ({cols})")
        sql(sidebyside.ITEMS_DDL.format(items=self.name("items")))
        sql(f"ALTER TABLE {s}.items REPLICA IDENTITY FULL")
        sql(f'CREATE TABLE {s}.more (id int PRIMARY KEY, m8 macaddr8, c "char")')
        sql(sidebyside.DONE_DDL.format(done=self.name("done")))
        sql(signal_table_ddl(self.name("sig"), mysql=False))
        sidebyside.insert(self, "everything", self.rows[0])  # the initial snapshot reads it
        sidebyside.insert(self, "more", {"id": 1, "m8": "08:00:2b:01:02:03:04:05", "c": "x"})

    def transaction_rows(self) -> list[tuple[str, dict[str, Any]]]:
        more = {"id": 2, "m8": "08:00:2b:ff:fe:01:02:03", "c": "y"}
        return [("everything", self.rows[1]), ("everything", self.rows[2]), ("more", more)]

    def last_changes(self) -> None:
        self.db.sql(f"UPDATE {self.name('everything')} SET i = i - 1 WHERE id = 1")  # TOAST
        self.db.sql(f"DELETE FROM {self.name('everything')} WHERE id = 3")

    def config(self, tables: list[str]) -> CaptureConfig:
        return self.db.config(tables, partitions=1, signal_table=self.name("sig"))

    def properties(self, tables: list[str]) -> dict[str, str]:
        return harness.postgres_properties(
            self.db.endpoints.postgres_dsn,
            self.db.server,
            f"{self.db.slot}_dbz",
            f"{self.db.publication}_dbz",
            [self.name(t) for t in [*tables, "sig"]],
            **{"signal.data.collection": self.name("sig")},
        )

    def capture(self, config: CaptureConfig, state: Path) -> AbstractContextManager[Any]:
        return in_process(config, capture_endpoints(self.db.endpoints, state))

    def drained(self, run: Any) -> None:
        run.wait_acked(self.db.wal_lsn())

    def autocommit(self, on: bool) -> None:
        self.db.conn.autocommit = on


@pytest.fixture
def db(bizevents_stack: Endpoints) -> Any:
    reason = harness.missing()
    if reason is not None:
        pytest.fail(reason)
    with database(bizevents_stack) as made:
        yield made


def test_postgres_records_equal_debeziums_but_for_the_table(db: Db, tmp_path: Path) -> None:
    sidebyside.side_by_side(PostgresPeer(db), tmp_path)


def test_the_table_in_the_document_is_the_table_the_tests_hold() -> None:
    assert differences.documented() == {p: r.database for p, r in differences.ROWS.items()}
