"""One MySQL/MariaDB capture run: check, snapshot, stream the binlog, store offsets.

The order of things, and why:

1. The server is checked (row binlog, full row image, full row metadata, replication
   privileges): a wrong setting stops here with a sentence naming it and the fix.
2. The stored offset is read from the compacted offsets topic (the last record of
   this server's key). None: a consistent snapshot. MariaDB opens an InnoDB
   ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and says which binlog position it
   matches (``binlog_snapshot_file``/``_position``) with no lock at all; on MySQL a
   global read lock is held only while the position is read and the snapshot opened
   (Debezium's way). Every configured table is read in that transaction as op ``r``;
   when Kafka acknowledged every row, the snapshot's position is stored as done.
3. Streaming from the stored (or the snapshot's) position: changes committed after
   the snapshot are in the binlog after its position, those before are in the
   snapshot, none in both. Each row is decoded with the layout of the table map that
   precedes it in the binlog (``binlog_row_metadata=FULL``: names, signedness, enum
   labels, primary key travel with it), so a DDL mid-stream needs no catalog look-up
   and a restart from an old position decodes old rows with their own layout. A new
   layout registers its value schema before its first row is produced.
4. A transaction's position (file/pos after its commit, and its GTID) is stored in the
   offsets topic only once Kafka acknowledged its events and every earlier one's.
   kill -9 at any moment: the restart resumes from the last stored position and
   re-sends what followed it (duplicates, never loss).
5. The server away: reconnect with exponential backoff, resume from the last
   acknowledged position. SIGTERM/SIGINT: stop reading, wait for acknowledgement,
   store the position, exit 0.
"""

from __future__ import annotations

import json
import re
import time
import zlib
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import pymysql
import pymysql.cursors
import structlog
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent as MysqlGtidEvent
from pymysqlreplication.event import (
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from bizevents.capture.core.capture import StreamReader
from bizevents.capture.core.chunks import ChunkDriver
from bizevents.capture.core.filters import FilterError, condition_text, parse_condition, resolve
from bizevents.capture.core.initial import SnapshotTable, write_tables
from bizevents.capture.core.offsets import AckTracker, Tx
from bizevents.capture.core.signals import read_signal, row_key
from bizevents.capture.core.sink import create_dead_letter_topic, create_topics
from bizevents.capture.core.state import Ledger
from bizevents.capture.core.transactions import NoBlocks, TxBlocks
from bizevents.capture.exceptions import CaptureError
from bizevents.capture.mariadb import queries as my
from bizevents.capture.mariadb.chunks import BinlogChunks
from bizevents.capture.mariadb.codec import (
    MyTable,
    MyTableCodec,
    binlog_values,
    fractional_times,
    key_columns,
)
from bizevents.capture.mariadb.quarantine import MysqlQuarantine, RowAt, kind_of
from bizevents.capture.mariadb.queries import BinlogPosition
from bizevents.capture.mariadb.types import converters_generation
from bizevents.contracts.binary import LENGTHS, NULL_BRANCH, VALUE_BRANCH, zigzag
from bizevents.contracts.technical import AVRO_OPS
from bizevents.contracts.technical.transaction import transaction_topic
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import produce

__all__ = ["MysqlCapture"]

_TRUNCATE = re.compile(r"TRUNCATE\s+(?:TABLE\s+)?(?:`?(\w+)`?\.)?`?(\w+)`?", re.IGNORECASE)
_STORE_EVERY_S = 0.5
_POLL_EVERY = 256
#: What a turn may give the snapshot beyond its first slice: at most this, and never
#: more than the stream had since the last turn (the stream keeps half the time). One
#: slice a turn capped the snapshot at 128 rows per transaction of the stream.
_TURN_BUDGET_S = 0.02
_NULL, _SOME = NULL_BRANCH, VALUE_BRANCH
_C, _U, _D = AVRO_OPS["c"], AVRO_OPS["u"], AVRO_OPS["d"]


class MysqlCapture(MysqlQuarantine):
    """Captures the configured tables of a MySQL/MariaDB server into technical topics."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.log = structlog.get_logger("bizevents.capture.mysql").bind(server=cfg.server)
        self.tables = frozenset(cfg.tables)
        self.jsons: dict[str, set[str]] = {}
        self._positions: dict[int, BinlogPosition] = {}
        self._seq = 0
        self._stored: BinlogPosition | None = None
        self._stored_seq = 0
        self._last_store = 0.0
        self.server_id = 0
        self._mariadb = True
        #: The position streaming resumes from (the last one Kafka acknowledged).
        self.position: BinlogPosition | None = None

    # -- the run ----------------------------------------------------------------------------

    LOST = (pymysql.err.OperationalError, pymysql.err.InterfaceError, TransientError)

    LEDGER_SOURCE = "binlog"

    def closing(self) -> None:
        if not self.aborting:
            self.store_position(force=True)
        self.session.producer.flush(5)

    def connected(self) -> None:
        cfg = self.config
        conn = my.connect(self.endpoints.dsn)
        try:
            self.server_id = my.check_server(conn)
            self._mariadb = "mariadb" in conn.get_server_info().lower()
            admin = self.session.admin
            create_topics(admin, [f"{cfg.prefix}.{name}" for name in cfg.tables], cfg)
            create_dead_letter_topic(admin, cfg)  # a refused record goes there too
            self.restore_parked()  # nothing unless on_conversion_error = "park"
            self.session.store.ensure(admin, cfg.replication_factor)
            for name in cfg.tables:
                database, _, table = name.partition(".")
                self.jsons[name] = my.json_columns(conn, database, table)
            if cfg.signal_table is not None and not my.table_exists(conn, cfg.signal_table):
                raise self.missing_signal_table(cfg.signal_table, mysql=True)
            if self.position is None:
                self.position = self.start_position(conn)
            files = my.binlog_files(conn)
            if self.position.file not in files:
                raise CaptureError(
                    f"the stored binlog position {self.position} is no longer on the server "
                    f"(its binlogs start at {files[0] if files else 'nothing'}: purged); the "
                    "changes since cannot be read. Take a new snapshot: delete this capture's "
                    f"offsets topic {cfg.offsets_topic_name} (or name a new one with "
                    "offsets_topic) and start capture again"
                )
        finally:
            conn.close()
        self.start_incremental(list(cfg.tables))
        self.stats.snapshot_done = True
        self._stream()

    def checked_condition(self, table: str, where: str) -> str:
        database, _, name = table.partition(".")
        conn = my.connect(self.endpoints.dsn)
        try:
            columns = [c.name for c in my.catalog_table(conn, database, name).columns]
            cond = resolve(parse_condition(where), columns, table)
            reason = my.check_condition(
                conn, database, name, cond, self.config.snapshot_query_timeout_s
            )
        finally:
            conn.close()
        if reason is not None:
            raise FilterError(reason)
        return condition_text(cond)

    # -- codecs -----------------------------------------------------------------------------

    def table_codec(self, table: MyTable) -> MyTableCodec:
        """The codec of a table layout, its schemas registered (once per layout)."""
        codecs = self.session.codecs
        known: MyTableCodec | None = codecs.get(table)
        if known is not None and known.generation == converters_generation():
            return known
        cfg = self.config
        keys = key_columns(table, cfg.keys.get(table.qualified))
        codec = MyTableCodec(
            server=cfg.server,
            topic=f"{cfg.prefix}.{table.qualified}",
            table=table,
            key_names=keys,
            keep=cfg.column_filter(table.qualified).keeps,
        )
        self.register(codec, table.qualified)
        codecs[table] = codec
        return codec

    # -- offsets -------------------------------------------------------------------------------

    def commit(self, tx: Tx, position: BinlogPosition) -> None:
        """``tx`` ends at ``position``, stored once its events are acknowledged."""
        self._seq += 1
        self._positions[self._seq] = position
        self.session.tracker.commit(tx, self._seq)

    def store_position(self, force: bool = False) -> None:
        """Store the newest position all of whose events Kafka acknowledged."""
        now = time.monotonic()
        if not force and now - self._last_store < _STORE_EVERY_S:
            return
        self._last_store = now
        session = self.session
        seq = session.tracker.confirmable()
        if seq <= self._stored_seq:
            return
        position = self._positions[seq]
        for old in [s for s in self._positions if s <= seq]:
            del self._positions[old]
        self._stored_seq = seq
        self._stored = position
        self.position = position
        session.store.write(
            session.producer,
            session.store.position_key(),
            {
                "file": position.file,
                "pos": position.pos,
                "gtid": position.gtid,
                "server_id": self.server_id,
                "snapshot_done": True,
                "ts_ms": int(time.time() * 1000),
            },
        )
        self.stats.acknowledged_lsn = seq

    # -- snapshot ------------------------------------------------------------------------------

    def start_position(self, conn: pymysql.connections.Connection[Any]) -> BinlogPosition:
        """Where streaming starts: the stored position, else a new snapshot's (or, with
        ``snapshot = "never"``, the binlog's end). Sets the snapshot ledger."""
        cfg = self.config
        store = self.session.store
        records = store.read_all()
        stored = records.get(store.position_key())
        ledger = Ledger.from_json(records.get(store.ledger_key(self.ledger_source())))
        if stored is not None and stored.get("snapshot_done"):
            position = BinlogPosition(stored["file"], int(stored["pos"]), stored.get("gtid"))
            self._stored = position
            self.log.info("resuming", position=str(position))
            if ledger is None:
                # Stored before the ledger existed: its snapshot had every configured table.
                self.ledger = Ledger(True, list(cfg.tables))
                self.store_ledger()
            else:
                self.ledger = ledger
            return position
        position = my.master_position(conn) if cfg.snapshot == "never" else self.initial_snapshot()
        self.ledger = Ledger(True, list(cfg.tables), [], str(position)).signals_from(ledger)
        self.store_ledger()
        return position

    def initial_snapshot(self) -> BinlogPosition:
        cfg = self.config
        session = self.session
        producer = session.producer
        conn = my.connect(self.endpoints.dsn, autocommit=False)
        try:
            position = my.snapshot_position(conn)
            self.log.info("snapshot started", position=str(position), tables=len(cfg.tables))
            tx = session.tracker.begin(None)
            started_ms = int(time.time() * 1000)
            names = list(cfg.tables)

            def table(name: str) -> SnapshotTable:
                database, _, table_name = name.partition(".")
                codec = self.table_codec(my.catalog_table(conn, database, table_name))
                source, last = (
                    codec.source(
                        ts_ms=started_ms,
                        snapshot=flag,
                        server_id=self.server_id,
                        file=position.file,
                        pos=position.pos,
                        gtid=position.gtid,
                    )(0)
                    for flag in ("true", "last")
                )
                rows = my.read_snapshot_rows(conn, database, table_name, cfg.snapshot_fetch_rows)
                return SnapshotTable(name, codec, rows, source, last, last=name == names[-1])

            write_tables(self, (table(name) for name in names), tx)
            conn.commit()
            self.commit(tx, position)
        finally:
            conn.close()
        self.wait_acknowledged()
        self.store_position(force=True)
        producer.flush(10)
        if self.snapshot_finished is not None:
            self.snapshot_finished()
        self.log.info("snapshot in Kafka", position=str(position))
        return position

    def snapshot_raw(self, codec: Any, row: Any) -> tuple[bytes, str]:
        kept = {name: v for name, v in row.items() if name not in codec.dropped}
        return json.dumps(kept, default=str).encode(), "mysql-row-json"

    # -- stream --------------------------------------------------------------------------------

    def _replica_id(self) -> int:
        cfg = self.config
        return cfg.replica_server_id or 100_000 + zlib.crc32(cfg.server.encode()) % 1_000_000

    def _stream(self) -> None:
        assert self.position is not None
        settings = my.connection_settings(self.endpoints.dsn)
        start = self.position
        # MariaDB: from the GTID state (the library reads MariaDB's binlog from its first
        # file otherwise); MySQL: from file and position.
        where: dict[str, Any] = (
            {"auto_position": start.gtid or "", "is_mariadb": True}
            if self._mariadb
            else {"log_file": start.file, "log_pos": start.pos, "resume_stream": True}
        )
        read = set(self.tables)
        if self.config.signal_table is not None:
            read.add(self.config.signal_table)
        stream = BinLogStreamReader(
            connection_settings={**settings, "charset": "utf8mb4"},
            server_id=self._replica_id(),
            blocking=True,
            **where,
            slave_heartbeat=0.5,
            # The library skips the table maps and rows of other tables before parsing
            # them (it matches schema and table name each on its own: a superset of ours,
            # which on_table_map narrows to the configured tables).
            only_schemas=sorted({name.partition(".")[0] for name in read}),
            only_tables=sorted({name.partition(".")[2] for name in read}),
            only_events=[
                WriteRowsEvent,
                UpdateRowsEvent,
                DeleteRowsEvent,
                TableMapEvent,
                QueryEvent,
                XidEvent,
                RotateEvent,
                MariadbGtidEvent,
                MysqlGtidEvent,
                HeartbeatLogEvent,
            ],
        )
        self.log.info("streaming", position=str(start))
        try:
            _BinlogReader(self, stream, self.transaction_blocks()).run()
        finally:
            with suppress(Exception):
                stream.close()
            self.session.tracker.abandon_open()
        self.drain()
        self.check_delivery()
        self.store_position(force=True)
        self.session.tracker = AckTracker()


class _BinlogReader(StreamReader):
    """One stream's loop: binlog events to envelopes, offsets stored between them."""

    def __init__(self, capture: MysqlCapture, stream: BinLogStreamReader, blocks: NoBlocks) -> None:
        #: The open transaction's metadata: each envelope's ``transaction`` block and
        #: the BEGIN/END records (bizevents.capture.core.transactions; NoBlocks when switched off).
        self.blocks = blocks
        self.tx_topic = transaction_topic(capture.config.prefix)
        self.capture = capture
        self.stream = stream
        self.producer = capture.session.producer
        self.tracker = capture.session.tracker
        self.tx: Tx | None = None
        self.ack: Callable[..., None] | None = None
        self.gtid: str | None = None
        self.gtid_domain_state: dict[int, str] = {}
        if capture.position is not None and capture.position.gtid:
            for part in capture.position.gtid.split(","):
                domain = part.split("-", 1)[0]
                if domain.isdigit():
                    self.gtid_domain_state[int(domain)] = part
        self.tables = capture.tables
        self.codecs: dict[int, MyTableCodec] = {}
        self.last_layout: dict[str, MyTable] = {}
        self.fractional_times: dict[int, tuple[str, ...]] = {}
        self.inc = capture.incremental
        #: The incremental snapshots' chunks, turned between transactions.
        self.snapshots: ChunkDriver | None = None
        if self.inc is not None:
            self.chunks = BinlogChunks(self, self.inc)
            self.snapshots = ChunkDriver(self.inc, self.chunks, capture, self.tracker)
        #: When the snapshot's last turn ended (:data:`_TURN_BUDGET_S`).
        self.turn_ended = time.monotonic()
        self.signal_table_id: int | None = None

    def send(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        produce(self.producer, topic, value, key, on_delivery=self.ack)

    def gtid_state(self) -> str | None:
        if not self.gtid_domain_state:
            return None
        return ",".join(self.gtid_domain_state[d] for d in sorted(self.gtid_domain_state))

    def row_at(self, event: Any, row: int) -> RowAt:
        """Where row ``row`` of the rows ``event`` is (a parked row's context)."""
        return RowAt(
            str(self.stream.log_file),
            int(event.packet.log_pos) - int(event.event_size),
            row,
            self.gtid,
            int(event.packet.server_id),
            int(event.timestamp) * 1000,
        )

    def position(self) -> BinlogPosition:
        return BinlogPosition(
            str(self.stream.log_file), int(self.stream.log_pos), self.gtid_state()
        )

    def loop(self) -> None:
        capture = self.capture
        cfg = capture.config
        inc = self.inc
        since_poll = 0
        for event in self.stream:
            cls = event.__class__
            if cls is WriteRowsEvent or cls is UpdateRowsEvent or cls is DeleteRowsEvent:
                self.on_rows(event)
            elif cls is TableMapEvent:
                self.on_table_map(event)
            elif cls is XidEvent:
                self.on_commit(event)
            elif cls is MariadbGtidEvent or cls is MysqlGtidEvent:
                self.on_begin(event)
            elif cls is QueryEvent:
                self.on_query(event)
            since_poll += 1
            if since_poll >= _POLL_EVERY or cls is HeartbeatLogEvent:
                since_poll = 0
                self.producer.poll(0)
                capture.check_delivery()
                capture.store_position()
                in_flight = self.tracker.in_flight
                if (in_flight >= cfg.max_in_flight and self.tx is None) or (
                    in_flight >= cfg.max_in_flight * 2
                ):
                    capture.backpressure()
                if inc is not None:
                    inc.store_acknowledged(self.producer)
                    capture.poll_signals()
                if capture.parking is not None and self.tx is None:
                    capture.carry_out_requests()  # between transactions: nothing overtakes
            if inc is not None and self.tx is None and inc.busy:
                # A heartbeat: nothing else is waiting, a chunk's work at once.
                now = time.monotonic()
                self.snapshot_step(
                    idle=cls is HeartbeatLogEvent,
                    budget_s=min(_TURN_BUDGET_S, now - self.turn_ended),
                )
                self.turn_ended = time.monotonic()
            if capture.stopping and self.tx is None:
                break

    def on_begin(self, event: Any) -> None:
        gtid = str(event.gtid)
        self.gtid = gtid
        domain = gtid.split("-", 1)[0]
        if domain.isdigit():
            self.gtid_domain_state[int(domain)] = gtid
        self.open_tx(gtid, event)

    def open_tx(self, tx_id: str | None, event: Any) -> Tx:
        """A transaction starts at ``event``: its acknowledgement tracking, and its
        metadata under ``tx_id`` (the GTID; else the position of ``event``, its start)."""
        if self.tx is not None:
            # The binlog connection was lost inside a transaction and the library, having
            # reconnected, reads again from its session's start: the open transaction
            # never commits here, and left open it would hold back every later position.
            self.tracker.abandon_open()
        tx = self.tx = self.tracker.begin(None)
        self.ack = tx.ack
        if tx_id is None:
            tx_id = f"{self.stream.log_file}:{int(event.packet.log_pos) - int(event.event_size)}"
        self.blocks.start_id(tx_id, int(event.timestamp) * 1000, int(time.time() * 1000))
        return tx

    def metadata(self, record: tuple[bytes, bytes] | None) -> None:
        """A BEGIN or END record, produced under the open transaction's tracking."""
        if record is None:
            return
        assert self.tx is not None
        produce(
            self.producer, self.tx_topic, record[1], record[0], partition=0, on_delivery=self.ack
        )
        self.tx.produced(1)

    def on_commit(self, event: Any) -> None:
        if self.tx is None:
            return
        blocks = self.blocks
        if isinstance(blocks, TxBlocks):
            blocks.commit_ms = int(event.timestamp) * 1000  # END at the commit's time
        self.metadata(blocks.end_record())
        self.capture.commit(self.tx, self.position())
        self.tx = None
        if self.capture.parking is not None:
            self.capture.carry_out_requests()  # between transactions: nothing overtakes

    def on_query(self, event: Any) -> None:
        query = str(event.query).strip()
        upper = query[:16].upper()
        if upper.startswith("BEGIN"):
            if self.tx is None:  # no GTID event before it: a server without GTIDs
                self.open_tx(None, event)
            return
        if upper.startswith("COMMIT"):
            self.on_commit(event)
            return
        capture = self.capture
        truncated = _TRUNCATE.match(query)
        if truncated is not None:
            schema = event.schema.decode() if isinstance(event.schema, bytes) else event.schema
            self.on_truncate(event, f"{truncated.group(1) or schema}.{truncated.group(2)}")
        # DDL (committed by itself): the next table map carries the new layout; only
        # MariaDB's JSON columns come from the catalog, read again here.
        if capture.tables:
            conn = my.connect(capture.endpoints.dsn)
            try:
                for name in capture.tables:
                    database, _, table = name.partition(".")
                    capture.jsons[name] = my.json_columns(conn, database, table)
            finally:
                conn.close()
        capture.log.info("DDL read", query=query[:200], position=str(self.position()))
        if self.tx is not None:
            self.on_commit(event)
        else:
            tx = self.tracker.begin(None)
            self.capture.commit(tx, self.position())

    def on_truncate(self, event: Any, name: str) -> None:
        """TRUNCATE of a captured table: an op ``t`` event to every partition (null key),
        as the PostgreSQL capture writes it."""
        capture = self.capture
        if name not in self.tables:
            return
        if not capture.config.truncate_events:
            capture.log.warning("TRUNCATE not written (truncate_events = false)", table=name)
            return
        layout = self.last_layout.get(name)
        if layout is None:
            conn = my.connect(capture.endpoints.dsn)
            try:
                database, _, table = name.partition(".")
                layout = my.catalog_table(conn, database, table)
            finally:
                conn.close()
        codec = capture.table_codec(layout)
        if self.snapshots is not None:
            self.snapshots.truncated(codec.topic)
        if self.tx is None:
            self.open_tx(None, event)  # no GTID event opened it
        self.metadata(self.blocks.begin_record())
        source = codec.source(
            ts_ms=int(event.timestamp) * 1000,
            snapshot="false",
            server_id=int(event.packet.server_id),
            file=str(self.stream.log_file),
            pos=int(event.packet.log_pos) - int(event.event_size),
            gtid=self.gtid,
        )
        partitions = capture.config.partitions
        stamp = self.blocks.stamp
        for p in range(partitions):
            # one event per partition, each with its own place in the transaction
            value = codec.envelope("t", None, None, source(0), stamp(name))
            produce(self.producer, codec.topic, value, None, partition=p, on_delivery=self.ack)
        assert self.tx is not None
        self.tx.produced(partitions)
        codec.events += 1
        # Nothing after them until they are answered: one the broker refuses (a
        # compacted topic takes no keyless record) is dead-lettered in its place.
        capture.wait_acknowledged()

    def on_table_map(self, event: Any) -> None:
        name = f"{event.schema}.{event.table}"
        if name not in self.tables:
            if name == self.capture.config.signal_table:
                self.signal_table_id = event.table_id
            return
        layout = my.table_from_map(event, self.capture.jsons.get(name, set()))
        # registers a new layout's schema before its rows
        self.codecs[event.table_id] = self.capture.table_codec(layout)
        self.last_layout[name] = layout
        self.fractional_times[event.table_id] = fractional_times(layout)

    def on_rows(self, event: Any) -> None:
        table_id = event.table_id
        codec = self.codecs.get(table_id)
        if codec is None and table_id == self.signal_table_id:
            if event.__class__ is WriteRowsEvent:
                for row in event.rows:
                    self.on_signal_row(row["values"])
            return
        if codec is None:
            return
        capture = self.capture
        tx = self.tx
        if tx is None:  # rows outside a GTID group or BEGIN: a transaction of their own
            tx = self.open_tx(None, event)
        rows = event.rows
        if not rows:
            return
        blocks = self.blocks
        self.metadata(blocks.begin_record())
        head, tail = codec.source_parts(
            ts_ms=int(event.timestamp) * 1000,
            snapshot="false",
            server_id=int(event.packet.server_id),
            file=str(self.stream.log_file),
            pos=int(event.packet.log_pos) - int(event.event_size),
            gtid=self.gtid,
        )
        # The hot loop: each envelope is one join of prepared parts, each record handed
        # straight to the producer (a full queue falls back to the waiting produce).
        frame = codec.value_frame
        tn = codec.table.qualified
        stamp, mark = blocks.stamp, blocks.mark
        topic = codec.topic
        times = self.fractional_times.get(table_id, ())
        row_of, key_of = codec.row, codec.key
        producer = self.producer
        put = producer.produce
        ack = self.ack
        cls = event.__class__
        n = 0
        inc = self.inc
        superseding = inc is not None and any(
            w is not None and w.topic == topic for w in (inc.window, inc.draining)
        )
        parking = capture.parking
        watched = parking is not None and topic in parking.watched
        for i, row in enumerate(rows):
            src = head + (LENGTHS[i] if i < 16_384 else zigzag(i)) + tail
            if watched:  # a key of this table is parked: its rows wait behind it
                parked = capture.row_parked_behind(
                    codec, kind_of(cls), row, self.row_at(event, i), ack
                )
                if parked is not None:
                    tx.produced(parked)
                    continue
            # ``stamp`` gives each change envelope its ``ts_ms`` and ``transaction``
            # bytes (orders count on); a row that does not convert rolls them back.
            at = mark(tn)
            try:
                if cls is UpdateRowsEvent:
                    old = row["before_values"]
                    new = row["after_values"]
                    if times or row["before_none_sources"] or row["after_none_sources"]:
                        old, new = (
                            binlog_values(row, times, "before_"),
                            binlog_values(row, times, "after_"),
                        )
                    old_key, new_key = key_of(old), key_of(new)
                    before, after = row_of(old), row_of(new)
                    if old_key != new_key:
                        records: tuple[tuple[bytes, bytes | None], ...] = (
                            (
                                old_key,
                                b"".join((frame, _SOME, before, _NULL, src, _D, stamp(tn))),
                            ),
                            (old_key, None),
                            (
                                new_key,
                                b"".join((frame, _NULL, _SOME, after, src, _C, stamp(tn))),
                            ),
                        )
                    else:
                        value = b"".join((frame, _SOME, before, _SOME, after, src, _U, stamp(tn)))
                        records = ((new_key, value),)
                else:
                    values = row["values"]
                    if times or row["none_sources"]:
                        values = binlog_values(row, times)
                    key = key_of(values)
                    if cls is WriteRowsEvent:
                        value = b"".join((frame, _NULL, _SOME, row_of(values), src, _C, stamp(tn)))
                        records = ((key, value),)
                    else:
                        value = b"".join((frame, _SOME, row_of(values), _NULL, src, _D, stamp(tn)))
                        records = ((key, value), (key, None))
            except CaptureError as exc:
                blocks.rollback(tn, at)
                at_row, where = self.row_at(event, i), str(self.position())
                tx.produced(capture.row_failed(codec, kind_of(cls), row, at_row, where, exc, ack))
                continue
            for record_key, record_value in records:
                try:
                    put(topic, record_value, record_key, on_delivery=ack)
                except BufferError:
                    produce(producer, topic, record_value, record_key, on_delivery=ack)
                if superseding:
                    inc.supersede(topic, record_key)  # type: ignore[union-attr]
            n += len(records)
        tx.produced(n)
        codec.events += n
        capture.stats.events[tn] = capture.stats.events.get(tn, 0) + n

    # -- incremental snapshots (bizevents.capture.core.incremental) ---------------------------

    def on_signal_row(self, values: dict[str, Any]) -> None:
        """A row inserted into the signal table: a signal, in its place in the binlog."""
        sig = read_signal(values.get("id"), values.get("type"), values.get("data"))
        # A snapshot it asks for starts after the commit.
        self.capture.on_signal(sig, row=row_key(values.get("id")))

    def snapshot_step(self, idle: bool = False, budget_s: float = 0.0) -> None:
        """At a transaction boundary, the incremental snapshot's turn
        (:meth:`ChunkDriver.run`)."""
        assert self.snapshots is not None
        self.snapshots.run(idle, budget_s)
