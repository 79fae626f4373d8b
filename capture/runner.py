"""One PostgreSQL capture run: snapshot, stream, acknowledge, until stopped.

The order of things, and why:

1. The publication and the tables are checked (a table whose deletes cannot be keyed
   is refused with the ``ALTER TABLE`` that fixes it), topics are created.
2. A new slot is created on the replication connection with ``EXPORT_SNAPSHOT``. A
   second connection imports that snapshot (``SET TRANSACTION SNAPSHOT``) and reads
   every table in it; the rows go to Kafka as op ``r``. Only when Kafka acknowledged
   every one of them is the snapshot recorded as done (:class:`SnapshotState`).
   Streaming then starts at the slot's consistent point: changes committed after the
   snapshot arrive from the slot, those before it are in the snapshot, none in both
   or neither. Because streaming starts only after the snapshot is in Kafka, a row's
   snapshot event precedes its first streamed change in its partition.
3. Streaming: each pgoutput change becomes a Debezium envelope produced to its
   table's topic. The slot's flush position advances only to the end of a
   transaction all of whose events (and all earlier ones) Kafka acknowledged
   (:class:`AckTracker`). A restart resumes from there: duplicates, never loss.
4. Kafka slow or away: when ``max_in_flight`` events wait for acknowledgement the
   slot is not read (the walsender blocks on its socket) until they drain.
   The database away: reconnect with exponential backoff, resume from the slot.
5. SIGTERM/SIGINT: stop reading, wait for every acknowledgement, confirm, exit 0.
   A second signal gives up waiting.
"""

from __future__ import annotations

import json
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Final

import psycopg2
import psycopg2.extras
import structlog
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from base.errors import TransientError
from base.kafka import produce
from base.registry import registry_client
from capture import postgres as pg
from capture.config import CaptureConfig
from capture.encoding import TableCodec, encoded_ts
from capture.exceptions import CaptureError, KafkaDeliveryError
from capture.metrics import CaptureStats
from capture.offsets import AckTracker, SnapshotState, Tx
from capture.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    Commit,
    Delete,
    Insert,
    PgOutputDecoder,
    Relation,
    Truncate,
    Update,
    format_lsn,
)
from capture.pgtypes import PgTypeMapper, enum_types_from_rows
from capture.sink import SchemaRegistrar, create_topics, producer_config
from contracts.business import (
    HEADER_DLQ_ERROR,
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    HEADER_SOURCE_POSITION,
    HEADER_SOURCE_TOPIC,
)
from contracts.technical.source import EncodedSource

__all__ = ["HEADER_CAPTURE_FORMAT", "HEADER_CAPTURE_TABLE", "CaptureEndpoints", "PostgresCapture"]

#: Dead-letter headers of capture's own (the stage, reason, error and source ones are
#: the translators' names).
HEADER_CAPTURE_TABLE: Final = "bizevents.capture.table"
#: ``pgoutput``: the value is the change's raw pgoutput message; ``snapshot-text-json``:
#: a JSON array of the snapshot row's column texts (``null`` for NULL).
HEADER_CAPTURE_FORMAT: Final = "bizevents.capture.format"

_MAX_BACKOFF_S = 30.0
_POLL_EVERY = 512  # messages between producer polls on a busy stream
_FEEDBACK_EVERY_S = 0.5


@dataclass(frozen=True, slots=True)
class CaptureEndpoints:
    """Where capture connects: the database, Kafka (librdkafka config), the registry."""

    dsn: str
    kafka: dict[str, Any]
    registry: dict[str, Any]
    state_dir: Path


def _connection_lost(exc: psycopg2.DatabaseError) -> bool:
    """Whether a psycopg2 error is the database going away rather than a bad statement.

    A fast shutdown or restart ends the replication stream with the bare
    ``DatabaseError`` libpq-level failures take ("no COPY in progress", "server closed
    the connection"); its subclasses other than ``OperationalError`` (a terminated
    session, a refused connection) are errors of a statement, which a retry repeats.
    """
    return type(exc) is psycopg2.DatabaseError or isinstance(exc, psycopg2.OperationalError)


class _Stop(Exception):
    """Raised inside the run when a stop was asked for at a point that must unwind."""


class PostgresCapture:
    """Captures the configured tables of one database into technical topics."""

    def __init__(
        self,
        config: CaptureConfig,
        endpoints: CaptureEndpoints,
        *,
        stats: CaptureStats | None = None,
        progress: Callable[[str, int, int], None] | None = None,
        snapshot_finished: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.endpoints = endpoints
        self.stats = stats or CaptureStats(config.server, config.slot_name)
        self._progress = progress
        self._snapshot_finished = snapshot_finished
        self.log = structlog.get_logger("capture.postgres").bind(
            server=config.server, slot=config.slot_name
        )
        self.stopping = False
        self.aborting = False
        self._producer: Producer | None = None
        self._registrar: SchemaRegistrar | None = None
        self._admin: AdminClient | None = None
        self._infos: dict[int, pg.TableInfo] = {}
        self._codecs: dict[int, TableCodec] = {}
        self._types = PgTypeMapper(unknown_as_text=config.unknown_as_text)
        self._tracker = AckTracker()
        self._database = ""
        self._last_feedback = 0.0
        self._last_sent_lsn = 0
        self.state: SnapshotState | None = None

    # -- control --------------------------------------------------------------------

    def request_stop(self, *_args: Any) -> None:
        """Stop after acknowledgement (a second call stops waiting for it)."""
        if self.stopping:
            self.aborting = True
        self.stopping = True

    @contextmanager
    def signals(self) -> Iterator[None]:
        """SIGTERM and SIGINT ask for a clean stop while inside this block."""

        def handler(_signum: int, _frame: FrameType | None) -> None:
            self.request_stop()

        old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    # -- the run ----------------------------------------------------------------------

    def run(self) -> None:
        """Capture until stopped; transient failures are retried with backoff."""
        backoff = 0.5
        self._producer = Producer(producer_config(self.endpoints.kafka, self.config))
        self._admin = AdminClient(self.endpoints.kafka)
        self._registrar = SchemaRegistrar(registry_client(self.endpoints.registry))
        try:
            while not self.stopping:
                try:
                    self._session()
                    backoff = 0.5
                except (psycopg2.DatabaseError, psycopg2.InterfaceError, TransientError) as exc:
                    if isinstance(exc, psycopg2.DatabaseError) and not _connection_lost(exc):
                        raise
                    if self.stopping:
                        break
                    self.stats.reconnects += 1
                    self.log.warning(
                        "capture interrupted, retrying", error=str(exc).strip(), retry_in_s=backoff
                    )
                    self._sleep(backoff)
                    backoff = min(backoff * 2, _MAX_BACKOFF_S)
                except _Stop:
                    break
        finally:
            self._drain()
            if self._producer is not None:
                self._producer.flush(0)
            # librdkafka's clients close when the last reference goes.
            self._producer = None
            self._admin = None

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            if self._producer is not None:
                self._producer.poll(0.1)
            else:
                time.sleep(0.1)

    def _drain(self) -> None:
        """Wait until Kafka acknowledged everything produced (or the wait is given up)."""
        producer = self._producer
        if producer is None:
            return
        logged = False
        while len(producer) > 0 and not self.aborting:
            producer.poll(0.2)
            if not logged and len(producer) > 0:
                self.log.info("waiting for Kafka to acknowledge", in_flight=len(producer))
                logged = True

    def _check_delivery(self) -> None:
        failure = self._tracker.failure
        if failure is not None:
            raise KafkaDeliveryError(f"Kafka did not take an event: {failure}")

    # -- one connection's worth ------------------------------------------------------------

    def _session(self) -> None:
        cfg = self.config
        side = pg.connect(self.endpoints.dsn)
        repl = None
        try:
            with side.cursor() as cur:
                cur.execute("SELECT current_database()")
                row = cur.fetchone()
                self._database = str(row[0]) if row else ""
            self.state = SnapshotState.for_slot(
                self.endpoints.state_dir, self._database, cfg.slot_name
            )
            self._prepare(side)
            repl = pg.replication_connect(self.endpoints.dsn)
            cur = repl.cursor()
            slot = pg.slot_info(side, cfg.slot_name)
            if slot is not None and slot.active_pid is not None:
                raise TransientError(
                    f"slot {cfg.slot_name} is in use by backend pid {slot.active_pid}"
                )
            if slot is not None and slot.plugin != "pgoutput":
                raise CaptureError(
                    f"slot {cfg.slot_name} uses plugin {slot.plugin}, not pgoutput; drop it or "
                    "configure another slot name"
                )
            if slot is not None and not self.state.done():
                if cfg.snapshot == "initial":
                    self.log.warning("slot exists but its snapshot never finished: redoing it")
                    pg.drop_slot(side, cfg.slot_name)
                    slot = None
                else:
                    self.state.write(snapshot_done=True, snapshot="never", slot=cfg.slot_name)
            if slot is None:
                self.state.clear()
                if cfg.snapshot == "initial":
                    point, name = pg.create_slot_exporting(cur, cfg.slot_name)
                    self.log.info("slot created", consistent_point=format_lsn(point))
                    self._snapshot(name, point)
                    self.state.write(
                        snapshot_done=True, slot=cfg.slot_name, consistent_point=format_lsn(point)
                    )
                else:
                    cur.create_replication_slot(cfg.slot_name, output_plugin="pgoutput")
                    self.state.write(snapshot_done=True, snapshot="never", slot=cfg.slot_name)
            self.stats.snapshot_done = True
            self._stream(cur, side)
        finally:
            self._tracker.abandon_open()
            if repl is not None:
                with suppress(Exception):
                    repl.close()
            with suppress(Exception):
                side.close()
            self._drain()
            self._tracker = AckTracker()

    def _prepare(self, side: pg.Connection) -> None:
        cfg = self.config
        labels, arrays = enum_types_from_rows(pg.load_enum_rows(side))
        self._types = PgTypeMapper(
            enum_labels=labels, array_elements=arrays, unknown_as_text=cfg.unknown_as_text
        )
        if cfg.tables:
            names: Sequence[str] = cfg.tables
        else:
            found = pg.publication_tables(side, cfg.publication_name)
            if found is None:
                raise CaptureError(
                    f"publication {cfg.publication_name} does not exist; create it or list "
                    "the tables to capture (tables = [...])"
                )
            names = found
        # Checked before publishing: a published table without a replica identity
        # would make the application's own UPDATEs and DELETEs fail.
        infos = pg.describe_tables(side, names)
        if cfg.tables:
            pg.ensure_publication(side, cfg.publication_name, cfg.tables)
        self._infos = {i.oid: i for i in infos}
        for info in infos:
            # Fails now, naming table and column, when a type has no mapping.
            self._types.fields(info.relation)
        assert self._admin is not None
        topics = [self._topic(i.relation) for i in infos]
        if cfg.on_conversion_error == "dead-letter":
            topics.append(cfg.dlq_topic)
        create_topics(self._admin, topics, cfg)

    def _topic(self, relation: Relation) -> str:
        return f"{self.config.prefix}.{relation.namespace}.{relation.name}"

    def _codec(self, relation: Relation, info: pg.TableInfo) -> TableCodec:
        cfg = self.config
        if relation.replica_identity in ("d", "i"):
            keys, nullable = pg.key_columns(
                relation.qualified_name,
                relation.replica_identity,
                [c.name for c in relation.key_columns],
                info.primary_key,
                [c.name for c in relation.columns],
            )
        else:
            keys, nullable = pg.key_columns(
                relation.qualified_name,
                relation.replica_identity,
                [c.name for c in relation.columns],
                info.primary_key,
                [c.name for c in relation.columns],
            )
        codec = TableCodec(
            server=cfg.server,
            database=self._database,
            topic=self._topic(relation),
            relation=relation,
            key_names=keys,
            types=self._types,
            keep=cfg.column_filter(relation.qualified_name).keeps,
            key_nullable=nullable,
        )
        assert self._registrar is not None
        self._registrar.register(codec)
        self.log.info(
            "table schema registered",
            table=relation.qualified_name,
            topic=codec.topic,
            key_schema_id=codec.key_schema_id,
            value_schema_id=codec.value_schema_id,
        )
        return codec

    # -- snapshot -------------------------------------------------------------------------

    def _snapshot(self, snapshot_name: str, point: int) -> None:
        cfg = self.config
        producer = self._producer
        assert producer is not None
        conn = pg.connect(self.endpoints.dsn, autocommit=False, application="bizevents-snapshot")
        try:
            pg.begin_snapshot(conn, snapshot_name)
            infos = list(self._infos.values())
            counts = {i.oid: pg.count_rows(conn, i.relation) for i in infos}
            for info in infos:
                self.stats.snapshot_expected[info.qualified] = counts[info.oid]
                self.stats.snapshot_rows[info.qualified] = 0
            last_oid = next((i.oid for i in reversed(infos) if counts[i.oid]), None)
            tracker = self._tracker
            tx = tracker.begin(None)
            ack = tx.ack

            def dead_letter(
                topic: str,
                key: bytes | None,
                value: bytes,
                headers: list[tuple[str, str | bytes | None]],
            ) -> None:
                produce(producer, topic, value, key, headers=headers, on_delivery=ack)

            started_ms = int(time.time() * 1000)
            self.log.info("snapshot started", tables=len(infos), rows=sum(counts.values()))
            for info in infos:
                codec = self._codec(info.relation, info)
                self._codecs[info.oid] = codec
                table = info.qualified
                log = self.log.bind(table=table)
                src = codec.source(started_ms, started_ms * 1000, "true", None).with_long(point)
                last_src = codec.source(started_ms, started_ms * 1000, "last", None).with_long(
                    point
                )
                total = counts[info.oid]
                done = 0
                topic = codec.topic
                row_of, key_of, envelope = codec.row, codec.key, codec.envelope
                for rows in pg.read_snapshot_rows(conn, info.relation, cfg.snapshot_fetch_rows):
                    now_ms = encoded_ts(int(time.time() * 1000))
                    for values in rows:
                        done += 1
                        s = last_src if (done == total and info.oid == last_oid) else src
                        try:
                            value = envelope("r", None, row_of(values), s, now_ms)
                            key = key_of(values)
                        except CaptureError as exc:
                            raw = json.dumps(list(values)).encode()
                            n = self._conversion_failed(table, raw, None, exc, dead_letter)
                            tx.pending += n
                            tracker.in_flight += n
                            continue
                        produce(producer, topic, value, key, on_delivery=ack)
                        tx.pending += 1
                        tracker.in_flight += 1
                    codec.events += len(rows)
                    self.stats.snapshot_rows[table] = done
                    self.stats.events[table] = codec.events
                    if self._progress is not None:
                        self._progress(table, done, max(total, done))
                    producer.poll(0)
                    self._check_delivery()
                    self._backpressure(None)
                    if self.stopping:
                        raise _Stop
                log.info("table snapshot read", rows=done)
            conn.commit()
            tracker.commit(tx, point)
        finally:
            conn.close()
        # Done only once every snapshot event is acknowledged.
        while self._tracker.in_flight > 0:
            producer.poll(0.2)
            self._check_delivery()
            if self.aborting:
                raise _Stop
        self._tracker.confirmable()
        if self._snapshot_finished is not None:
            self._snapshot_finished()
        self.log.info("snapshot in Kafka", consistent_point=format_lsn(point))

    def _backpressure(self, cursor: psycopg2.extras.ReplicationCursor | None) -> None:
        tracker = self._tracker
        if tracker.in_flight < self.config.max_in_flight:
            return
        producer = self._producer
        assert producer is not None
        self.stats.backpressure_pauses += 1
        low = self.config.max_in_flight * 3 // 4
        logged_at = time.monotonic()
        while tracker.in_flight > low and not self.aborting:
            producer.poll(0.1)
            self._check_delivery()
            if cursor is not None:
                self._feedback(cursor, force=False)
            if time.monotonic() - logged_at > 10:
                self.log.warning(
                    "Kafka is not acknowledging; slot reading paused", in_flight=tracker.in_flight
                )
                logged_at = time.monotonic()
            if self.stopping and not self.aborting and tracker.in_flight <= low:
                break

    # -- streaming ------------------------------------------------------------------------

    def _feedback(self, cursor: psycopg2.extras.ReplicationCursor, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last_feedback < _FEEDBACK_EVERY_S:
            return
        tracker = self._tracker
        lsn = tracker.confirmable()
        if tracker.idle:
            lsn = tracker.advance_idle(cursor.wal_end)
        keepalive = now - self._last_feedback > self.config.heartbeat_interval_s
        if lsn > self._last_sent_lsn or force or keepalive:
            cursor.send_feedback(write_lsn=lsn, flush_lsn=lsn, force=True)
            self._last_sent_lsn = max(lsn, self._last_sent_lsn)
            self.stats.acknowledged_lsn = self._last_sent_lsn
        self._last_feedback = now
        self.stats.in_flight = tracker.in_flight

    def _heartbeat(self, side: pg.Connection) -> None:
        cfg = self.config
        with side.cursor() as cur:
            if cfg.heartbeat_emit:
                cur.execute("SELECT pg_logical_emit_message(false, 'bizevents-heartbeat', '')")
            cur.execute(
                "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint "
                "FROM pg_replication_slots WHERE slot_name = %s",
                (cfg.slot_name,),
            )
            row = cur.fetchone()
        self.stats.lag_bytes = int(row[0]) if row and row[0] is not None else None
        for codec in self._codecs.values():
            self.stats.events[codec.relation.qualified_name] = codec.events

    def _on_relation(self, relation: Relation, side: pg.Connection) -> None:
        current = self._codecs.get(relation.oid)
        shape = [(c.name, c.type_oid, c.type_modifier) for c in relation.columns]
        if current is not None:
            old = current.relation
            same = [(c.name, c.type_oid, c.type_modifier) for c in old.columns] == shape
            if same and old.replica_identity == relation.replica_identity:
                return
        info = self._infos.get(relation.oid)
        if info is None or current is not None:
            # A new table of the publication, or a changed one: read the catalog again.
            (info,) = pg.describe_tables(side, [relation.qualified_name])
            self._infos[relation.oid] = info
            assert self._admin is not None
            create_topics(self._admin, [self._topic(relation)], self.config)
        known = {c.type_oid for c in relation.columns}
        if any(self._types.type_name(o).startswith("oid ") for o in known):
            labels, arrays = enum_types_from_rows(pg.load_enum_rows(side))
            self._types = PgTypeMapper(
                enum_labels=labels,
                array_elements=arrays,
                unknown_as_text=self.config.unknown_as_text,
            )
        self._codecs[relation.oid] = self._codec(relation, info)

    def _stream(self, cursor: psycopg2.extras.ReplicationCursor, side: pg.Connection) -> None:
        cfg = self.config
        producer = self._producer
        assert producer is not None
        cursor.start_replication(
            slot_name=cfg.slot_name,
            decode=False,
            options={"proto_version": "1", "publication_names": cfg.publication_name},
            status_interval=max(1.0, cfg.heartbeat_interval_s),
        )
        self.log.info("streaming", publication=cfg.publication_name)
        decoder = PgOutputDecoder(1)
        decode = decoder.decode
        codecs = self._codecs
        tracker = self._tracker
        read = cursor.read_message
        poll = producer.poll
        tx: Tx | None = None
        ack: Callable[..., None] | None = None
        sources: dict[int, EncodedSource] = {}
        commit_ms = commit_us = 0
        now_ms = b""
        xid: int | None = None
        partitions = range(cfg.partitions)
        since_poll = 0
        last_heartbeat = time.monotonic()

        def send(
            topic: str,
            key: bytes | None,
            value: bytes | None,
            partition: int = -1,
            headers: list[tuple[str, str | bytes | None]] | None = None,
        ) -> None:
            produce(
                producer, topic, value, key, partition=partition, headers=headers, on_delivery=ack
            )

        while not self.stopping:
            msg = read()
            if msg is None:
                poll(0)
                self._check_delivery()
                self._feedback(cursor, force=False)
                now = time.monotonic()
                if now - last_heartbeat >= cfg.heartbeat_interval_s:
                    self._heartbeat(side)
                    last_heartbeat = now
                with suppress(InterruptedError):
                    select.select([cursor], [], [], 0.2)
                continue
            m = decode(msg.payload)
            cls = m.__class__
            if cls is Insert:
                assert isinstance(m, Insert) and tx is not None
                codec = codecs[m.relation.oid]
                src = sources.get(m.relation.oid)
                if src is None:
                    src = sources[m.relation.oid] = codec.source(commit_ms, commit_us, "false", xid)
                new = m.new
                s = src.with_long(msg.data_start)
                try:
                    key = codec.key(new)
                    value = codec.envelope("c", None, codec.row(new), s, now_ms)
                except CaptureError as exc:
                    n = self._unconvertible(
                        m, msg.payload, msg.data_start, exc, side, s, now_ms, send
                    )
                else:
                    send(codec.topic, key, value)
                    n = 1
                tx.pending += n
                tracker.in_flight += n
                codec.events += n
            elif cls is Update or cls is Delete:
                assert isinstance(m, Update | Delete) and tx is not None
                codec = codecs[m.relation.oid]
                src = sources.get(m.relation.oid)
                if src is None:
                    src = sources[m.relation.oid] = codec.source(commit_ms, commit_us, "false", xid)
                s = src.with_long(msg.data_start)
                try:
                    n = self._row_change(m, codec, s, now_ms, send)
                except CaptureError as exc:
                    n = self._unconvertible(
                        m, msg.payload, msg.data_start, exc, side, s, now_ms, send
                    )
                tx.pending += n
                tracker.in_flight += n
                codec.events += n
            elif cls is Begin:
                assert isinstance(m, Begin)
                tx = tracker.begin(m.xid)
                ack = tx.ack
                sources = {}
                xid = m.xid
                commit_us = m.commit_ts
                commit_ms = commit_us // 1000
                now_ms = encoded_ts(int(time.time() * 1000))
            elif cls is Commit:
                assert isinstance(m, Commit) and tx is not None
                tracker.commit(tx, m.end_lsn)
                self.stats.received_lsn = m.end_lsn
                tx = None
                if tracker.in_flight >= cfg.max_in_flight:
                    self._backpressure(cursor)
            elif cls is Relation:
                assert isinstance(m, Relation)
                self._on_relation(m, side)
                sources.pop(m.oid, None)
            elif cls is Truncate:
                assert isinstance(m, Truncate) and tx is not None
                for relation in m.relations:
                    codec = codecs[relation.oid]
                    if not cfg.truncate_events:
                        self.log.warning(
                            "TRUNCATE not written (truncate_events = false)",
                            table=relation.qualified_name,
                            lsn=format_lsn(msg.data_start),
                        )
                        continue
                    src = codec.source(commit_ms, commit_us, "false", xid)
                    value = codec.envelope("t", None, None, src.with_long(msg.data_start), now_ms)
                    for p in partitions:
                        send(codec.topic, None, value, p)
                    tx.pending += len(partitions)
                    tracker.in_flight += len(partitions)
                    codec.events += 1
            since_poll += 1
            if since_poll >= _POLL_EVERY:
                since_poll = 0
                poll(0)
                self._check_delivery()
                self._feedback(cursor, force=False)
                if tracker.in_flight >= cfg.max_in_flight and tx is None:
                    self._backpressure(cursor)
                elif tracker.in_flight >= cfg.max_in_flight * 2:
                    # A huge transaction: pause inside it too (its events stay unconfirmed).
                    self._backpressure(cursor)
        # Stopping: everything read is acknowledged, then confirmed.
        self._drain()
        self._check_delivery()
        self._feedback(cursor, force=True)
        self._await_confirmed(side)

    def _row_change(
        self,
        m: Insert | Update | Delete,
        codec: TableCodec,
        src: bytes,
        now_ms: bytes,
        send: Callable[..., None],
    ) -> int:
        # Every record is made before any is sent: a value that does not convert leaves
        # nothing half-written.
        if isinstance(m, Insert):
            key = codec.key(m.new)
            send(codec.topic, key, codec.envelope("c", None, codec.row(m.new), src, now_ms))
            return 1
        if isinstance(m, Delete):
            key = codec.key(m.old)
            value = codec.envelope("d", codec.row(m.old), None, src, now_ms)
            send(codec.topic, key, value)
            send(codec.topic, key, None)
            return 2
        new = m.new
        old = m.old
        if m.old_kind == "O" and old is not None:
            # REPLICA IDENTITY FULL: the old row has the values an unchanged TOAST hides.
            new = tuple(o if v is UNCHANGED_TOAST else v for v, o in zip(new, old, strict=True))
        new_key = codec.key(new)
        if old is not None:
            old_key = codec.key(old)
            if old_key != new_key:
                # The key changed: a delete (and tombstone) of the old key, a create of the new.
                deleted = codec.envelope("d", codec.row(old), None, src, now_ms)
                created = codec.envelope("c", None, codec.row(new), src, now_ms)
                send(codec.topic, old_key, deleted)
                send(codec.topic, old_key, None)
                send(codec.topic, new_key, created)
                return 3
        before = codec.row(old) if (old is not None and m.old_kind == "O") else None
        send(codec.topic, new_key, codec.envelope("u", before, codec.row(new), src, now_ms))
        return 1

    def _unconvertible(
        self,
        m: Insert | Update | Delete,
        raw: bytes,
        lsn: int,
        exc: CaptureError,
        side: pg.Connection,
        src: bytes,
        now_ms: bytes,
        send: Callable[..., None],
    ) -> int:
        """A change that did not convert: with fresh types if they changed, else handled
        as ``on_conversion_error`` says. Returns the records sent (all acknowledged
        before the slot passes the change)."""
        relation = m.relation
        if self._refresh_types(relation.oid, side):
            try:
                return self._row_change(m, self._codecs[relation.oid], src, now_ms, send)
            except CaptureError as again:
                exc = again
        return self._conversion_failed(relation.qualified_name, raw, lsn, exc, send)

    def _refresh_types(self, oid: int, side: pg.Connection) -> bool:
        """Reload the enum labels; when they changed, a new codec (and value schema) for
        the table. pgoutput sends no Relation message for ``ALTER TYPE ... ADD VALUE``."""
        labels, arrays = enum_types_from_rows(pg.load_enum_rows(side))
        if labels == self._types._enums:
            return False
        self._types = PgTypeMapper(
            enum_labels=labels, array_elements=arrays, unknown_as_text=self.config.unknown_as_text
        )
        old = self._codecs[oid]
        self._codecs[oid] = self._codec(old.relation, self._infos[oid])
        self._codecs[oid].events = old.events
        self.stats.schema_refreshes += 1
        self.log.info(
            "enum labels changed: value schema registered again",
            table=old.relation.qualified_name,
            value_schema_id=self._codecs[oid].value_schema_id,
        )
        return True

    def _conversion_failed(
        self, table: str, raw: bytes, lsn: int | None, exc: CaptureError, send: Callable[..., None]
    ) -> int:
        cfg = self.config
        mode = cfg.on_conversion_error
        where = format_lsn(lsn) if lsn is not None else "snapshot"
        column = getattr(exc, "column", None)
        if mode == "fail":
            raise exc
        counted = (table, mode)
        self.stats.conversion_errors[counted] = self.stats.conversion_errors.get(counted, 0) + 1
        self.log.warning(
            "change not converted: "
            + ("written to the dead-letter topic" if mode == "dead-letter" else "skipped"),
            table=table,
            column=column,
            lsn=where,
            reason=str(exc),
            topic=cfg.dlq_topic if mode == "dead-letter" else None,
        )
        if mode == "skip":
            return 0
        headers: list[tuple[str, str | bytes | None]] = [
            (HEADER_DLQ_STAGE, b"capture"),
            (HEADER_DLQ_REASON, str(exc).encode()),
            (HEADER_DLQ_ERROR, type(exc).__name__.encode()),
            (HEADER_SOURCE_TOPIC, f"{cfg.prefix}.{table}".encode()),
            (HEADER_SOURCE_POSITION, where.encode()),
            (HEADER_CAPTURE_TABLE, table.encode()),
            (HEADER_CAPTURE_FORMAT, b"pgoutput" if lsn is not None else b"snapshot-text-json"),
        ]
        send(cfg.dlq_topic, None, raw, headers=headers)
        return 1

    def _await_confirmed(self, side: pg.Connection) -> None:
        """Wait (briefly) until the server shows the slot confirmed where we said."""
        want = self._last_sent_lsn
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            slot = pg.slot_info(side, self.config.slot_name)
            if slot is None or (slot.confirmed_flush_lsn or 0) >= want:
                self.log.info("stopped; slot confirmed", lsn=format_lsn(want))
                return
            time.sleep(0.1)
        self.log.warning(
            "the server did not show the confirmed position in time", lsn=format_lsn(want)
        )


def print_progress_factory(enabled: bool) -> tuple[Callable[[str, int, int], None] | None, Any]:
    """A rich progress bar for the snapshot when on a terminal (``(callback, progress)``)."""
    if not enabled:
        return None, None
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn("[bold]snapshot[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=False,
        console=Console(stderr=True),
    )
    tasks: dict[str, Any] = {}

    def update(table: str, done: int, total: int) -> None:
        if not progress.live.is_started:
            progress.start()
        task = tasks.get(table)
        if task is None:
            task = tasks[table] = progress.add_task(table, total=total)
        progress.update(task, completed=done, total=total)

    return update, progress


def on_terminal() -> bool:
    """Whether stderr is a terminal (the progress bar's ``auto``)."""
    return sys.stderr.isatty()
