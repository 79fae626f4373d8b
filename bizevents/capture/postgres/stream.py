"""Streaming: pgoutput messages from the slot to technical topics.

Step 3 of :mod:`bizevents.capture.postgres.runner`: :func:`read_slot` starts the slot
and runs a :class:`SlotReader`, made per connection, over its capture (what it asks of
it: :class:`SlotHost`)."""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Protocol

import psycopg2
import psycopg2.extras

from bizevents.capture.core.chunks import ChunkDriver
from bizevents.capture.core.offsets import Tx
from bizevents.capture.core.reader import StreamHost, StreamReader
from bizevents.capture.core.signals import read_signal, row_key
from bizevents.capture.core.transactions import NoBlocks
from bizevents.capture.exceptions import CaptureError
from bizevents.capture.postgres import queries as pg
from bizevents.capture.postgres.chunks import SlotChunks
from bizevents.capture.postgres.codec import TableCodec
from bizevents.capture.postgres.messages import (
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Relation,
    Truncate,
    Update,
    format_lsn,
)
from bizevents.capture.postgres.pgoutput import PgOutputDecoder
from bizevents.capture.postgres.quarantine import ParkedBehind, RowChange, TxInfo
from bizevents.contracts.technical.source import EncodedSource
from bizevents.contracts.technical.transaction import transaction_topic
from bizevents.plumbing.kafka import produce

__all__ = ["SlotHost", "SlotReader", "read_slot"]


_POLL_EVERY = 512  # messages between producer polls on a busy stream


#: ``PostgresCapture.unconvertible``: a change that did not convert, handled; its records.
Unconvertible = Callable[
    [
        Insert | Update | Delete,
        bytes,
        int,
        CaptureError,
        pg.Connection,
        bytes,
        NoBlocks,
        Callable[..., None],
        TxInfo,
    ],
    int,
]


class SlotHost(StreamHost, Protocol):
    """What the slot's reader asks of its capture
    (:class:`~bizevents.capture.postgres.runner.PostgresCapture`), beyond a reader's."""

    #: The newest position confirmed to the slot.
    last_sent_lsn: int

    def feedback(self, cursor: psycopg2.extras.ReplicationCursor, force: bool) -> None: ...

    def on_relation(self, relation: Relation, side: pg.Connection) -> None: ...

    @property
    def row_change(self) -> RowChange: ...

    @property
    def unconvertible(self) -> Unconvertible: ...

    @property
    def parked_behind(self) -> ParkedBehind: ...

    # What its chunks ask (bizevents.capture.postgres.chunks).
    def info_named(self, qualified: str) -> pg.TableInfo | None: ...

    def codec(self, relation: Relation, info: pg.TableInfo) -> TableCodec: ...


def read_slot(
    capture: SlotHost, cursor: psycopg2.extras.ReplicationCursor, side: pg.Connection
) -> None:
    """Step 3: the slot from its confirmed position on, until stopped; then every
    record acknowledged and the last position confirmed."""
    cfg = capture.config
    cursor.start_replication(
        slot_name=cfg.slot_name,
        decode=False,
        # messages: the incremental snapshots' watermarks (pg_logical_emit_message)
        options={
            "proto_version": "1",
            "publication_names": cfg.publication_name,
            "messages": "true",
        },
        status_interval=max(1.0, cfg.heartbeat_interval_s),
    )
    capture.log.info("streaming", publication=cfg.publication_name)
    reader = SlotReader(capture, cursor, side, capture.transaction_blocks())
    reader.run()
    # Stopping: everything read is acknowledged, then confirmed.
    capture.drain()
    capture.check_delivery()
    capture.feedback(cursor, force=True)
    reader.await_confirmed()


class SlotReader(StreamReader):
    """One stream's loop: each pgoutput message to its handler, the producer polled and
    the slot confirmed between them. Holds the open transaction's state."""

    def __init__(
        self,
        capture: SlotHost,
        cursor: psycopg2.extras.ReplicationCursor,
        side: pg.Connection,
        blocks: NoBlocks,
    ) -> None:
        self.blocks = blocks
        self.tx_topic = transaction_topic(capture.config.prefix)
        self.capture = capture
        self.cursor = cursor
        self.side = side
        session = capture.session
        self.producer = session.producer
        self.put = session.producer.produce
        router = capture.router
        #: Routing by business key (bizevents.capture.core.routing): ``None`` without.
        self.route = router.partition if router.routes else None
        self.table_of = router.table_of
        self.tracker = session.tracker
        self.codecs = session.codecs
        self.partitions = range(capture.config.partitions)
        self.tx: Tx | None = None
        self.ack: Callable[..., None] | None = None
        self.sources: dict[int, EncodedSource] = {}
        self.commit_ms = self.commit_us = 0
        self.xid: int | None = None
        self.handlers: dict[type, Callable[[Any, Any], None]] = {
            Insert: self.on_row,
            Update: self.on_row,
            Delete: self.on_row,
            Begin: self.on_begin,
            Commit: self.on_commit,
            Relation: self.on_relation,
            Truncate: self.on_truncate,
            LogicalMessage: self.on_message,
        }
        self.inc = capture.incremental
        self.signal_table = capture.config.signal_table
        #: The incremental snapshots' chunks, turned between transactions.
        self.snapshots: ChunkDriver | None = None
        if self.inc is not None:
            self.chunks = SlotChunks(capture, side, self.inc)
            self.snapshots = ChunkDriver(self.inc, self.chunks, capture, self.tracker)

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int = -1,
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        if self.route is not None:
            if partition < 0:
                partition = self.route(topic, key)
            table = self.table_of(topic)
            if table is not None and value is not None:  # a change event (not a tombstone)
                self.blocks.placed(table, partition)
        try:
            self.put(topic, value, key, partition=partition, headers=headers, on_delivery=self.ack)
        except BufferError:  # the queue is full: wait for room
            produce(
                self.producer,
                topic,
                value,
                key,
                partition=partition,
                headers=headers,
                on_delivery=self.ack,
            )
        inc = self.inc
        if inc is not None and (inc.window is not None or inc.draining is not None):
            inc.supersede(topic, key)

    def loop(self) -> None:
        capture = self.capture
        cfg = capture.config
        read = self.cursor.read_message
        decode = PgOutputDecoder(1).decode
        handlers = self.handlers
        since_poll = 0
        last_heartbeat = time.monotonic()
        while not capture.stopping:
            msg = read()
            if msg is None:
                self.poll()
                more = self.snapshot_step()
                now = time.monotonic()
                if now - last_heartbeat >= cfg.heartbeat_interval_s:
                    self.heartbeat()
                    last_heartbeat = now
                # Records in flight: back soon to confirm them once Kafka acknowledged.
                wait = 0 if more else (0.01 if self.tracker.in_flight else 0.2)
                with suppress(InterruptedError):
                    select.select([self.cursor], [], [], wait)
                continue
            m = decode(msg.payload)
            handler = handlers.get(m.__class__)
            if handler is not None:
                handler(m, msg)
            since_poll += 1
            if since_poll >= _POLL_EVERY:
                since_poll = 0
                self.poll()
                self.snapshot_step()  # a stream that never idles still lets it go on
                in_flight = self.tracker.in_flight
                if (in_flight >= cfg.max_in_flight and self.tx is None) or (
                    # A huge transaction: pause inside it too (its events stay unconfirmed).
                    in_flight >= cfg.max_in_flight * 2
                ):
                    capture.backpressure(self.keepalive)

    def heartbeat(self) -> None:
        """The heartbeat message (``heartbeat_emit``), and the slot's lag."""
        capture = self.capture
        cfg = capture.config
        with self.side.cursor() as cur:
            if cfg.heartbeat_emit:
                cur.execute("SELECT pg_logical_emit_message(false, 'bizevents-heartbeat', '')")
            cur.execute(
                "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint "
                "FROM pg_replication_slots WHERE slot_name = %s",
                (cfg.slot_name,),
            )
            row = cur.fetchone()
        capture.stats.lag_bytes = int(row[0]) if row and row[0] is not None else None
        for codec in self.codecs.values():
            capture.stats.events[codec.relation.qualified_name] = codec.events

    def await_confirmed(self) -> None:
        """Wait (briefly) until the server shows the slot confirmed where we said."""
        want = self.capture.last_sent_lsn
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            slot = pg.slot_info(self.side, self.capture.config.slot_name)
            if slot is None or (slot.confirmed_flush_lsn or 0) >= want:
                self.capture.log.info("stopped; slot confirmed", lsn=format_lsn(want))
                return
            time.sleep(0.1)
        self.capture.log.warning(
            "the server did not show the confirmed position in time", lsn=format_lsn(want)
        )

    def keepalive(self) -> None:
        """While paused for Kafka: feedback keeps the replication connection alive."""
        self.capture.feedback(self.cursor, force=False)

    def poll(self) -> None:
        self.producer.poll(0)
        self.capture.check_delivery()
        self.capture.feedback(self.cursor, force=False)
        if self.tx is None:
            self.capture.quarantine.carry_out_requests()  # between transactions: nothing overtakes
        if self.inc is not None:
            self.inc.store_acknowledged(self.producer)
            self.capture.poll_signals()

    def source(self, oid: int, codec: TableCodec) -> EncodedSource:
        """The open transaction's source bytes for one table (made at its first change)."""
        src = self.sources.get(oid)
        if src is None:
            src = self.sources[oid] = codec.source(
                self.commit_ms, self.commit_us, "false", self.xid
            )
        return src

    def sent(self, codec: TableCodec, n: int) -> None:
        assert self.tx is not None
        self.tx.pending += n
        self.tracker.in_flight += n
        codec.events += n

    def on_row(self, m: Insert | Update | Delete, msg: Any) -> None:
        oid = m.relation.oid
        if oid not in self.codecs and m.relation.qualified_name == self.signal_table:
            if isinstance(m, Insert):
                self.on_signal_row(m)
            return
        codec = self.codecs[oid]
        src = self.source(oid, codec).with_long(msg.data_start)
        blocks = self.blocks
        begin = blocks.begin_record()
        if begin is not None:
            self.send(self.tx_topic, begin[0], begin[1], 0)
            self.sent_metadata()
        capture = self.capture
        if capture.parking is not None and codec.topic in capture.parking.watched:
            parked = capture.parked_behind(
                m, codec, msg.payload, msg.data_start, self.tx_info(), self.send
            )
            if parked is not None:
                self.sent(codec, parked)
                return
        mark = blocks.mark(codec.table)
        try:
            n = capture.row_change(m, codec, src, blocks.stamp, self.send)
        except CaptureError as exc:
            blocks.rollback(codec.table, mark)
            n = capture.unconvertible(
                m,
                msg.payload,
                msg.data_start,
                exc,
                self.side,
                src,
                blocks,
                self.send,
                self.tx_info(),
            )
        self.sent(codec, n)

    def tx_info(self) -> TxInfo:
        return TxInfo(self.xid, self.commit_ms, self.commit_us)

    def sent_metadata(self) -> None:
        assert self.tx is not None
        self.tx.pending += 1
        self.tracker.in_flight += 1

    def on_begin(self, m: Begin, _msg: Any) -> None:
        self.tx = self.tracker.begin(m.xid)
        self.ack = self.tx.ack
        self.sources = {}
        self.xid = m.xid
        self.commit_us = m.commit_ts
        self.commit_ms = m.commit_ts // 1000
        self.blocks.start(m.xid, m.final_lsn, self.commit_ms, int(time.time() * 1000))

    def on_commit(self, m: Commit, _msg: Any) -> None:
        assert self.tx is not None
        end = self.blocks.end_record()
        if end is not None:
            self.send(self.tx_topic, end[0], end[1], 0)
            self.sent_metadata()
        self.tracker.commit(self.tx, m.end_lsn)
        self.capture.stats.received_lsn = m.end_lsn
        self.tx = None
        chunks = self.chunks
        if chunks is not None:
            if self.xid is not None:
                chunks.recent.append(self.xid)
            if chunks.watermark is not None:
                self.snapshots.close_passed()  # type: ignore[union-attr]
        if self.capture.parking is not None:
            self.capture.quarantine.carry_out_requests()  # between transactions: nothing overtakes
        if self.tracker.in_flight >= self.capture.config.max_in_flight:
            self.capture.backpressure(self.keepalive)

    # -- incremental snapshots (bizevents.capture.core.chunks) -----------------------------------

    def snapshot_step(self) -> bool:
        """A slice of the incremental snapshot's work, between transactions (called when
        the slot has nothing to read, and now and then on a busy stream): the stream's
        changes go first, a chunk fills the gaps. Whether more work is ready (the loop
        then does not wait for the slot)."""
        snapshots = self.snapshots
        if snapshots is None or self.tx is not None or self.capture.stopping:
            return False
        draining = snapshots.drain is not None
        # A chunk just written: the next one's query at once, not after the slot's wait.
        return snapshots.run() or (draining and snapshots.drain is None)

    def on_signal_row(self, m: Insert) -> None:
        """A row inserted into the signal table: a signal, in its place in the stream."""
        names = [c.name for c in m.relation.columns]
        row = dict(zip(names, m.new, strict=False))
        sig = read_signal(row.get("id"), row.get("type"), row.get("data"))
        # A snapshot it asks for starts once the stream is idle.
        self.capture.on_signal(sig, row=row_key(row.get("id")))

    def on_message(self, m: LogicalMessage, _msg: Any) -> None:
        chunks = self.chunks
        if chunks is None or m.prefix != pg.WATERMARK_PREFIX:
            return
        chunks.watermark = (m.content.decode(errors="replace"), m.lsn)
        if self.tx is None:
            self.snapshots.close_passed()  # type: ignore[union-attr]
        # else: at its transaction's commit

    def on_relation(self, m: Relation, _msg: Any) -> None:
        before = self.codecs.get(m.oid)
        self.capture.on_relation(m, self.side)
        self.sources.pop(m.oid, None)
        if before is not None and self.codecs.get(m.oid) is not before:
            self.drop_window(m.oid)

    def drop_window(self, oid: int) -> None:
        """A truncate or a new shape of the open window's table: its rows may be of the
        old table, or keyed by the old schema; the chunk is read again."""
        inc = self.inc
        codec = self.codecs.get(oid)
        window = inc.window if inc is not None else None
        if (
            inc is not None
            and window is not None
            and codec is not None
            and window.topic == codec.topic
        ):
            inc.retry_later()

    def on_truncate(self, m: Truncate, msg: Any) -> None:
        for relation in m.relations:
            codec = self.codecs.get(relation.oid)
            if self.snapshots is not None and codec is not None:
                self.snapshots.truncated(codec.topic)
        for relation in m.relations:
            codec = self.codecs[relation.oid]
            if not self.capture.config.truncate_events:
                self.capture.log.warning(
                    "TRUNCATE not written (truncate_events = false)",
                    table=relation.qualified_name,
                    lsn=format_lsn(msg.data_start),
                )
                continue
            begin = self.blocks.begin_record()
            if begin is not None:
                self.send(self.tx_topic, begin[0], begin[1], 0)
                self.sent_metadata()
            src = codec.source(self.commit_ms, self.commit_us, "false", self.xid)
            at = src.with_long(msg.data_start)
            for p in self.partitions:
                # one event per partition, each with its own place in the transaction
                value = codec.envelope("t", None, None, at, self.blocks.stamp(codec.table))
                self.send(codec.topic, None, value, p)
            assert self.tx is not None
            self.tx.pending += len(self.partitions)
            self.tracker.in_flight += len(self.partitions)
            codec.events += 1
            # Nothing after them until they are answered: one the broker refuses (a
            # compacted topic takes no keyless record) is dead-lettered in its place.
            self.capture.wait_acknowledged()
