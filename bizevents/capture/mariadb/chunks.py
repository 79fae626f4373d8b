"""MariaDB's side of the incremental snapshots' chunk driver
(:mod:`bizevents.capture.core.chunks`): a chunk is read in a consistent snapshot whose
binlog position is its mark, on a connection of its own."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

import pymysql

from bizevents.capture.core.capture import chunk_condition
from bizevents.capture.core.chunks import Chunk
from bizevents.capture.core.filters import FilterError
from bizevents.capture.core.incremental import INCREMENTAL, Incremental, Window
from bizevents.capture.core.offsets import Tx
from bizevents.capture.core.signals import shown
from bizevents.capture.core.state import Pending
from bizevents.capture.mariadb import queries as my
from bizevents.capture.mariadb.queries import BinlogPosition

__all__ = ["BinlogChunks"]


class BinlogChunks:
    """MariaDB's side of the chunk driver (:class:`ChunkSource`): a chunk is read in a
    consistent snapshot whose binlog position is its mark, on a connection of its own."""

    def __init__(self, reader: Any, inc: Incremental) -> None:
        self.reader = reader
        self.inc = inc
        self.capture = reader.capture
        self.conn: pymysql.connections.Connection[Any] | None = None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def at_or_after(self, position: BinlogPosition) -> bool:
        """Whether the stream has read every event before ``position``."""
        stream = self.reader.stream
        return (str(stream.log_file), int(stream.log_pos or 0)) >= (position.file, position.pos)

    def open_chunk(self, pending: Pending) -> Chunk | None:
        capture = self.capture
        database, _, name = pending.table.partition(".")
        if self.conn is None:
            self.conn = my.connect(capture.endpoints.dsn, autocommit=False)
        table = my.catalog_table(self.conn, database, name)
        codec = capture.table_codec(table)
        after = my.key_bound(table, codec.key_names, pending.after) if pending.after else None
        try:
            where = chunk_condition(pending, [c.name for c in table.columns])
            position, cursor = my.open_chunk(
                self.conn,
                database,
                name,
                codec.key_names,
                after,
                where,
                self.inc.chunk_rows,
                capture.config.snapshot_query_timeout_s,
            )
        except FilterError as exc:
            capture.stop_failed_snapshot(pending, f"its condition {shown(pending.where)}: {exc}")
            return None
        except pymysql.err.MySQLError as exc:
            if not my.statement_failed(exc):
                raise
            self.chunk_failed(pending, exc)
            return None
        stream = self.reader.stream
        if (str(stream.log_file), int(stream.log_pos or 0)) > (position.file, position.pos):
            # The stream already wrote changes this chunk does not include.
            my.end_chunk(self.conn, cursor)
            self.inc.retry_later()
            return None
        names = codec.key_names
        return Chunk(
            codec.topic, position, codec, cursor, lambda row: [_key_text(row[k]) for k in names]
        )

    def fetch(self, cursor: Any, rows: int) -> list[Any] | None:
        try:
            return list(cursor.fetchmany(rows))
        except pymysql.err.MySQLError as exc:
            if not my.statement_failed(exc):
                raise
            assert self.inc.window is not None
            self.chunk_failed(self.inc.window.pending, exc)
            return None

    def end_chunk(self, cursor: Any) -> None:
        assert self.conn is not None
        my.end_chunk(self.conn, cursor)

    def fetched_all(self, window: Window) -> None:
        pass  # the chunk's position is its mark: nothing to write

    def passed(self, window: Window) -> Any | None:
        return window.mark if self.at_or_after(window.mark) else None

    def drain_under(self, window: Window, at: Any, now_ms: int) -> tuple[Tx, Any]:
        # Committed at once, at the stream's position: its transactions that follow
        # store theirs without waiting for the rows; the ledger waits for them.
        reader, capture = self.reader, self.capture
        tx = reader.tracker.begin(None)
        capture.commit(tx, reader.position())
        source = window.codec.source(
            ts_ms=now_ms,
            snapshot=INCREMENTAL,
            server_id=capture.server_id,
            file=at.file,
            pos=at.pos,
            gtid=reader.gtid_state(),
        )
        return tx, source(0)

    def counted(self, window: Window, rows: int) -> None:
        window.codec.events += rows
        table = window.pending.table
        events = self.capture.stats.events
        events[table] = events.get(table, 0) + rows

    def chunk_failed(self, pending: Pending, exc: pymysql.err.MySQLError) -> None:
        """The server refused or interrupted a chunk's query: the snapshot stops with the
        server's reason; the chunk's connection starts afresh."""
        if self.conn is not None:
            with suppress(Exception):
                self.conn.close()
            self.conn = None
        reason = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
        self.capture.stop_failed_snapshot(pending, f"its chunk query failed: {reason}")


def _key_text(value: Any) -> Any:
    """A key value as the ledger keeps it (JSON): numbers and text as they are, the
    rest (decimals, dates) as their text, which MySQL compares back as the value."""
    if value is None or isinstance(value, int | str):
        return value
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return str(value)
