"""PostgreSQL's side of the incremental snapshots' chunk driver
(:mod:`bizevents.capture.core.chunks`): a chunk is read in a repeatable-read
transaction on a connection of its own; its mark is a watermark written through the WAL
once its rows are fetched, passed when the slot gives it."""

from __future__ import annotations

import uuid
from collections import deque
from typing import Any

import psycopg2

from bizevents.capture.core.capture import chunk_condition
from bizevents.capture.core.chunks import Chunk
from bizevents.capture.core.filters import FilterError
from bizevents.capture.core.incremental import INCREMENTAL, Incremental, Window, snapshot_sees
from bizevents.capture.core.offsets import Tx
from bizevents.capture.core.signals import shown
from bizevents.capture.core.state import Pending
from bizevents.capture.postgres import queries as pg
from bizevents.capture.postgres.codec import TableCodec

__all__ = ["SlotChunks"]


class SlotChunks:
    """PostgreSQL's side of the chunk driver (:class:`ChunkSource`): a chunk is read in
    a repeatable-read transaction on a connection of its own; its mark is a watermark
    written through the WAL once its rows are fetched, passed when the slot gives it."""

    def __init__(self, capture: Any, side: pg.Connection, inc: Incremental) -> None:
        self.capture = capture
        self.side = side
        self.inc = inc
        self.conn: pg.Connection | None = None
        #: xids of the transactions written lately: a chunk whose snapshot does not see
        #: one of them is older than what the topic holds, and is read again.
        self.recent: deque[int] = deque(maxlen=4096)
        #: The last watermark the slot gave (its content, its LSN), read by the stream
        #: at a transaction boundary.
        self.watermark: tuple[str, int] | None = None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def open_chunk(self, pending: Pending) -> Chunk | None:
        capture, inc = self.capture, self.inc
        info = capture.info_named(pending.table)
        if info is None or info.key_nullable:
            capture.log.warning(
                "incremental snapshot dropped: the table has no primary key to chunk by"
                if info is not None
                else "incremental snapshot dropped: the table is not captured",
                table=pending.table,
            )
            inc.ledger.queue.remove(pending)
            inc.changed()
            return None
        codecs = capture.session.codecs
        codec = codecs.get(info.oid)
        if codec is None:
            codec = codecs[info.oid] = capture.codec(info.relation, info)
        if self.conn is None:
            self.conn = pg.connect(
                capture.endpoints.dsn, autocommit=False, application="bizevents-snapshot"
            )
        names = [c.name for c in info.relation.columns]
        try:
            where = chunk_condition(pending, names)
            snapshot, cursor = pg.open_chunk(
                self.conn,
                info.relation,
                info.key_names,
                pending.after,
                where,
                inc.chunk_rows,
                capture.config.snapshot_query_timeout_s,
            )
        except FilterError as exc:
            capture.stop_failed_snapshot(pending, f"its condition {shown(pending.where)}: {exc}")
            return None
        except psycopg2.Error as exc:
            if not pg.statement_failed(exc):
                raise
            reason = (exc.diag.message_primary or str(exc)).strip()
            capture.stop_failed_snapshot(pending, f"its chunk query failed: {reason}")
            return None
        sees = snapshot_sees(snapshot)
        if not all(sees(x) for x in self.recent):
            # A change the topic already holds is not in the chunk (it committed, but
            # was not visible yet): the chunk would be older than the topic.
            pg.end_chunk(self.conn, cursor)
            inc.retry_later()
            return None
        at = [names.index(k) for k in info.key_names]
        return Chunk(codec.topic, uuid.uuid4().hex, codec, cursor, lambda row: [row[i] for i in at])

    def fetch(self, cursor: Any, rows: int) -> list[Any] | None:
        return list(cursor.fetchmany(rows))

    def end_chunk(self, cursor: Any) -> None:
        assert self.conn is not None
        pg.end_chunk(self.conn, cursor)

    def fetched_all(self, window: Window) -> None:
        pg.emit_watermark(self.side, window.mark)

    def passed(self, window: Window) -> Any | None:
        watermark = self.watermark
        if watermark is None or watermark[0] != window.mark:
            return None
        self.watermark = None
        return watermark[1]

    def drain_under(self, window: Window, at: Any, now_ms: int) -> tuple[Tx, Any]:
        tracker = self.capture.session.tracker
        tx = tracker.begin(None)
        # Committed at once, at no position: the stream's transactions that follow
        # confirm theirs without waiting for the rows; the ledger waits for them.
        tracker.commit(tx, 0)
        source = window.codec.source(now_ms, now_ms * 1000, INCREMENTAL, None)
        return tx, source.with_long(at)

    def counted(self, window: Window, rows: int) -> None:
        codec: TableCodec = window.codec
        codec.events += rows
        self.capture.stats.events[window.pending.table] = codec.events
