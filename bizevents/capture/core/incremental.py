"""Incremental snapshots, interleaved with the stream: the watermark algorithm (DBLog).

A table is read in chunks by primary key, without a lock and without pausing the
stream. The stream's reader reads each chunk itself, at a transaction boundary, so
that it knows exactly which changes its topic already holds. The chunk's rows wait in
a :class:`Window` until the stream reaches the chunk's closing point, a high watermark
written through the log (PostgreSQL: a ``pg_logical_emit_message``; MariaDB: the
binlog position its consistent snapshot matches). Every record the stream writes for a
key of the open window's table, meanwhile, supersedes that key's chunk row: the stream's
change is newer than (or as new as) the row the chunk read. At the closing point the
rows left are written as op ``r`` with ``source.snapshot = "incremental"``; nothing the
stream writes later can be older than them. Memory holds one chunk.

A chunk is read and written a slice at a time, between the stream's changes, so that a
change waits for one slice, not for a chunk (the stream's latency during a snapshot).
The window is open from the chunk's query on: a stream record of a key whose row is not
fetched yet drops that row when it comes (:attr:`Window.gone`). Once closed, the window
is *draining* until its last row is written: a stream record supersedes its unwritten
rows still (the stream's change is newer).

Progress is the last key of the last chunk Kafka acknowledged, kept in the snapshot
ledger (:mod:`bizevents.capture.core.state`); a capture killed mid-snapshot starts again
from there (a chunk read twice is a duplicate, never a gap).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bizevents.capture.core.offsets import Tx
from bizevents.capture.core.state import Ledger, Pending, StateStore

__all__ = ["Incremental", "Window"]

#: The ``source.snapshot`` value of incremental snapshot rows (Debezium's).
INCREMENTAL = "incremental"


@dataclass(slots=True)
class Window:
    """One chunk read and waiting for its closing point in the stream."""

    pending: Pending
    topic: str
    #: The watermark that closes it (a LogicalMessage's content, a binlog position).
    mark: Any
    #: key bytes -> the row as the source gave it, in key order.
    rows: dict[bytes, Any] = field(default_factory=dict)
    #: The key (as text) of the chunk's last row; ``None`` for an empty chunk.
    last: list[str | None] | None = None
    #: The chunk was full: more rows may follow.
    full: bool = False
    superseded: int = 0
    #: The source's codec of the table (writes the rows at the closing point).
    codec: Any = None
    #: Rows whose key did not convert: dead-lettered at the closing point.
    unkeyed: list[Any] = field(default_factory=list)
    #: The chunk's rows are still being fetched.
    reading: bool = False
    #: Keys the stream wrote while the chunk was read: their rows, fetched later, are older.
    gone: set[bytes] = field(default_factory=set)

    def supersede(self, key: bytes | None) -> None:
        """The stream wrote a record of ``key``: the chunk's row of it is older."""
        if key is None:
            return
        if self.rows.pop(key, None) is not None:
            self.superseded += 1
        elif self.reading:
            self.gone.add(key)

    def fetched(self, key: bytes, values: Any) -> None:
        """A row of the chunk, as read (unless the stream wrote its key meanwhile)."""
        if key in self.gone:
            self.superseded += 1
        else:
            self.rows[key] = values


class Incremental:
    """The incremental snapshots of one capture: the ledger's queue, one chunk at a
    time, and the progress records stored once Kafka acknowledged each chunk."""

    def __init__(
        self,
        ledger: Ledger,
        store: StateStore,
        ledger_key: bytes,
        chunk_rows: int,
        on_progress: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self.ledger = ledger
        self.store = store
        self.ledger_key = ledger_key
        self.chunk_rows = chunk_rows
        self.window: Window | None = None
        #: The closed window whose rows are being written (a slice at a time).
        self.draining: Window | None = None
        #: ``on_progress(table, rows, rows_this_run)`` after each chunk: the snapshot's
        #: rows in all (the ledger's, across restarts) and those this process wrote.
        self.on_progress = on_progress
        #: Per snapshot (table, id): the rows this process wrote (a resumed snapshot's
        #: ledger counts those of the runs before too).
        self.run_rows: dict[tuple[str, str], int] = {}
        #: Chunks written, with the ledger to store once Kafka acknowledged them.
        self._unsaved: deque[tuple[Tx, dict[str, Any]]] = deque()
        self._dirty = False
        self._retry_at = 0.0

    def next(self) -> Pending | None:
        """The snapshot whose next chunk should be read now, if any."""
        if self.window is not None or self.draining is not None:
            return None
        if time.monotonic() < self._retry_at:
            return None
        for pending in self.ledger.queue:
            if not pending.paused:
                return pending
        return None

    def open(self, window: Window) -> None:
        self.window = window

    def retry_later(self, seconds: float = 0.05) -> None:
        """The chunk just read cannot be used (the stream was ahead of it): read again."""
        self.window = None
        self._retry_at = time.monotonic() + seconds

    def close(self) -> Window:
        """The open window reached its closing point: its rows go out now; the ledger
        moves on (stored by :meth:`written` once they are acknowledged)."""
        window = self.window
        assert window is not None
        self.window = None
        self.draining = window
        pending = window.pending
        pending.rows += len(window.rows)
        ref = (pending.table, pending.id)
        run = self.run_rows[ref] = self.run_rows.get(ref, 0) + len(window.rows)
        if window.last is not None:
            pending.after = window.last
        if not window.full:
            self.ledger.queue = [p for p in self.ledger.queue if p is not pending]
            whole = pending.where is None
            if whole and pending.table not in self.ledger.tables:
                self.ledger.tables.append(pending.table)
        if self.on_progress is not None:
            self.on_progress(pending.table, pending.rows, run)
        return window

    def written(self, tx: Tx) -> None:
        """The closed window's rows were produced under ``tx``: store the ledger as it
        is now once Kafka acknowledged them."""
        self.draining = None
        self._unsaved.append((tx, self.ledger.to_json()))

    def supersede(self, topic: str, key: bytes | None) -> None:
        """The stream wrote a record of ``key`` to ``topic``: the snapshot's row of it,
        read or not yet written, is older."""
        for window in (self.window, self.draining):
            if window is not None and window.topic == topic:
                window.supersede(key)

    def changed(self) -> None:
        """The ledger changed otherwise (a signal): store it once the chunks written
        before are acknowledged (it holds their progress too)."""
        self._dirty = True

    def store_acknowledged(self, producer: Any) -> None:
        """Store the ledger of every chunk Kafka acknowledged, in order."""
        unsaved = self._unsaved
        record = None
        while unsaved and unsaved[0][0].pending == 0:
            record = unsaved.popleft()[1]
        # The ledger moved on with a closed window: not stored before its rows are.
        if not unsaved and self._dirty and self.draining is None:
            record = self.ledger.to_json()
            self._dirty = False
        if record is not None:
            self.store.write(producer, self.ledger_key, record)

    @property
    def busy(self) -> bool:
        """A snapshot is under way."""
        return bool(self.ledger.queue) or self.window is not None or self.draining is not None


def xid_precedes(a: int, b: int) -> bool:
    """PostgreSQL's 32-bit transaction id order (modulo 2**32)."""
    return a != b and ((a - b) & 0xFFFFFFFF) >= 0x80000000


def snapshot_sees(snapshot: str) -> Callable[[int], bool]:
    """From ``pg_current_snapshot()``'s text (``xmin:xmax:xip,...``), whether a
    transaction id (32-bit, as pgoutput gives it) is visible in that snapshot."""
    xmin_s, xmax_s, xip_s = snapshot.split(":")
    xmax = int(xmax_s) & 0xFFFFFFFF
    xip = {int(x) & 0xFFFFFFFF for x in xip_s.split(",") if x}
    del xmin_s

    def sees(xid: int) -> bool:
        return xid not in xip and xid_precedes(xid, xmax)

    return sees
