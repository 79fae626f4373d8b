"""Helpers of the capture integration tests: databases, runs, reading topics back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg2
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.capture.config import CaptureConfig
from bizevents.capture.metrics import CaptureStats
from bizevents.capture.postgres.messages import Commit, Delete, Insert, Update, parse_lsn
from bizevents.capture.postgres.pgoutput import PgOutputDecoder
from bizevents.capture.postgres.runner import CaptureEndpoints, PostgresCapture
from bizevents.contracts.envelope import ChangeEvent, Tombstone
from bizevents.contracts.technical import AvroDecoder
from bizevents.devstack import Endpoints
from tests.cli import bizevents
from tests.kafka import read_all

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Db:
    """A unique schema, slot and publication of one test, on the stack's PostgreSQL."""

    endpoints: Endpoints
    schema: str
    slot: str
    publication: str
    server: str
    conn: Any

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else []

    def drop_slot(self) -> None:
        """Drop this test's slot (a slot lost), once it is free: its walsender exits
        after capture closed the connection, not with it, and a slot still active
        refuses the drop."""
        with self.conn.cursor() as cur:
            drop_slots(cur, self.slot)
        left = self.sql(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)
        )
        assert not left, f"slot {self.slot} still in use by {left} 20 s after capture stopped"

    def wal_lsn(self) -> int:
        """The WAL written so far: every commit's end (the dev stack commits
        synchronously). Not the insert position: at a page boundary that points past
        the next page's header, where no record ends and capture never acknowledges."""
        return parse_lsn(self.sql("SELECT pg_current_wal_lsn()::text")[0][0])

    def wal_insert_lsn(self) -> int:
        """The WAL's insert position: what verify names as the database's position."""
        return parse_lsn(self.sql("SELECT pg_current_wal_insert_lsn()::text")[0][0])

    def confirmed(self, slot: str | None = None) -> int:
        rows = self.sql(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (slot or self.slot,),
        )
        return parse_lsn(rows[0][0]) if rows and rows[0][0] else 0

    def config(self, tables: list[str], **extra: Any) -> CaptureConfig:
        """A capture of ``tables`` (of the test's schema, or ``schema.table``) by the
        test's slot and publication."""
        return CaptureConfig(
            server=self.server,
            tables=tuple(t if "." in t else f"{self.schema}.{t}" for t in tables),
            slot=self.slot,
            publication=self.publication,
            **{"heartbeat_interval_s": 1.0, **extra},
        )

    def topic(self, table: str) -> str:
        return f"{self.server}.{self.schema}.{table}"


def drop_slots(cur: Any, like: str) -> None:
    """Drop the replication slots named ``like`` (SQL LIKE). The walsender of a
    replication connection exits after its client closed it, not with it: wait until
    the slots are free first."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        cur.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE %s "
            "AND active_pid IS NOT NULL",
            (like,),
        )
        if not cur.fetchone()[0]:
            break
        time.sleep(0.2)
    cur.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
        "WHERE slot_name LIKE %s AND active_pid IS NULL",
        (like,),
    )


@contextmanager
def database(endpoints: Endpoints) -> Iterator[Db]:
    """A fresh schema; afterwards its slots (``<slot>*``), publication and schema go."""
    tag = uuid.uuid4().hex[:10]
    conn = psycopg2.connect(endpoints.postgres_dsn)
    conn.autocommit = True
    db = Db(endpoints, f"cap_{tag}", f"cap_{tag}", f"cap_{tag}", f"t{tag}", conn)
    db.sql(f"CREATE SCHEMA {db.schema}")
    try:
        yield db
    finally:
        # db.conn, not conn: a test that restarted the server connects anew
        with db.conn.cursor() as cur:
            drop_slots(cur, db.slot + "%")
        db.sql(f"DROP PUBLICATION IF EXISTS {db.publication}")
        db.sql(f"DROP SCHEMA IF EXISTS {db.schema} CASCADE")
        db.conn.close()


def capture_endpoints(
    endpoints: Endpoints, state_dir: Path, dsn: str | None = None
) -> CaptureEndpoints:
    """The stack's endpoints for a capture of ``dsn`` (the stack's PostgreSQL if None)."""
    return CaptureEndpoints(
        dsn or endpoints.postgres_dsn,
        {"bootstrap.servers": endpoints.bootstrap_servers},
        {"url": endpoints.registry_url},
        state_dir,
    )


class InProcess:
    """A capture run in a thread of the test process: PostgreSQL's, or another source's
    ``runner_class`` whose stats are labelled ``slot``."""

    def __init__(
        self,
        config: CaptureConfig,
        endpoints: CaptureEndpoints,
        runner_class: Any = PostgresCapture,
        slot: str | None = None,
    ) -> None:
        self.stats = CaptureStats(config.server, slot or config.slot_name)
        self.runner = runner_class(config, endpoints, stats=self.stats)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.runner.run()
        except BaseException as exc:  # handed to the test
            self.error = exc

    def wait_acked(self, lsn: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.stats.acknowledged_lsn < lsn:
            if self.error is not None:
                raise self.error
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"capture acknowledged {self.stats.acknowledged_lsn:X}, not {lsn:X}"
                )
            time.sleep(0.05)

    def wait_snapshot(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.stats.snapshot_done:
            if self.error is not None:
                raise self.error
            assert time.monotonic() < deadline, "the snapshot did not finish"
            time.sleep(0.02)

    def stop(self) -> None:
        self.runner.request_stop()
        self.thread.join(60)
        assert not self.thread.is_alive(), "capture did not stop"
        if self.error is not None:
            raise self.error


Run = TypeVar("Run", bound=InProcess)


@contextmanager
def running(run: Run) -> Iterator[Run]:
    """``run`` started; stopped on leaving if the test did not stop it."""
    run.thread.start()
    try:
        yield run
    finally:
        if run.thread.is_alive():
            run.runner.request_stop()
            run.thread.join(60)


@contextmanager
def in_process(config: CaptureConfig, endpoints: CaptureEndpoints) -> Iterator[InProcess]:
    with running(InProcess(config, endpoints)) as run:
        yield run


def cli_env(endpoints: Endpoints) -> dict[str, str]:
    return {
        **os.environ,
        "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": endpoints.bootstrap_servers,
        "BIZEVENTS_REGISTRY__URL": endpoints.registry_url,
        "BIZEVENTS_DATABASE__POSTGRES_DSN": endpoints.postgres_dsn,
        "BIZEVENTS_LOG_FORMAT": "json",
    }


def write_config(path: Path, config: CaptureConfig) -> Path:
    data = config.model_dump(mode="json", exclude_none=True)
    data.pop("columns", None)
    if config.dsn is not None:  # a secret: the dump masks it
        data["dsn"] = config.dsn.get_secret_value()
    lines = []
    for key, value in data.items():
        if isinstance(value, dict):  # a TOML inline table, not JSON's object
            pairs = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items())
            lines.append(f"{key} = {{{pairs}}}")
        else:
            lines.append(f"{key} = {json.dumps(value)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def start_cli(config_file: Path, endpoints: Endpoints, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bizevents",
                "capture",
                "postgres",
                str(config_file),
            ],
            env=cli_env(endpoints),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )


def terminate(process: subprocess.Popen[bytes], timeout: float = 60) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout)


def wait_confirmed(
    db: Db, lsn: int, timeout: float = 90, process: Any = None, log: Path | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while db.confirmed() < lsn:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"capture exited {process.returncode}: {_tail(log)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"slot confirmed {db.confirmed():X}, not {lsn:X}: {_tail(log)}")
        time.sleep(0.1)


def snapshot_recorded(endpoints: Endpoints, server: str, slot: str) -> bool:
    """Whether the capture's snapshot ledger in Kafka says its initial snapshot is in."""
    from bizevents.capture.core.state import Ledger, StateStore

    store = StateStore(
        {"bootstrap.servers": endpoints.bootstrap_servers}, f"{server}.capture.offsets", server
    )
    ledger = Ledger.from_json(store.read(store.ledger_key(slot)))
    return ledger is not None and ledger.initial_done


def wait_snapshot_done(
    db: Db, state_dir: Path | None, process: Any, log: Path, timeout: float = 60
) -> None:
    """Until the CLI run recorded its snapshot as done (streaming starts right after).

    The record is in Kafka; ``state_dir`` is not read (kept for the callers' sake)."""
    deadline = time.monotonic() + timeout
    while not snapshot_recorded(db.endpoints, db.server, db.slot):
        assert process.poll() is None, _tail(log)
        assert time.monotonic() < deadline, _tail(log)
        time.sleep(0.1)


def _tail(log: Path | None) -> str:
    return "" if log is None or not log.exists() else log.read_text()[-3000:]


# -- reading back -------------------------------------------------------------------------


@dataclass
class Record:
    partition: int
    offset: int
    decoded: ChangeEvent | Tombstone


def read_topic(endpoints: Endpoints, topic: str, timeout: float = 60) -> list[Record]:
    """Every record of ``topic`` (assign mode, to the end of each partition), decoded."""
    registry = SchemaRegistryClient({"url": endpoints.registry_url})
    schemas: dict[int, str] = {}

    def lookup(schema_id: int) -> str:
        if schema_id not in schemas:
            schemas[schema_id] = registry.get_schema(schema_id).schema_str
        return schemas[schema_id]

    decoder = AvroDecoder(lookup)
    messages = read_all(endpoints.bootstrap_servers, topic, timeout, "read_committed")
    return [Record(m.partition, m.offset, decoder.decode(m.key, m.value)) for m in messages]


def key_of(row: Any) -> tuple[Any, ...]:
    return tuple(sorted(row.items()))


def final_state(records: list[Record]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Compaction semantics: the last value per key, tombstones and deletes remove."""
    state: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        d = r.decoded
        if isinstance(d, Tombstone):
            state.pop(key_of(d.key), None)
        elif d.op == "t":
            continue
        elif d.after is None:
            assert d.key is not None
            state.pop(key_of(d.key), None)
        else:
            assert d.key is not None
            state[key_of(d.key)] = dict(d.after)
    return state


def committed_change_lsns(
    db: Db, witness_slot: str, confirmed_before: int | None = None
) -> set[int]:
    """LSN of every row change a second pgoutput slot sees (peeked, not consumed).

    With ``confirmed_before``, only the changes of transactions whose commit ends at or
    before it: a slot's confirmed position covers whole transactions by their commit,
    while the changes of a later transaction can stand before it in the WAL.
    """
    decoder = PgOutputDecoder()
    lsns: set[int] = set()
    pending: set[int] = set()
    with db.conn.cursor() as cur:
        cur.execute(
            "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
            "'proto_version', '1', 'publication_names', %s)",
            (witness_slot, db.publication),
        )
        for lsn, data in cur:
            m = decoder.decode(bytes(data))
            if isinstance(m, Insert | Update | Delete):
                pending.add(parse_lsn(lsn))
            elif isinstance(m, Commit):
                if confirmed_before is None or m.end_lsn <= confirmed_before:
                    lsns |= pending
                pending = set()
    return lsns


def signal_cli(
    config_file: Path, endpoints: Endpoints, *args: str
) -> subprocess.CompletedProcess[str]:
    """``bizevents capture snapshot CONFIG ARGS``, as a user sends a signal."""
    return bizevents(
        "capture", "snapshot", str(config_file), *args, env=cli_env(endpoints), cwd=REPO, timeout=60
    )


def wait_for(condition: Callable[[], Any], run: Any, what: str, timeout: float = 120) -> None:
    """Until ``condition`` holds; the in-process capture's error, should it fail first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if run.error is not None:
            raise run.error
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
