"""One face on both sources for the capture tests whose behaviour is the same on
PostgreSQL and MariaDB: the ``source`` fixture (tests/capture/conftest.py) gives a
PgSource or a MySource, and one test body runs for both."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.state import Ledger, StateStore
from bizevents.capture.mariadb import queries as my
from bizevents.capture.mariadb import types as mytypes
from bizevents.capture.postgres import types as pgtypes
from tests.capture import mysql_helpers
from tests.capture.capture_helpers import Db, InProcess, capture_endpoints, in_process
from tests.capture.mysql_helpers import MyDb
from tests.capture.quarantine_helpers import enum_fixed, numeric_fixed


class Source:
    """What a test asks of its database, spelled once per source below."""

    db: Db | MyDb
    #: The capture's name of its read position in the snapshot ledger.
    ledger_slot: str
    #: The test's schema (PostgreSQL) or database (MariaDB).
    qualifier: str
    #: A sequence's next value, ``{}`` its name; what an insert does on a key it finds.
    NEXT_VALUE: str
    ON_KEY: str
    #: Whether the source is MariaDB's (signal_table_ddl's dialect).
    mysql: bool
    #: Signal conditions that hold SQL of the source's own: each must be refused.
    SQL_CONDITIONS: tuple[str, ...]
    #: The code fix of a value that does not convert: the source's converter registry,
    #: the type and the fixed converter (PostgreSQL's numeric takes NaN, MariaDB's ENUM
    #: the empty error value).
    FIX: tuple[Callable[[str, Any], None], str, Callable[[Any], Any]]

    def table(self, name: str) -> str:
        return f"{self.qualifier}.{name}"

    def next_value(self, sequence: str) -> str:
        return self.NEXT_VALUE.format(self.table(sequence))

    def upsert(self, table: str, value: str) -> str:
        """An insert of (id %s, ``value``, 'w') that sets ``value`` and note 'u' on a
        key that exists."""
        return (
            f"INSERT INTO {self.table(table)} VALUES (%s, {value}, 'w') "
            f"{self.ON_KEY} v = {value}, note = 'u'"
        )

    def connect(self) -> Any:
        raise NotImplementedError

    def fill(self, table: str, rows: int) -> None:
        """Rows 1 to ``rows`` of ``table`` (id, v, note): v from ``seq``, note 'init'."""
        raise NotImplementedError

    @contextmanager
    def in_process(self, config: CaptureConfig, state_dir: Path) -> Iterator[Any]:
        raise NotImplementedError
        yield

    def caught_up(self, run: Any) -> None:
        """Until ``run`` acknowledged every change made so far."""
        raise NotImplementedError

    @contextmanager
    def converter_fixed(self) -> Iterator[None]:
        """The quarantine tests' code fix switched on (``FIX``, quarantine_helpers)."""
        register, type_name, fixed = self.FIX
        register(type_name, fixed)
        try:
            yield
        finally:
            register(type_name, None)

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        return list(self.db.sql(statement, params))

    def capture_through(self, config: CaptureConfig, state_dir: Path, *statements: str) -> Any:
        """Capture of ``config`` in process: its initial snapshot, then ``statements`` run
        in turn; the run, stopped once it acknowledged them all."""
        with self.in_process(config, state_dir) as run:
            run.wait_snapshot()
            for statement in statements:
                self.sql(statement)
            self.caught_up(run)
            run.stop()
        return run

    def config(self, tables: list[str], **extra: Any) -> CaptureConfig:
        return self.db.config(tables, **extra)

    def topic(self, table: str) -> str:
        return self.db.topic(table)

    def sequenced_table(self, table: str, rows: int) -> None:
        """``table`` (id, v from the sequence ``seq``, note) with ``rows`` rows 'init'."""
        self.sql(f"CREATE SEQUENCE {self.table('seq')}")
        self.sql(
            f"CREATE TABLE {self.table(table)} "
            "(id INT PRIMARY KEY, v BIGINT NOT NULL, note VARCHAR(10))"
        )
        self.fill(table, rows)

    def table_state(self, table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
        """The table's rows as final_state() reads a topic: by ``(("id", id),)``."""
        with self.db.conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {self.table(table)}")
            names = [c[0] for c in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        return {(("id", r["id"]),): r for r in rows}

    def stored_ledger(self) -> Ledger | None:
        server = self.db.server
        store = StateStore(
            {"bootstrap.servers": self.db.endpoints.bootstrap_servers},
            f"{server}.capture.offsets",
            server,
        )
        return Ledger.from_json(store.read(store.ledger_key(self.ledger_slot)))

    def writer(self, table: str, keys: int, seed: int) -> Writer:
        return Writer(self, table, keys, seed)


class PgSource(Source):
    db: Db
    NEXT_VALUE = "nextval('{}')"
    ON_KEY = "ON CONFLICT (id) DO UPDATE SET"
    mysql = False
    SQL_CONDITIONS = ("id > 0; SELECT 1", "id IN (SELECT id FROM pg_roles)")
    FIX = (pgtypes.register_converter, "numeric", numeric_fixed)

    def __init__(self, db: Db) -> None:
        self.db, self.ledger_slot, self.qualifier = db, db.slot, db.schema

    def connect(self) -> Any:
        return psycopg2.connect(self.db.endpoints.postgres_dsn)

    def fill(self, table: str, rows: int) -> None:
        self.sql(
            f"INSERT INTO {self.table(table)} SELECT g, {self.next_value('seq')}, 'init' "
            f"FROM generate_series(1, {rows}) g"
        )

    @contextmanager
    def in_process(self, config: CaptureConfig, state_dir: Path) -> Iterator[InProcess]:
        with in_process(config, capture_endpoints(self.db.endpoints, state_dir)) as run:
            yield run

    def caught_up(self, run: Any) -> None:
        run.wait_acked(self.db.wal_lsn())


class MySource(Source):
    db: MyDb
    NEXT_VALUE = "NEXTVAL({})"
    ON_KEY = "ON DUPLICATE KEY UPDATE"
    mysql = True
    SQL_CONDITIONS = ("id <= 3 AND SLEEP(30) = 0", "id = 1; SELECT SLEEP(30)")
    FIX = (mytypes.register_converter, "enum", enum_fixed)

    def __init__(self, db: MyDb) -> None:
        self.db, self.ledger_slot, self.qualifier = db, "binlog", db.name

    def connect(self) -> Any:
        return my.connect(self.db.dsn, autocommit=False)

    def fill(self, table: str, rows: int) -> None:
        with self.db.conn.cursor() as cur:
            cur.executemany(  # PyMySQL sends one INSERT of many rows
                f"INSERT INTO {self.table(table)} VALUES (%s, {self.next_value('seq')}, 'init')",
                [(i,) for i in range(1, rows + 1)],
            )

    @contextmanager
    def in_process(
        self, config: CaptureConfig, state_dir: Path
    ) -> Iterator[mysql_helpers.InProcess]:
        with mysql_helpers.in_process(config, self.db.capture_endpoints(state_dir)) as run:
            yield run

    def caught_up(self, run: Any) -> None:
        run.wait_position(self.db.binlog_end())


class Writer:
    """Upserts and deletes on ``table`` until stopped, ten to a transaction; every write
    sets ``v`` from the sequence ``seq``, so a key's successive states carry increasing
    ``v``."""

    def __init__(self, source: Source, table: str, keys: int, seed: int) -> None:
        self.source, self.table, self.keys, self.seed = source, table, keys, seed
        self.stop = threading.Event()
        self.writes = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        conn = self.source.connect()
        rnd = random.Random(self.seed)
        upsert = self.source.upsert(self.table, self.source.next_value("seq"))
        delete = f"DELETE FROM {self.source.table(self.table)} WHERE id = %s"
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    for _ in range(10):
                        k = rnd.randrange(1, self.keys)
                        cur.execute(upsert if rnd.random() < 0.8 else delete, (k,))
                        self.writes += 1
                    conn.commit()
                    time.sleep(0.002)
        finally:
            conn.close()

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
