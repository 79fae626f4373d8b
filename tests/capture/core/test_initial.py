"""The one initial snapshot's writer, with a fake capture (pure code: both sources'
real snapshots run in tests/capture/postgres/test_stream.py and
tests/capture/mariadb/test_capture.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bizevents.capture.core.capture import Stop
from bizevents.capture.core.initial import SnapshotTable, write_snapshot, write_tables
from bizevents.capture.core.offsets import AckTracker, Tx
from bizevents.capture.metrics import CaptureStats


class _Capture:
    def __init__(self) -> None:
        self.stats = CaptureStats("s", "slot")
        self.session = SimpleNamespace(producer=SimpleNamespace(poll=lambda _t: 0))
        self.log = SimpleNamespace(info=lambda *a, **k: None)
        self.progress_seen: list[tuple[str, int, int]] = []
        self.progress = lambda t, done, total: self.progress_seen.append((t, done, total))
        self.stopping = False
        self.written: list[tuple[str, Any, bytes]] = []
        self.polled = 0

    def snapshot_row(
        self, _codec: Any, table: str, _key: Any, row: Any, source: bytes, _ts: Any, tx: Tx
    ) -> bool:
        tx.produced(1)
        self.written.append((table, row, source))
        return True

    def check_delivery(self) -> None:
        self.polled += 1

    def backpressure(self) -> None:
        pass


def _table(name: str, batches: list[list[int]], last: bool, **kw: Any) -> SnapshotTable:
    codec = SimpleNamespace(events=0)
    return SnapshotTable(name, codec, iter(batches), b"true", b"last", last=last, **kw)


def test_only_the_last_row_of_the_last_table_says_last() -> None:
    capture = _Capture()
    tx = AckTracker().begin(None)
    tables = [
        _table("a", [[1, 2], [3]], last=False),
        _table("b", [[4], [], [5, 6]], last=True, expected=3),
    ]
    write_tables(capture, tables, tx)  # type: ignore[arg-type]
    assert [(t, r) for t, r, _s in capture.written] == [
        ("a", 1),
        ("a", 2),
        ("a", 3),
        ("b", 4),
        ("b", 5),
        ("b", 6),
    ]
    assert [s for _t, _r, s in capture.written] == [b"true"] * 5 + [b"last"]
    assert capture.stats.snapshot_rows == {"a": 3, "b": 3}
    assert capture.stats.events == {"a": 3, "b": 3}
    assert capture.progress_seen[-1] == ("b", 3, 3)
    assert capture.polled == 4  # once a batch with rows
    assert tx.pending == 6


def test_an_empty_table_counts_none_and_writes_none() -> None:
    capture = _Capture()
    write_tables(capture, [_table("e", [], last=True)], AckTracker().begin(None))  # type: ignore[arg-type]
    assert capture.written == [] and capture.stats.snapshot_rows == {"e": 0}


def test_a_stop_asked_for_ends_the_snapshot_between_batches() -> None:
    capture = _Capture()
    capture.stopping = True
    with pytest.raises(Stop):
        write_tables(capture, [_table("a", [[1, 2], [3]], last=True)], AckTracker().begin(None))  # type: ignore[arg-type]
    assert [r for _t, r, _s in capture.written] == [1]  # the batch's last row held back


def test_the_snapshot_transaction_ends_after_the_rows_and_before_the_commit() -> None:
    capture = _Capture()
    tx = AckTracker().begin(None)
    steps: list[str] = []
    conn = SimpleNamespace(commit=lambda: steps.append("end read"))

    def commit(committed: Tx) -> None:
        assert committed is tx
        steps.append(f"commit after {len(capture.written)} rows")

    write_snapshot(capture, conn, [_table("a", [[1, 2]], last=True)], tx, commit)  # type: ignore[arg-type]
    assert steps == ["end read", "commit after 2 rows"]
