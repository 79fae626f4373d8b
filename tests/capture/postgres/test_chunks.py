"""PostgreSQL's side of the chunk driver, its pure part: the watermark that closes a
window (the real chunks run in tests/capture/core/test_incremental.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bizevents.capture.core.incremental import Window
from bizevents.capture.core.offsets import AckTracker
from bizevents.capture.core.state import Pending
from bizevents.capture.postgres.chunks import SlotChunks


def _chunks() -> Any:
    capture = SimpleNamespace(
        session=SimpleNamespace(tracker=AckTracker()), stats=SimpleNamespace(events={})
    )
    return SlotChunks(capture, None, None)  # type: ignore[arg-type]


def test_a_window_is_passed_at_its_own_watermark_only() -> None:
    chunks = _chunks()
    window = Window(Pending("s.t", "id1"), "p.s.t", "mark-b")
    assert chunks.passed(window) is None  # no watermark read yet
    chunks.watermark = ("mark-a", 100)  # an older chunk's, read again since
    assert chunks.passed(window) is None
    chunks.watermark = ("mark-b", 200)
    assert chunks.passed(window) == 200
    assert chunks.watermark is None  # used once


def test_the_rows_go_out_under_a_transaction_committed_at_once() -> None:
    chunks = _chunks()
    written: list[Any] = []
    codec = SimpleNamespace(
        events=5,
        source=lambda *a: SimpleNamespace(with_long=lambda lsn: written.append((a, lsn)) or b"s"),
    )
    window = Window(Pending("s.t", "id1"), "p.s.t", "m", codec=codec)
    tx, source = chunks.drain_under(window, 300, 1_000)
    assert source == b"s" and written == [((1_000, 1_000_000, "incremental", None), 300)]
    assert tx.pending == 0 and tx.end_lsn == 0  # committed, at no position
    chunks.counted(window, 3)
    assert codec.events == 8 and chunks.capture.stats.events == {"s.t": 8}
