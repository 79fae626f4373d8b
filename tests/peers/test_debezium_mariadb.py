"""The same MariaDB changes through bizevents capture and through Debezium's MariaDB
connector (3.5.0: 3.6.1 is not served by the registry this project reaches), compared
record by record (tests/peers/sidebyside.py); every difference is one row of
docs/technical-envelope.md's table, held true here."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.signals import signal_table_ddl
from bizevents.devstack import Endpoints
from tests.capture.mariadb.test_capture import EXTREMES, OTHER, TYPES_DDL
from tests.capture.mysql_helpers import MyDb, in_process, mysql_database
from tests.peers import harness, sidebyside

pytestmark = [pytest.mark.integration, pytest.mark.mysql, pytest.mark.timeout(600)]


class MariaDbPeer:
    database = "MariaDB"
    tools = harness.MARIADB_TOOLS
    tables = ("types",)
    tombstones = 2  # a delete, a key change

    def __init__(self, db: MyDb) -> None:
        self.db = db

    def name(self, table: str) -> str:
        return f"{self.db.name}.{table}"

    def topic(self, table: str) -> str:
        return self.db.topic(table)

    def create(self) -> None:
        self.db.sql(TYPES_DDL)
        self.db.sql(sidebyside.ITEMS_DDL.format(items=self.name("items")))
        self.db.sql(sidebyside.DONE_DDL.format(done=self.name("done")))
        self.db.sql(signal_table_ddl(self.name("sig"), mysql=True))
        sidebyside.insert(self, "types", OTHER)  # the initial snapshots read it

    def transaction_rows(self) -> list[tuple[str, dict[str, Any]]]:
        return [("types", EXTREMES)]

    def last_changes(self) -> None:
        self.db.sql(f"UPDATE {self.name('types')} SET vc = 'changed' WHERE id = 0")

    def config(self, tables: list[str]) -> CaptureConfig:
        return self.db.config(tables, replica_server_id=5401, signal_table=self.name("sig"))

    def properties(self, tables: list[str]) -> dict[str, str]:
        return harness.mariadb_properties(
            self.db.dsn,
            self.db.server,
            self.db.name,
            [*tables, "sig"],
            5400,
            **{"signal.data.collection": self.name("sig")},
        )

    def capture(self, config: CaptureConfig, state: Path) -> AbstractContextManager[Any]:
        return in_process(config, self.db.capture_endpoints(state))

    def drained(self, run: Any) -> None:
        run.wait_position(self.db.binlog_end())

    def autocommit(self, on: bool) -> None:
        self.db.conn.autocommit(on)


@pytest.fixture
def db(bizevents_mysql: str, bizevents_stack: Endpoints) -> Any:
    reason = harness.missing(harness.MARIADB_TOOLS)
    if reason is not None:
        pytest.fail(reason)
    with mysql_database(bizevents_mysql, bizevents_stack) as made:
        yield made


def test_mariadb_records_equal_debeziums_but_for_the_table(db: MyDb, tmp_path: Path) -> None:
    sidebyside.side_by_side(MariaDbPeer(db), tmp_path)
