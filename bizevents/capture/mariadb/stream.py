"""MariaDB/MySQL streaming: binlog events to technical topics, one transaction at a time,
its position stored once Kafka acknowledged it; incremental snapshot chunks between
transactions. Step 3 of :mod:`bizevents.capture.mariadb.capture`."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Protocol

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

from bizevents.capture.core.chunks import ChunkDriver
from bizevents.capture.core.offsets import Tx
from bizevents.capture.core.reader import StreamHost, StreamReader
from bizevents.capture.core.signals import read_signal, row_key
from bizevents.capture.core.transactions import NoBlocks, TxBlocks
from bizevents.capture.exceptions import CaptureError
from bizevents.capture.mariadb import queries as my
from bizevents.capture.mariadb.chunks import BinlogChunks
from bizevents.capture.mariadb.codec import (
    MyTable,
    MyTableCodec,
    binlog_values,
    fractional_times,
)
from bizevents.capture.mariadb.quarantine import MysqlParking, RowAt, kind_of
from bizevents.capture.mariadb.queries import BinlogPosition
from bizevents.contracts.binary import LENGTHS, NULL_BRANCH, VALUE_BRANCH, zigzag
from bizevents.contracts.technical import AVRO_OPS
from bizevents.contracts.technical.transaction import transaction_topic
from bizevents.plumbing.kafka import produce

__all__ = ["BinlogHost", "BinlogReader", "read_binlog"]


_TRUNCATE = re.compile(r"TRUNCATE\s+(?:TABLE\s+)?(?:`?(\w+)`?\.)?`?(\w+)`?", re.IGNORECASE)


_POLL_EVERY = 256
#: What a turn may give the snapshot beyond its first slice: at most this, and never
#: more than the stream had since the last turn (the stream keeps half the time). One
#: slice a turn capped the snapshot at 128 rows per transaction of the stream.
_TURN_BUDGET_S = 0.02
_NULL, _SOME = NULL_BRANCH, VALUE_BRANCH
_C, _U, _D = AVRO_OPS["c"], AVRO_OPS["u"], AVRO_OPS["d"]


class BinlogHost(StreamHost, Protocol):
    """What the binlog's reader asks of its capture
    (:class:`~bizevents.capture.mariadb.capture.MysqlCapture`), beyond a reader's."""

    #: The configured tables (``database.table``).
    tables: frozenset[str]
    #: The JSON columns per table (the binlog gives their text in MySQL's binary form).
    jsons: dict[str, set[str]]
    #: The position streaming resumes from (the last one Kafka acknowledged).
    position: BinlogPosition | None
    mariadb: bool
    server_id: int
    parked: MysqlParking

    def replica_id(self) -> int: ...

    def table_codec(self, table: MyTable) -> MyTableCodec: ...

    def commit(self, tx: Tx, position: BinlogPosition) -> None: ...

    def store_position(self, force: bool = False) -> None: ...


def read_binlog(capture: BinlogHost) -> None:
    """Step 3: the binlog from capture's position on, until stopped; then every
    record acknowledged and the last position stored."""
    assert capture.position is not None
    settings = my.connection_settings(capture.endpoints.dsn)
    start = capture.position
    # MariaDB: from the GTID state (the library reads MariaDB's binlog from its first
    # file otherwise); MySQL: from file and position.
    where: dict[str, Any] = (
        {"auto_position": start.gtid or "", "is_mariadb": True}
        if capture.mariadb
        else {"log_file": start.file, "log_pos": start.pos, "resume_stream": True}
    )
    read = set(capture.tables)
    if capture.config.signal_table is not None:
        read.add(capture.config.signal_table)
    stream = BinLogStreamReader(
        connection_settings={**settings, "charset": "utf8mb4"},
        server_id=capture.replica_id(),
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
    capture.log.info("streaming", position=str(start))
    try:
        BinlogReader(capture, stream, capture.transaction_blocks()).run()
    finally:
        with suppress(Exception):
            stream.close()
        capture.session.tracker.abandon_open()
    capture.drain()
    capture.check_delivery()
    capture.store_position(force=True)


def event_start(event: Any) -> int:
    """Where a binlog event begins in its file: ``SHOW BINLOG EVENTS``' ``Pos`` and
    Debezium's ``source.pos``. The packet's ``event_size`` is the whole event's, header
    and checksum in (the event's own leaves both out)."""
    return int(event.packet.log_pos) - int(event.packet.event_size)


class BinlogReader(StreamReader):
    """One stream's loop: binlog events to envelopes, offsets stored between them."""

    def __init__(self, capture: BinlogHost, stream: BinLogStreamReader, blocks: NoBlocks) -> None:
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
        partition = self.capture.router.partition(topic, key)
        produce(self.producer, topic, value, key, partition=partition, on_delivery=self.ack)

    def gtid_state(self) -> str | None:
        if not self.gtid_domain_state:
            return None
        return ",".join(self.gtid_domain_state[d] for d in sorted(self.gtid_domain_state))

    def row_at(self, event: Any, row: int) -> RowAt:
        """Where row ``row`` of the rows ``event`` is (a parked row's context)."""
        return RowAt(
            str(self.stream.log_file),
            event_start(event),
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
                    # between transactions: nothing overtakes
                    capture.quarantine.carry_out_requests()
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
            tx_id = f"{self.stream.log_file}:{event_start(event)}"
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
            self.capture.quarantine.carry_out_requests()  # between transactions: nothing overtakes

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
        source = codec.source(**self.source_fields(event))
        partitions = capture.config.partitions
        stamp = self.blocks.stamp
        for p in range(partitions):
            # one event per partition, each with its own place in the transaction
            value = codec.envelope("t", None, None, source(0), stamp(name))
            produce(self.producer, codec.topic, value, None, partition=p, on_delivery=self.ack)
            self.blocks.placed(name, p)
        assert self.tx is not None
        self.tx.produced(partitions)
        codec.events += 1
        # Nothing after them until they are answered: one the broker refuses (a
        # compacted topic takes no keyless record) is dead-lettered in its place.
        capture.wait_acknowledged()

    def source_fields(self, event: Any) -> dict[str, Any]:
        """The ``source`` fields of a binlog event's rows (all but the row's index)."""
        return {
            "ts_ms": int(event.timestamp) * 1000,
            "snapshot": "false",
            "server_id": int(event.packet.server_id),
            "file": str(self.stream.log_file),
            "pos": event_start(event),
            "gtid": self.gtid,
        }

    def on_table_map(self, event: Any) -> None:
        name = f"{event.schema}.{event.table}"
        table_id = event.table_id
        if name not in self.tables:
            # a table id names another table after a server restart (the library
            # reconnects on its own, this reader's maps stay): forget what it named
            self.codecs.pop(table_id, None)
            self.fractional_times.pop(table_id, None)
            if name == self.capture.config.signal_table:
                self.signal_table_id = table_id
            elif self.signal_table_id == table_id:
                self.signal_table_id = None
            return
        layout = my.table_from_map(event, self.capture.jsons.get(name, set()))
        # registers a new layout's schema before its rows
        self.codecs[table_id] = self.capture.table_codec(layout)
        self.last_layout[name] = layout
        self.fractional_times[table_id] = fractional_times(layout)

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
        head, tail = codec.source_parts(**self.source_fields(event))
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
        router = capture.router
        route = router.partition if router.routes else None
        placed = blocks.placed
        for i, row in enumerate(rows):
            src = head + (LENGTHS[i] if i < 16_384 else zigzag(i)) + tail
            if watched:  # a key of this table is parked: its rows wait behind it
                parked = capture.parked.row_parked_behind(
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
                tx.produced(
                    capture.parked.row_failed(codec, kind_of(cls), row, at_row, where, exc, ack)
                )
                continue
            for record_key, record_value in records:
                if route is None:
                    try:
                        put(topic, record_value, record_key, on_delivery=ack)
                    except BufferError:
                        produce(producer, topic, record_value, record_key, on_delivery=ack)
                else:
                    p = route(topic, record_key)
                    if record_value is not None:  # a change event (not a tombstone)
                        placed(tn, p)
                    produce(producer, topic, record_value, record_key, partition=p, on_delivery=ack)
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
