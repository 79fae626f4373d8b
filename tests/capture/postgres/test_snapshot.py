"""PostgreSQL's initial snapshot (``postgres.snapshot.initial_snapshot``) against the real
database, its capture a fake host (the ``SnapshotHost`` protocol): the rows of the
exported snapshot and nothing committed after it, the ``last`` row, the counts, the
transaction confirmed at the consistent point once Kafka acknowledged every row."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg2
import pytest
import structlog

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.capture import CaptureEndpoints, Stop
from bizevents.capture.core.offsets import AckTracker, Tx
from bizevents.capture.metrics import CaptureStats
from bizevents.capture.postgres import queries as pg
from bizevents.capture.postgres.snapshot import initial_snapshot
from tests.capture.capture_helpers import Db

pytestmark = pytest.mark.integration

_POINT = 0x16B3748


class _Source:
    def __init__(self, flag: str) -> None:
        self.flag = flag

    def with_long(self, lsn: int) -> bytes:
        return f"{self.flag}@{lsn:X}".encode()


class _Codec:
    def __init__(self, table: str) -> None:
        self.table, self.events = table, 0

    def source(self, _ms: int, _us: int, snapshot: str, xid: int | None) -> _Source:
        assert xid is None
        return _Source(snapshot)


class _Host:
    """What ``initial_snapshot`` asks of its capture, the writes recorded."""

    def __init__(self, db: Db, tables: list[str], tmp_path: Path, stop_after: int = 0) -> None:
        self.config = CaptureConfig(
            server=db.server,
            tables=tuple(f"{db.schema}.{t}" for t in tables),
            snapshot_fetch_rows=2,
        )
        self.endpoints = CaptureEndpoints(db.endpoints.postgres_dsn, {}, {}, tmp_path)
        self.stats = CaptureStats(db.server, db.slot)
        self.log = structlog.get_logger("test")
        self.stopping = False
        self.progress_seen: list[tuple[str, int, int]] = []
        self.progress = lambda t, done, of: self.progress_seen.append((t, done, of))
        self.finished = 0
        self.snapshot_finished = self._finished
        tracker = AckTracker()
        self.session = SimpleNamespace(
            tracker=tracker, producer=SimpleNamespace(poll=lambda _t: 0), codecs={}
        )
        conn = psycopg2.connect(db.endpoints.postgres_dsn)
        try:
            self.infos = {i.oid: i for i in pg.describe_tables(conn, list(self.config.tables))}
        finally:
            conn.close()
        self.written: list[tuple[str, Any, bytes]] = []
        self.txs: list[Tx] = []
        self.stop_after = stop_after

    def _finished(self) -> None:
        self.finished += 1

    def codec(self, relation: Any, info: Any) -> _Codec:
        return _Codec(info.qualified)

    def snapshot_row(
        self, codec: Any, table: str, key: Any, row: Any, source: bytes, ts: bytes, tx: Tx
    ) -> bool:
        assert key is None  # keyed by the codec when written
        tx.produced(1)
        self.txs.append(tx)
        self.written.append((table, row, source))
        if self.stop_after and len(self.written) >= self.stop_after:
            self.stopping = True
        return True

    def check_delivery(self) -> None:
        pass

    def backpressure(self, keepalive: Any = None) -> None:
        pass

    def wait_acknowledged(self) -> None:
        for tx in {id(t): t for t in self.txs}.values():
            while tx.pending:
                tx.ack(None, None)


def _exported(db: Db) -> tuple[Any, str]:
    """A transaction holding an exported snapshot (as the slot's creation holds one)."""
    conn = psycopg2.connect(db.endpoints.postgres_dsn)
    conn.set_session(isolation_level="REPEATABLE READ")
    with conn.cursor() as cur:
        cur.execute("SELECT pg_export_snapshot()")
        row = cur.fetchone()
    assert row is not None
    return conn, str(row[0])


def test_the_exported_snapshot_is_written_and_only_it(db: Db, tmp_path: Path) -> None:
    """Rows committed after the export are not read; the last row of the last table
    that has rows carries ``last``, every other ``true``, at the consistent point; the
    counts and progress follow; the transaction confirms the point once acknowledged."""
    for name in ("a", "b", "c"):
        db.sql(f"CREATE TABLE {db.schema}.{name} (id int PRIMARY KEY, v text)")
    db.sql(f"INSERT INTO {db.schema}.a SELECT g, 'a' || g FROM generate_series(1, 5) g")
    db.sql(f"INSERT INTO {db.schema}.b VALUES (1, NULL)")
    host = _Host(db, ["a", "b", "c"], tmp_path)
    holder, name = _exported(db)
    try:
        db.sql(f"INSERT INTO {db.schema}.a VALUES (6, 'after')")
        db.sql(f"INSERT INTO {db.schema}.c VALUES (1, 'after')")
        initial_snapshot(host, name, _POINT)  # type: ignore[arg-type]
    finally:
        holder.close()
    a, b, c = (f"{db.schema}.{t}" for t in ("a", "b", "c"))
    assert [(t, r) for t, r, _ in host.written] == [
        *((a, (str(i), f"a{i}")) for i in range(1, 6)),
        (b, ("1", None)),
    ]
    sources = [s for _, _, s in host.written]
    assert sources[:-1] == [b"true@16B3748"] * 5 and sources[-1] == b"last@16B3748"
    assert host.stats.snapshot_expected == {a: 5, b: 1, c: 0}
    assert host.stats.snapshot_rows == {a: 5, b: 1, c: 0}
    assert host.progress_seen[-1] == (b, 1, 1) and (a, 5, 5) in host.progress_seen
    assert host.finished == 1 and len({id(t) for t in host.txs}) == 1
    assert set(host.session.codecs) == set(host.infos)  # the stream's codecs from here on
    assert host.session.tracker.confirmable() == _POINT


def test_a_stop_during_the_snapshot_ends_it_unconfirmed(db: Db, tmp_path: Path) -> None:
    """A stop between batches unwinds (:class:`Stop`): nothing is confirmed and the
    snapshot is not reported done."""
    db.sql(f"CREATE TABLE {db.schema}.a (id int PRIMARY KEY)")
    db.sql(f"INSERT INTO {db.schema}.a SELECT generate_series(1, 9)")
    host = _Host(db, ["a"], tmp_path, stop_after=1)
    holder, name = _exported(db)
    try:
        with pytest.raises(Stop):
            initial_snapshot(host, name, _POINT)  # type: ignore[arg-type]
    finally:
        holder.close()
    assert len(host.written) < 9 and host.finished == 0
    assert host.session.tracker.confirmable() == 0
