"""MariaDB's incremental snapshot reader, a slice per turn of the binlog loop: its
fetching and writing of a chunk, with the server's I/O faked (the real path runs in
tests/capture/core/test_incremental.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from bizevents.capture.core.chunks import SLICE, ChunkDriver
from bizevents.capture.core.incremental import Incremental
from bizevents.capture.core.offsets import AckTracker, Tx
from bizevents.capture.core.state import Ledger, Pending
from bizevents.capture.mariadb import queries as my
from bizevents.capture.mariadb import stream as mysqlstream
from bizevents.capture.mariadb.chunks import BinlogChunks
from bizevents.capture.mariadb.queries import BinlogPosition


class _Store:
    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []

    def write(self, _producer: Any, _key: bytes, value: dict[str, Any]) -> None:
        self.written.append(json.loads(json.dumps(value)))


class _Cursor:
    """An unbuffered result: rows handed out as fetched."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows, self.closed, self.fetches = rows, False, 0

    def fetchmany(self, n: int) -> list[dict[str, Any]]:
        self.fetches += 1
        out, self.rows = self.rows[:n], self.rows[n:]
        return out


class _Codec:
    topic = "m.d.t"
    key_names = ("id",)
    events = 0

    def key(self, row: dict[str, Any]) -> bytes:
        return str(row["id"]).encode()

    def source(self, **_: Any) -> Any:
        return lambda _i: b"src"


class _Capture:
    def __init__(self) -> None:
        self.stopping = False
        self.config = SimpleNamespace(max_in_flight=10_000, snapshot_query_timeout_s=60.0)
        self.endpoints = SimpleNamespace(dsn="mysql://u@h/d")
        self.server_id = 1
        self.stats = SimpleNamespace(events={})
        self.log = SimpleNamespace(info=lambda *a, **k: None)
        self.written: list[bytes | None] = []
        self.codec = _Codec()
        self.tracker = AckTracker()
        self.session = SimpleNamespace(producer=SimpleNamespace(poll=lambda _t: 0))
        self.txs: list[Tx] = []

    def table_codec(self, _table: Any) -> _Codec:
        return self.codec

    def commit(self, tx: Tx, _position: Any) -> None:
        self.tracker.commit(tx, 0)

    def snapshot_row(self, _c: Any, _t: str, key: Any, _row: Any, *_rest: Any) -> bool:
        tx: Tx = _rest[-1]
        tx.produced(1)
        self.written.append(key)
        self.txs.append(tx)
        return True


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> Any:
    rows = [{"id": i, "v": i} for i in range(1, 301)]
    cursor = _Cursor(rows)
    at = BinlogPosition("bin.000001", 500)
    monkeypatch.setattr(my, "catalog_table", lambda *_a: SimpleNamespace(columns=()))
    monkeypatch.setattr(my, "open_chunk", lambda *_a: (at, cursor))
    monkeypatch.setattr(my, "end_chunk", lambda _conn, c: setattr(c, "closed", True))
    ledger = Ledger(True, [], [Pending("d.t", "auto")])
    store = _Store()
    r = mysqlstream.BinlogReader.__new__(mysqlstream.BinlogReader)
    r.inc = Incremental(ledger, store, b"k", 1_000)  # type: ignore[arg-type]
    r.capture = _Capture()
    r.tracker = r.capture.tracker
    r.producer = SimpleNamespace(poll=lambda _t: 0)
    r.stream = SimpleNamespace(log_file="bin.000001", log_pos=400)
    r.gtid_domain_state = {}
    r.chunks = BinlogChunks(r, r.inc)
    r.chunks.conn = object()
    r.snapshots = ChunkDriver(r.inc, r.chunks, r.capture, r.tracker)
    r.cursor, r.store = cursor, store
    return r


def test_a_chunk_is_fetched_and_written_a_slice_per_turn(reader: Any) -> None:
    """Each turn fetches or writes at most a slice; a stream record of a key not fetched
    yet, and of one fetched but not written yet, drops that key's row; the ledger's
    progress is stored only once the last slice's rows are acknowledged."""
    inc, capture = reader.inc, reader.capture
    reader.snapshot_step()  # the chunk's query, nothing fetched yet
    assert reader.cursor.fetches == 0 and inc.window is not None
    inc.supersede("m.d.t", b"200")  # the stream wrote key 200 before its row was fetched
    reader.snapshot_step()
    assert reader.cursor.fetches == 1 and len(inc.window.rows) == SLICE
    reader.snapshot_step()
    reader.snapshot_step()  # the last (short) slice: the chunk's transaction ends
    assert reader.cursor.closed and inc.window.rows.get(b"200") is None
    assert len(inc.window.rows) == 299 and not inc.window.full
    reader.snapshot_step()  # the stream has not reached the chunk's position
    assert inc.window is not None and capture.written == []
    reader.stream.log_pos = 500
    reader.snapshot_step()  # closes: rows go out from the next turns
    assert inc.draining is not None and capture.written == []
    turns = 0
    while reader.snapshots.drain is not None:
        before = len(capture.written)
        reader.snapshot_step()
        assert len(capture.written) - before <= SLICE
        turns += 1
        if turns == 1:
            inc.supersede("m.d.t", b"290")  # the stream wrote key 290 before its row
            inc.store_acknowledged(None)
            assert reader.store.written == []  # rows still to go: no progress stored
    assert turns == 3
    assert len(capture.written) == 298 and b"290" not in capture.written
    assert b"200" not in capture.written
    assert inc.ledger.queue == [] and inc.ledger.tables == ["d.t"]
    inc.store_acknowledged(None)
    assert reader.store.written == []  # the rows are not acknowledged yet
    for tx in capture.txs:
        tx.ack(None)  # Kafka acknowledged each row
    inc.store_acknowledged(None)
    assert [w["queue"] for w in reader.store.written] == [[]]
    assert reader.store.written[0]["tables"] == ["d.t"]


def test_an_idle_turn_does_a_chunks_work_at_once(reader: Any) -> None:
    """A heartbeat turn (nothing else waiting in the binlog) runs slices until the
    chunk is written: the pace of a chunk per idle turn, as before slices."""
    reader.stream.log_pos = 500
    reader.snapshot_step(idle=True)
    assert len(reader.capture.written) == 300 and reader.snapshots.drain is None
    assert reader.inc.window is None and reader.inc.ledger.queue == []


def test_a_turn_with_time_to_spare_goes_on_slicing(reader: Any) -> None:
    """A busy turn's budget (the stream had time since the last turn) lets it do more
    than one slice; with none it does one (the tests above)."""
    reader.stream.log_pos = 500
    reader.snapshot_step(budget_s=60.0)
    assert len(reader.capture.written) == 300 and reader.snapshots.drain is None
