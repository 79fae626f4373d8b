"""The one chunk driver of incremental snapshots, with a fake source (pure code: the
real sources run in tests/capture/core/test_incremental.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from bizevents.capture.core.chunks import SLICE, Chunk, ChunkDriver
from bizevents.capture.core.incremental import Incremental, Window
from bizevents.capture.core.offsets import AckTracker, Tx
from bizevents.capture.core.state import Ledger, Pending
from bizevents.capture.exceptions import CaptureError

TOPIC = "p.s.t"


class _Store:
    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []

    def write(self, _producer: Any, _key: bytes, value: dict[str, Any]) -> None:
        self.written.append(json.loads(json.dumps(value)))


class _Codec:
    topic = TOPIC
    events = 0

    def key(self, row: tuple[Any, ...]) -> bytes:
        if row[0] is None:
            raise CaptureError("no key")
        return str(row[0]).encode()


class _Source:
    """A source whose stream position is an integer: a chunk's mark is where the stream
    was when its query ran (MariaDB's way), or a watermark written once its rows are
    fetched (PostgreSQL's way)."""

    def __init__(self, rows: list[tuple[Any, ...]], watermark: bool) -> None:
        self.rows = rows
        self.watermark = watermark
        self.codec = _Codec()
        self.stream_at = 0
        self.marks: list[Any] = []
        self.ended = 0
        self.tracker = AckTracker()
        self.rows_counted = 0

    def open_chunk(self, pending: Pending) -> Chunk | None:
        after = int(pending.after[0]) if pending.after else 0
        cursor = [r for r in self.rows if r[0] is None or r[0] > after]
        mark = "wm-1" if self.watermark else 10
        return Chunk(TOPIC, mark, self.codec, cursor, lambda row: [str(row[0])])

    def fetch(self, cursor: list[Any], rows: int) -> list[Any] | None:
        out = cursor[:rows]
        del cursor[:rows]
        return out

    def end_chunk(self, cursor: Any) -> None:
        self.ended += 1

    def fetched_all(self, window: Window) -> None:
        if self.watermark:
            self.marks.append(window.mark)  # written through the log

    def passed(self, window: Window) -> Any | None:
        if self.watermark:
            return self.stream_at if window.mark in self.marks and self.stream_at else None
        return window.mark if self.stream_at >= window.mark else None

    def drain_under(self, window: Window, at: Any, now_ms: int) -> tuple[Tx, Any]:
        tx = self.tracker.begin(None)
        self.tracker.commit(tx, 0)
        return tx, f"source at {at}"

    def counted(self, window: Window, rows: int) -> None:
        self.rows_counted += rows


class _Capture:
    def __init__(self) -> None:
        self.stopping = False
        self.config = SimpleNamespace(max_in_flight=10_000)
        self.session = SimpleNamespace(producer=SimpleNamespace(poll=lambda _t: 0))
        self.log = SimpleNamespace(info=lambda *a, **k: None)
        self.written: list[tuple[bytes | None, Any, Any]] = []
        self.txs: list[Tx] = []

    def snapshot_row(
        self, _codec: Any, _table: str, key: Any, row: Any, source: Any, _ts: Any, tx: Tx
    ) -> bool:
        tx.produced(1)
        self.written.append((key, row, source))
        self.txs.append(tx)
        return True


def _driver(rows: int, watermark: bool, chunk_rows: int = 1_000) -> Any:
    source = _Source([(i, f"v{i}") for i in range(1, rows + 1)], watermark)
    store = _Store()
    inc = Incremental(Ledger(True, [], [Pending("s.t", "auto")]), store, b"k", chunk_rows)  # type: ignore[arg-type]
    capture = _Capture()
    driver = ChunkDriver(inc, source, capture, source.tracker)
    return SimpleNamespace(driver=driver, source=source, inc=inc, capture=capture, store=store)


@pytest.mark.parametrize("watermark", [False, True], ids=["position", "watermark"])
def test_a_window_closes_only_once_the_stream_passed_its_mark(watermark: bool) -> None:
    """Rows wait in the window until the stream passes the mark; the superseded ones
    (a stream record of their key, before or after the row was fetched) never go out."""
    t = _driver(300, watermark)
    driver, inc, capture = t.driver, t.inc, t.capture
    assert driver.slice() and inc.window is not None  # the query, nothing fetched yet
    inc.supersede(TOPIC, b"200")  # the stream wrote key 200 before its row was fetched
    while driver.reading is not None:
        driver.slice()
    assert t.source.ended == 1 and len(inc.window.rows) == 299
    assert t.source.marks == (["wm-1"] if watermark else [])
    inc.supersede(TOPIC, b"7")  # inside the window: the stream's change is newer
    assert not driver.slice() and capture.written == []  # the stream is before the mark
    t.source.stream_at = 10
    assert driver.slice() and inc.draining is not None  # closed
    inc.supersede(TOPIC, b"290")  # closed, not written yet: superseded still
    assert not driver.run(idle=True)
    keys = [k for k, _row, _src in capture.written]
    assert len(keys) == 297 and {b"7", b"200", b"290"}.isdisjoint(keys)
    assert keys == sorted(keys, key=int)  # in key order
    assert {src for _k, _r, src in capture.written} == {"source at 10"}
    assert t.source.rows_counted == 297 and inc.ledger.tables == ["s.t"]


def test_a_drain_writes_a_slice_at_a_time_and_stores_progress_once_acknowledged() -> None:
    t = _driver(300, watermark=False)
    driver, inc, capture = t.driver, t.inc, t.capture
    t.source.stream_at = 10
    while inc.draining is None:
        driver.slice()
    turns = 0
    while driver.drain is not None:
        before = len(capture.written)
        driver.slice()
        assert len(capture.written) - before <= SLICE
        turns += 1
        inc.store_acknowledged(None)
        assert t.store.written == []  # not acknowledged yet: no progress stored
    assert turns == 3 and len(capture.written) == 300
    for tx in capture.txs:
        tx.ack(None)
    inc.store_acknowledged(None)
    assert [w["queue"] for w in t.store.written] == [[]]


def test_a_full_chunk_moves_the_ledger_on_to_the_next() -> None:
    """A chunk of ``chunk_rows`` rows may have more after it: the next chunk starts
    after its last key."""
    t = _driver(5, watermark=False, chunk_rows=3)
    t.source.rows = t.source.rows[:3]  # the query's limit
    t.source.stream_at = 10
    t.driver.run(idle=True)
    (pending,) = t.inc.ledger.queue
    assert pending.after == ["3"] and pending.rows == 3


def test_a_row_whose_key_does_not_convert_is_dead_lettered_at_the_close() -> None:
    t = _driver(2, watermark=True)
    t.source.rows.append((None, "no key"))
    t.driver.run(idle=True)
    t.source.stream_at = 5
    t.driver.run(idle=True)
    assert [k for k, _r, _s in t.capture.written] == [b"1", b"2", None]


def test_a_truncate_drops_the_open_window_and_the_closed_ones_rows() -> None:
    t = _driver(300, watermark=False)
    driver, inc = t.driver, t.inc
    driver.slice()
    driver.truncated(TOPIC)  # the open window: read again
    assert inc.window is None
    driver.slice()  # the dropped read ends
    assert driver.reading is None and t.source.ended == 1
    t.source.stream_at = 10
    inc._retry_at = 0.0
    while inc.draining is None:
        driver.slice()
    driver.slice()
    driver.truncated(TOPIC)  # the closed one's rows left: of before the truncate
    driver.run(idle=True)
    assert len(t.capture.written) == SLICE and driver.drain is None


def test_kafka_and_a_stop_come_before_the_next_chunk() -> None:
    t = _driver(10, watermark=False)
    t.source.tracker.in_flight = 5_000
    assert not t.driver.slice() and t.inc.window is None
    t.source.tracker.in_flight = 0
    t.capture.stopping = True
    assert not t.driver.slice() and t.inc.window is None
