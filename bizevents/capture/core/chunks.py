"""The one driver of incremental snapshots' chunks (DBLog), for every source.

:mod:`bizevents.capture.core.incremental` holds the ledger's queue and the window; this
module turns them, a slice at a time between the stream's transactions: open a
chunk's query, fetch its rows into the window, close the window once the stream
passed its mark, write the rows the stream did not supersede, store the progress once
Kafka acknowledged them. What differs by source (the query, the mark, the ``source``
block) is a :class:`ChunkSource` composed into the driver.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.capture import Session
from bizevents.capture.core.codec import encoded_ts
from bizevents.capture.core.incremental import Incremental, Window
from bizevents.capture.core.offsets import AckTracker, Tx
from bizevents.capture.core.state import Pending
from bizevents.capture.exceptions import CaptureError

__all__ = ["SLICE", "Chunk", "ChunkDriver", "ChunkHost", "ChunkSource", "Drain", "WriteRow"]

#: Rows of a chunk fetched or written per slice: a stream change waits for one slice at
#: most, not for a whole chunk.
SLICE = 128


@dataclass(slots=True)
class Chunk:
    """A chunk's query, opened by its source."""

    topic: str
    #: What closes its window once the stream passed it (a watermark, a position).
    mark: Any
    #: The source's codec of the table (keys the rows, writes them).
    codec: Any
    #: Holds the rows, fetched a slice at a time.
    cursor: Any
    #: A row's key as the ledger keeps it (where the next chunk starts).
    key_text: Callable[[Any], list[Any]]


class ChunkSource(Protocol):
    """What a source gives the driver."""

    def open_chunk(self, pending: Pending) -> Chunk | None:
        """The next chunk's query; ``None`` when there is none to read now (the source
        dropped or stopped the snapshot, or asked for it to be read again later)."""

    def fetch(self, cursor: Any, rows: int) -> list[Any] | None:
        """The chunk's next rows; ``None`` when the server failed (the source stopped
        the snapshot)."""

    def end_chunk(self, cursor: Any) -> None:
        """The chunk's rows are fetched, or given up: its query ends."""

    def fetched_all(self, window: Window) -> None:
        """Every row of the chunk is in ``window`` (PostgreSQL writes its watermark)."""

    def passed(self, window: Window) -> Any | None:
        """Where the stream passed the window's mark; ``None``: not yet."""

    def drain_under(self, window: Window, at: Any, now_ms: int) -> tuple[Tx, Any]:
        """The transaction (committed) and ``source`` block the closed window's rows
        are written under; ``at`` is what :meth:`passed` gave."""

    def counted(self, window: Window, rows: int) -> None:
        """The closed window's ``rows`` were written: the source's event counts."""


#: ``CaptureCore.snapshot_row``: ``(codec, table, key, row, source, ts, tx)``, whether
#: the row was written (else dead-lettered).
WriteRow = Callable[[Any, str, bytes | None, Any, bytes, bytes, Tx], bool]


class ChunkHost(Protocol):
    """What the driver asks of its capture."""

    config: CaptureConfig
    log: Any
    stopping: bool

    @property
    def session(self) -> Session: ...

    @property
    def snapshot_row(self) -> WriteRow: ...


@dataclass(slots=True)
class Drain:
    """A closed window's rows being written, a slice at a time."""

    window: Window
    #: The keys of its rows at the closing point, in key order.
    keys: list[bytes]
    tx: Tx
    #: The rows' ``source`` block and timestamp.
    source: Any
    ts: bytes
    next: int = 0
    #: Rows not superseded: written, or dead-lettered.
    written: int = 0


@dataclass(slots=True)
class _Reading:
    window: Window
    chunk: Chunk
    fetched: int = 0


class ChunkDriver:
    """Turns one capture's incremental snapshots, a slice at a time, for ``source``."""

    def __init__(
        self, inc: Incremental, source: ChunkSource, capture: ChunkHost, tracker: AckTracker
    ) -> None:
        self.inc = inc
        self.source = source
        self.capture = capture
        self.tracker = tracker
        self.producer = capture.session.producer
        self.slice_rows = SLICE
        self.reading: _Reading | None = None
        #: The closed window's rows being written.
        self.drain: Drain | None = None

    def run(self, idle: bool = False, budget_s: float = 0.0) -> bool:
        """At a transaction boundary, a slice of the snapshot's work, and more while
        ``budget_s`` lasts (a stream change waits for about that, not for a chunk);
        when ``idle``, every slice ready until a chunk is written. Whether more work is
        ready without the stream."""
        until = time.monotonic() + budget_s
        more = self.slice()
        while more and (idle or time.monotonic() < until):
            more = self.slice()
        return more

    def slice(self) -> bool:
        """Write a slice of the closed window's rows, or fetch a slice of the open
        one's chunk, or close the window once the stream passed its mark, or open the
        next chunk's query. Whether more work is ready without the stream (``False``
        once a chunk's rows are all written)."""
        inc = self.inc
        if self.drain is not None:
            return self.drain_slice()
        if self.reading is not None:
            if self.reading.window is not inc.window:  # stopped, or dropped to be read again
                self.end_read()
            else:
                self.read_slice()
                if self.reading is not None:
                    return True
        if inc.window is not None:
            return self.close_passed()
        capture = self.capture
        if capture.stopping or self.tracker.in_flight >= capture.config.max_in_flight // 2:
            return False  # Kafka first
        pending = inc.next()
        if pending is None:
            return False
        chunk = self.source.open_chunk(pending)
        if chunk is None:
            return False
        # Open from now on: every later stream record of the table supersedes its row,
        # fetched or not yet.
        window = Window(pending, chunk.topic, chunk.mark, codec=chunk.codec, reading=True)
        inc.open(window)
        self.reading = _Reading(window, chunk)
        return True

    def read_slice(self) -> None:
        """Fetch and key a slice of the open chunk's rows; after the last, end its
        query."""
        reading = self.reading
        assert reading is not None
        window, chunk = reading.window, reading.chunk
        rows = self.source.fetch(chunk.cursor, self.slice_rows)
        if rows is None:
            self.reading = None
            return
        key = chunk.codec.key
        for row in rows:
            try:
                window.fetched(key(row), row)
            except CaptureError:
                window.unkeyed.append(row)
        if rows:
            window.last = chunk.key_text(rows[-1])
        reading.fetched += len(rows)
        if len(rows) == self.slice_rows:
            return
        window.full = reading.fetched >= self.inc.chunk_rows
        self.end_read()
        window.reading = False
        window.gone.clear()
        self.source.fetched_all(window)

    def end_read(self) -> None:
        assert self.reading is not None
        self.source.end_chunk(self.reading.chunk.cursor)
        self.reading = None

    def close_passed(self) -> bool:
        """Close the open window if its rows are all fetched and the stream passed its
        mark: its rows not superseded go out, a slice at a time; the stream supersedes
        them until then. Whether it closed."""
        window = self.inc.window
        if window is None or window.reading:
            return False
        at = self.source.passed(window)
        if at is None:
            return False  # the stream reads up to the chunk's mark first
        self.inc.close()
        now = int(time.time() * 1000)
        tx, source = self.source.drain_under(window, at, now)
        self.drain = Drain(window, list(window.rows), tx, source, encoded_ts(now))
        return True

    def drain_slice(self) -> bool:
        """Write a slice of the closed window's rows; after the last, its dead letters,
        and the ledger's progress once Kafka acknowledged them all. Whether rows are
        left."""
        drain, inc = self.drain, self.inc
        assert drain is not None
        window, tx = drain.window, drain.tx
        codec = window.codec
        table = window.pending.table
        write = self.capture.snapshot_row
        keys = drain.keys
        end = min(drain.next + self.slice_rows, len(keys))
        rows = window.rows
        for key in keys[drain.next : end]:
            row = rows.pop(key, None)
            if row is not None:  # None: superseded by the stream since it closed
                write(codec, table, key, row, drain.source, drain.ts, tx)
                drain.written += 1
        drain.next = end
        if end < len(keys):
            return True
        self.drain = None
        for row in window.unkeyed:  # their key does not convert: dead letters
            write(codec, table, None, row, drain.source, drain.ts, tx)
        self.source.counted(window, drain.written)
        inc.written(tx)
        self.producer.poll(0)
        inc.store_acknowledged(self.producer)  # the chunks before, now acknowledged
        if not window.full:
            done = window.pending
            self.capture.log.info(
                "incremental snapshot done",
                table=table,
                rows=inc.run_rows.get((table, done.id), 0),
                rows_all_runs=done.rows,
                id=done.id,
            )
        return False

    def truncated(self, topic: str) -> None:
        """A TRUNCATE of ``topic``'s table: the open window's rows may be of before it
        (read again); the closed one's rows are, and do not follow it."""
        inc = self.inc
        if inc.window is not None and inc.window.topic == topic:
            inc.retry_later()
        if self.drain is not None and self.drain.window.topic == topic:
            self.drain.window.rows.clear()
