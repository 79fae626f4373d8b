"""One PostgreSQL capture run: snapshot, stream, acknowledge, until stopped.

The order of things, and why:

1. The publication and the tables are checked (a table whose deletes cannot be keyed
   is refused with the ``ALTER TABLE`` that fixes it), topics are created.
2. A new slot is created on the replication connection with ``EXPORT_SNAPSHOT``. A
   second connection imports that snapshot (``SET TRANSACTION SNAPSHOT``) and reads
   every table in it; the rows go to Kafka as op ``r``. Only when Kafka acknowledged
   every one of them is the snapshot recorded as done, in the snapshot ledger of the
   compacted state topic (:mod:`bizevents.capture.core.state`), so that a capture started
   elsewhere against the same Kafka does not snapshot again.
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

import json
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any, Final

import psycopg2
import psycopg2.extras
import structlog

from bizevents.capture.core.capture import (
    HEADER_CAPTURE_FORMAT,
    HEADER_CAPTURE_TABLE,
    CaptureCore,
    CaptureEndpoints,
)
from bizevents.capture.core.filters import FilterError, condition_text, parse_condition, resolve
from bizevents.capture.core.quarantine import Quarantine
from bizevents.capture.core.routing import check_key_columns
from bizevents.capture.core.sink import create_dead_letter_topic, create_topics
from bizevents.capture.core.state import Ledger
from bizevents.capture.core.transactions import NoBlocks
from bizevents.capture.exceptions import CaptureError
from bizevents.capture.postgres import queries as pg
from bizevents.capture.postgres.codec import TableCodec, captured_codec
from bizevents.capture.postgres.messages import (
    UNCHANGED_TOAST,
    Delete,
    Insert,
    Relation,
    Update,
    format_lsn,
)
from bizevents.capture.postgres.pgoutput import blank_values
from bizevents.capture.postgres.quarantine import PgParking, TxInfo
from bizevents.capture.postgres.snapshot import initial_snapshot
from bizevents.capture.postgres.stream import read_slot
from bizevents.capture.postgres.types import (
    PgTypeMapper,
    converters_generation,
    enum_types_from_rows,
)
from bizevents.contracts.technical.topics import table_topic
from bizevents.plumbing.errors import TransientError

__all__ = ["HEADER_CAPTURE_FORMAT", "HEADER_CAPTURE_TABLE", "CaptureEndpoints", "PostgresCapture"]


def _connection_lost(exc: psycopg2.DatabaseError) -> bool:
    """Whether a psycopg2 error is the database going away rather than a bad statement.

    A fast shutdown or restart ends the replication stream with the bare
    ``DatabaseError`` libpq-level failures take ("no COPY in progress", "server closed
    the connection"); its subclasses other than ``OperationalError`` (a terminated
    session, a refused connection) are errors of a statement, which a retry repeats.
    """
    return type(exc) is psycopg2.DatabaseError or isinstance(exc, psycopg2.OperationalError)


_FEEDBACK_EVERY_S: Final = 0.5


class PostgresCapture(CaptureCore):
    """Captures the configured tables of one database into technical topics.

    One class over the core, with its parts: :attr:`quarantine` (the core's parking,
    told PostgreSQL's side by :class:`PgParking`), the slot's reader made per connection
    (:func:`read_slot`), the incremental snapshots' chunks (``SlotChunks``, in the
    reader). It keeps the catalog's tables, their codecs and the slot's feedback."""

    LOST = (psycopg2.DatabaseError, psycopg2.InterfaceError, TransientError)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.log = structlog.get_logger("bizevents.capture.postgres").bind(
            server=cfg.server, slot=cfg.slot_name
        )
        self.infos: dict[int, pg.TableInfo] = {}
        self.types = PgTypeMapper(unknown_as_text=cfg.unknown_as_text)
        self.database = ""
        self._last_feedback = 0.0
        self.last_sent_lsn = 0
        #: Table oid -> the converters' generation its codec was last refreshed for.
        self.codecs_generation: dict[int, int] = {}
        self.parked = PgParking(self)
        self.quarantine = Quarantine(self, self.parked)
        #: The parked keys (None unless ``on_conversion_error = "park"``), read per change.
        self.parking = self.quarantine.parking
        #: What the reader's ``on_row`` asks of a change of a table with parked keys.
        self.parked_behind = self.parked.parked_behind

    def closing(self) -> None:
        self.quarantine.close_requests()
        super().closing()

    def lost(self, exc: BaseException) -> bool:
        return not isinstance(exc, psycopg2.DatabaseError) or _connection_lost(exc)

    def connected(self) -> None:
        cfg = self.config
        session = self.session
        side = pg.connect(self.endpoints.dsn)
        repl = None
        try:
            with side.cursor() as cur:
                cur.execute("SELECT current_database()")
                row = cur.fetchone()
                self.database = str(row[0]) if row else ""
            self.prepare(side)
            stored = self.read_ledger()
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
            tables = [i.qualified for i in self.infos.values()]
            done = stored is not None and stored.initial_done
            if slot is not None and not done and cfg.snapshot == "initial":
                # The exported snapshot that went with the slot is gone: start again.
                self.log.warning("slot exists but its snapshot never finished: redoing it")
                pg.drop_slot(side, cfg.slot_name)
                slot = None
            if slot is None:
                if cfg.snapshot == "initial":
                    point, name = pg.create_slot_exporting(cur, cfg.slot_name)
                    self.log.info("slot created", consistent_point=format_lsn(point))
                    initial_snapshot(self, name, point)
                    self.ledger = Ledger(True, tables, [], format_lsn(point)).signals_from(stored)
                else:
                    cur.create_replication_slot(cfg.slot_name, output_plugin="pgoutput")
                    self.ledger = Ledger(True, tables).signals_from(stored)
                self.store_ledger()
            elif stored is None or cfg.snapshot == "never":
                # Stream only: every table counts as present, none is snapshotted.
                self.ledger = Ledger(True, tables).signals_from(stored)
                self.store_ledger()
            else:
                self.ledger = stored
            self.start_incremental(tables)
            self.stats.snapshot_done = True
            read_slot(self, cur, side)
        finally:
            session.tracker.abandon_open()
            if repl is not None:
                with suppress(Exception):
                    repl.close()
            with suppress(Exception):
                side.close()
            self.drain()

    def prepare(self, side: pg.Connection) -> None:
        cfg = self.config
        labels, arrays = enum_types_from_rows(pg.load_enum_rows(side))
        self.types = PgTypeMapper(
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
        if cfg.signal_table is not None:
            # Its inserts reach capture through the slot, in their place in the stream.
            if not pg.table_exists(side, cfg.signal_table):
                raise self.missing_signal_table(cfg.signal_table, mysql=False)
            pg.ensure_publication(side, cfg.publication_name, [cfg.signal_table])
        self.infos = {i.oid: i for i in infos}
        for info in infos:
            # Fails now, naming table and column, when a type has no mapping.
            self.types.fields(info.relation)
        counts = create_topics(self.session.admin, [self.topic(i.relation) for i in infos], cfg)
        for info in infos:
            routed = cfg.routing.get(info.qualified)
            if routed is not None:
                check_key_columns(info.qualified, routed, info.key_names)
        self.start_routing(counts)
        create_dead_letter_topic(self.session.admin, cfg)  # a refused record goes there too
        if cfg.on_conversion_error == "park":
            self.quarantine.restore_parked()

    def ledger_source(self) -> str:
        return self.config.slot_name

    def snapshot_raw(self, codec: Any, row: Any) -> tuple[bytes, str]:
        # The values as PostgreSQL gave them, each type's text output; NULL in place of
        # a column not captured.
        values = [None if i in codec.dropped else v for i, v in enumerate(row)]
        return json.dumps(values).encode(), "snapshot-text-json"

    def feedback(self, cursor: psycopg2.extras.ReplicationCursor, force: bool) -> None:
        """Confirm to the slot the newest position Kafka acknowledged (at most every
        half second unless forced; a keepalive at least every heartbeat)."""
        now = time.monotonic()
        if not force and now - self._last_feedback < _FEEDBACK_EVERY_S:
            return
        tracker = self.session.tracker
        lsn = tracker.confirmable()
        if tracker.idle:
            lsn = tracker.advance_idle(cursor.wal_end)
        keepalive = now - self._last_feedback > self.config.heartbeat_interval_s
        if lsn > self.last_sent_lsn or force or keepalive:
            cursor.send_feedback(write_lsn=lsn, flush_lsn=lsn, force=True)
            self.last_sent_lsn = max(lsn, self.last_sent_lsn)
            self.stats.acknowledged_lsn = self.last_sent_lsn
        self._last_feedback = now
        self.stats.in_flight = tracker.in_flight

    def captured_tables(self) -> list[str]:
        return [i.qualified for i in self.infos.values()]

    def checked_condition(self, table: str, where: str) -> str:
        info = self.info_named(table)
        if info is None:
            raise FilterError(f"{table} is not captured")
        columns = [c.name for c in info.relation.columns]
        cond = resolve(parse_condition(where), columns, table)
        conn = pg.connect(self.endpoints.dsn, autocommit=False, application="bizevents-signal")
        try:
            reason = pg.check_condition(
                conn, info.relation, cond, self.config.snapshot_query_timeout_s
            )
        finally:
            conn.close()
        if reason is not None:
            raise FilterError(reason)
        return condition_text(cond)

    def info_named(self, qualified: str) -> pg.TableInfo | None:
        """The captured table ``schema.table``, if it is one."""
        return next((i for i in self.infos.values() if i.qualified == qualified), None)

    def topic(self, relation: Relation) -> str:
        return table_topic(self.config.prefix, relation.qualified_name)

    def codec(self, relation: Relation, info: pg.TableInfo) -> TableCodec:
        """A table's codec, its schemas registered."""
        flagged = relation.key_columns if relation.replica_identity in ("d", "i") else None
        names = [c.name for c in relation.columns]
        keys, nullable = pg.key_columns(
            relation.qualified_name,
            relation.replica_identity,
            names if flagged is None else [c.name for c in flagged],
            info.primary_key,
            names,
        )
        codec = captured_codec(self.config, self.database, relation, keys, self.types, nullable)
        self.register(codec, relation.qualified_name)
        return codec

    # -- what the slot's reader asks (bizevents.capture.postgres.stream) ------------------------

    def on_relation(self, relation: Relation, side: pg.Connection) -> None:
        if relation.qualified_name == self.config.signal_table:
            return  # read as signals, never written to a topic
        current = self.session.codecs.get(relation.oid)
        shape = [(c.name, c.type_oid, c.type_modifier) for c in relation.columns]
        if current is not None:
            old = current.relation
            same = [(c.name, c.type_oid, c.type_modifier) for c in old.columns] == shape
            if same and old.replica_identity == relation.replica_identity:
                return
        info = self.infos.get(relation.oid)
        if info is None or current is not None:
            # A new table of the publication, or a changed one: read the catalog again.
            (info,) = pg.describe_tables(side, [relation.qualified_name])
            self.infos[relation.oid] = info
            counts = create_topics(self.session.admin, [self.topic(relation)], self.config)
            self.router.topics_created(counts)
        known = {c.type_oid for c in relation.columns}
        if any(self.types.type_name(o).startswith("oid ") for o in known):
            labels, arrays = enum_types_from_rows(pg.load_enum_rows(side))
            self.types = PgTypeMapper(
                enum_labels=labels,
                array_elements=arrays,
                unknown_as_text=self.config.unknown_as_text,
            )
        self.session.codecs[relation.oid] = self.codec(relation, info)

    def row_change(
        self,
        m: Insert | Update | Delete,
        codec: TableCodec,
        src: bytes,
        stamp: Callable[[str], bytes],
        send: Callable[..., None],
    ) -> int:
        # Every record is made before any is sent: a value that does not convert leaves
        # nothing half-written. ``stamp`` gives each envelope its ``ts_ms`` and
        # ``transaction`` bytes (the orders count on).
        if isinstance(m, Insert):
            key = codec.key(m.new)
            value = codec.envelope("c", None, codec.row(m.new), src, stamp(codec.table))
            send(codec.topic, key, value)
            return 1
        if isinstance(m, Delete):
            key = codec.key(m.old)
            value = codec.envelope("d", codec.row(m.old), None, src, stamp(codec.table))
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
                deleted = codec.envelope("d", codec.row(old), None, src, stamp(codec.table))
                created = codec.envelope("c", None, codec.row(new), src, stamp(codec.table))
                send(codec.topic, old_key, deleted)
                send(codec.topic, old_key, None)
                send(codec.topic, new_key, created)
                return 3
        before = codec.row(old) if (old is not None and m.old_kind == "O") else None
        value = codec.envelope("u", before, codec.row(new), src, stamp(codec.table))
        send(codec.topic, new_key, value)
        return 1

    def unconvertible(
        self,
        m: Insert | Update | Delete,
        raw: bytes,
        lsn: int,
        exc: CaptureError,
        side: pg.Connection,
        src: bytes,
        blocks: NoBlocks,
        send: Callable[..., None],
        tx: TxInfo,
    ) -> int:
        """A change that did not convert: with fresh types if they changed, else handled
        as ``on_conversion_error`` says (``park``: its key parked). Returns the records
        sent (all acknowledged before the slot passes the change)."""
        relation = m.relation
        raw = blank_values(raw, m, self.session.codecs[relation.oid].dropped)
        if self.refresh_types(relation.oid, side):
            codec = self.session.codecs[relation.oid]
            mark = blocks.mark(codec.table)
            try:
                return self.row_change(m, codec, src, blocks.stamp, send)
            except CaptureError as again:
                blocks.rollback(codec.table, mark)
                exc = again
        codec = self.session.codecs[relation.oid]
        parked = self.parked.park_failed(m, codec, raw, lsn, exc, tx, send)
        if parked is not None:
            return parked
        return self.conversion_failed(
            relation.qualified_name, raw, format_lsn(lsn), "pgoutput", exc, send
        )

    def refresh_types(self, oid: int, side: pg.Connection) -> bool:
        """Reload the enum labels; when they changed, or a converter was registered
        since the table's codec was built (a fix, :func:`register_converter`), a new
        codec (and value schema) for the table. pgoutput sends no Relation message for
        ``ALTER TYPE ... ADD VALUE``."""
        labels, arrays = enum_types_from_rows(pg.load_enum_rows(side))
        generation = converters_generation()
        if labels == self.types._enums and generation == self.codecs_generation.get(oid, 0):
            return False
        self.codecs_generation[oid] = generation
        self.types = PgTypeMapper(
            enum_labels=labels, array_elements=arrays, unknown_as_text=self.config.unknown_as_text
        )
        old = self.session.codecs[oid]
        self.session.codecs[oid] = self.codec(old.relation, self.infos[oid])
        self.session.codecs[oid].events = old.events
        self.stats.schema_refreshes += 1
        self.log.info(
            "enum labels or converters changed: table codec built again",
            table=old.relation.qualified_name,
            value_schema_id=self.session.codecs[oid].value_schema_id,
        )
        return True
