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
import time
import zlib
from typing import Any

import pymysql
import pymysql.cursors
import structlog

from bizevents.capture.core.capture import CaptureCore
from bizevents.capture.core.filters import FilterError, condition_text, parse_condition, resolve
from bizevents.capture.core.initial import SnapshotTable, write_snapshot
from bizevents.capture.core.offsets import Tx
from bizevents.capture.core.quarantine import Quarantine
from bizevents.capture.core.routing import check_key_columns
from bizevents.capture.core.sink import create_dead_letter_topic, create_topics
from bizevents.capture.core.state import Ledger
from bizevents.capture.exceptions import CaptureError
from bizevents.capture.mariadb import queries as my
from bizevents.capture.mariadb.codec import (
    MyTable,
    MyTableCodec,
    captured_codec,
    key_columns,
)
from bizevents.capture.mariadb.quarantine import MysqlParking
from bizevents.capture.mariadb.queries import BinlogPosition
from bizevents.capture.mariadb.stream import read_binlog
from bizevents.capture.mariadb.types import converters_generation
from bizevents.contracts.technical.topics import table_topic
from bizevents.plumbing.errors import TransientError

__all__ = ["MysqlCapture"]

_STORE_EVERY_S = 0.5


class MysqlCapture(CaptureCore):
    """Captures the configured tables of a MySQL/MariaDB server into technical topics.

    One class over the core, with its parts: :attr:`quarantine` (the core's parking,
    told MySQL's side by :class:`MysqlParking`), the binlog's reader made per
    connection (:func:`read_binlog`), the incremental snapshots' chunks
    (``BinlogChunks``, in the reader). It keeps the table codecs and the positions."""

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
        self.mariadb = True
        #: The position streaming resumes from (the last one Kafka acknowledged).
        self.position: BinlogPosition | None = None
        self.parked = MysqlParking(self)
        self.quarantine = Quarantine(self, self.parked)
        #: The parked keys (None unless ``on_conversion_error = "park"``), read per row.
        self.parking = self.quarantine.parking

    # -- the run ----------------------------------------------------------------------------

    LOST = (pymysql.err.OperationalError, pymysql.err.InterfaceError, TransientError)

    LEDGER_SOURCE = "binlog"

    def closing(self) -> None:
        self.quarantine.close_requests()
        if not self.aborting:
            self.store_position(force=True)
        self.session.producer.flush(5)

    def connected(self) -> None:
        cfg = self.config
        conn = my.connect(self.endpoints.dsn)
        try:
            self.server_id = my.check_server(conn)
            self.mariadb = "mariadb" in conn.get_server_info().lower()
            admin = self.session.admin
            counts = create_topics(
                admin, [table_topic(cfg.prefix, name) for name in cfg.tables], cfg
            )
            for name, routed in cfg.routing.items():
                database, _, table = name.partition(".")
                layout = my.catalog_table(conn, database, table)
                check_key_columns(name, routed, key_columns(layout, cfg.keys.get(name)))
            self.start_routing(counts)
            create_dead_letter_topic(admin, cfg)  # a refused record goes there too
            self.quarantine.restore_parked()  # nothing unless on_conversion_error = "park"
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
        read_binlog(self)

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
        codec = captured_codec(self.config, table)
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

            write_snapshot(
                self, conn, (table(name) for name in names), tx, lambda t: self.commit(t, position)
            )
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

    def replica_id(self) -> int:
        cfg = self.config
        return cfg.replica_server_id or 100_000 + zlib.crc32(cfg.server.encode()) % 1_000_000
