"""What every capture run shares, whatever the source: the session (producer,
acknowledgement tracker, codecs, schema registrar, state store), back-pressure, the
wait for acknowledgements, the dead-letter route, the snapshot ledger and the run loop
with its reconnect backoff.

Nothing here knows PostgreSQL or MySQL: ``postgres.runner.PostgresCapture`` and
``mariadb.capture.MysqlCapture`` are each one class over :class:`CaptureCore`.
"""

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final

import structlog
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.deadletters import dead_letter_headers, dead_letter_refused
from bizevents.capture.core.filters import Condition, FilterError, parse_condition, resolve
from bizevents.capture.core.incremental import Incremental
from bizevents.capture.core.offsets import AckTracker, Tx
from bizevents.capture.core.routing import Router, declare, to_declare
from bizevents.capture.core.signals import Signal, SignalError, SignalTopic, shown, signal_table_ddl
from bizevents.capture.core.sink import SchemaRegistrar, producer_config
from bizevents.capture.core.state import Ledger, Pending, StateStore
from bizevents.capture.core.transactions import NoBlocks, TxBlocks
from bizevents.capture.exceptions import CaptureError, KafkaDeliveryError
from bizevents.capture.metrics import CaptureStats
from bizevents.contracts.business import HEADER_SOURCE_POSITION
from bizevents.contracts.technical.topics import table_topic
from bizevents.contracts.technical.transaction import transaction_topic
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import ensure_topics, produce
from bizevents.plumbing.registry import registry_client

__all__ = [
    "HEADER_CAPTURE_FORMAT",
    "HEADER_CAPTURE_TABLE",
    "CaptureCore",
    "CaptureEndpoints",
    "Session",
    "Stop",
    "chunk_condition",
]

#: Dead-letter headers of capture's own (the stage, reason, error and source ones are
#: the translators' names).
HEADER_CAPTURE_TABLE: Final = "bizevents.capture.table"
#: ``pgoutput``: the value is the change's raw pgoutput message; ``snapshot-text-json``:
#: a JSON array of the snapshot row's column texts (``null`` for NULL);
#: ``mysql-row-json``: the MySQL row as decoded, in JSON (values as their text).
HEADER_CAPTURE_FORMAT: Final = "bizevents.capture.format"

#: The longest wait between two attempts to reach a lost source.
_MAX_BACKOFF_S: Final = 30.0
#: How long a start waits for the signals sent while capture was away.
_SIGNALS_WAIT_S: Final = 5.0

Send = Callable[..., None]


@dataclass(frozen=True, slots=True)
class CaptureEndpoints:
    """Where capture connects: the database, Kafka (librdkafka config), the registry."""

    dsn: str
    kafka: dict[str, Any]
    registry: dict[str, Any]
    state_dir: Path


@dataclass(slots=True)
class Session:
    """What a source's snapshot and stream write through, made once per run."""

    producer: Producer
    admin: AdminClient
    registrar: SchemaRegistrar
    #: The compacted state topic (positions, the snapshot ledger).
    store: StateStore
    #: Events in flight, by transaction; a new one for each connection (:meth:`run`).
    tracker: AckTracker = field(default_factory=AckTracker)
    #: Per-table codecs, keyed as the source names its tables (an oid, a table map).
    codecs: dict[Any, Any] = field(default_factory=dict)


def chunk_condition(pending: Pending, columns: list[str]) -> Condition | None:
    """The stored condition of a snapshot, checked against the table's columns now
    (:class:`FilterError` when it no longer fits)."""
    if pending.where is None:
        return None
    return resolve(parse_condition(pending.where), columns, pending.table)


class Stop(Exception):
    """Raised inside the run when a stop was asked for at a point that must unwind."""


class CaptureCore:
    """The state of one capture and the steps every source's snapshot and stream share."""

    #: The state topic's name for this source's snapshot ledger.
    LEDGER_SOURCE = "source"

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
        self.progress = progress
        self.snapshot_finished = snapshot_finished
        self.log = structlog.get_logger("bizevents.capture").bind(server=config.server)
        self.stopping = False
        self.aborting = False
        self._session: Session | None = None
        self.ledger = Ledger()
        #: The incremental snapshots (set once the ledger is known).
        self.incremental: Incremental | None = None
        self.signal_topic: SignalTopic | None = None
        self._signals_polled = 0.0
        #: The partition of every technical record (docs/transactions.md: routing).
        self.router = Router(config)

    #: The errors that may mean a lost connection to the source (see :meth:`lost`).
    LOST: tuple[type[BaseException], ...] = (TransientError,)

    @property
    def session(self) -> Session:
        """The run's session (only inside :meth:`run`)."""
        assert self._session is not None, "capture is not running"
        return self._session

    def run(self) -> None:
        """Capture until stopped; a lost connection is retried with backoff."""
        backoff = 0.5
        cfg = self.config
        self._session = Session(
            producer=Producer(producer_config(self.endpoints.kafka, cfg)),
            admin=AdminClient(self.endpoints.kafka),
            registrar=SchemaRegistrar(registry_client(self.endpoints.registry)),
            store=StateStore(self.endpoints.kafka, cfg.offsets_topic_name, cfg.server),
        )
        try:
            while not self.stopping:
                # Each connection reads again from the stored position and tracks only
                # what it sends: a failure of the last one's must not end this one too.
                self._session.tracker = AckTracker()
                try:
                    self.connected()
                    backoff = 0.5
                except self.LOST as exc:
                    if not self.lost(exc):
                        raise
                    if self.stopping:
                        break
                    self.stats.reconnects += 1
                    self.log.warning(
                        "capture interrupted, retrying", error=str(exc).strip(), retry_in_s=backoff
                    )
                    self.sleep(backoff)
                    backoff = min(backoff * 2, _MAX_BACKOFF_S)
                except Stop:
                    break
        finally:
            self.drain()
            if self.incremental is not None and self._session is not None and not self.aborting:
                # The progress of the chunks acknowledged since the last poll.
                self.incremental.store_acknowledged(self._session.producer)
                self.drain()
            self.closing()
            if self.signal_topic is not None:
                self.signal_topic.close()
            # librdkafka's clients close when the last reference goes.
            self._session = None

    def connected(self) -> None:
        """One connection's work, until stopped or the connection is lost."""
        raise NotImplementedError

    def lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` (one of :attr:`LOST`) is a lost connection, retried, rather
        than a failure that stops capture."""
        return True

    def closing(self) -> None:
        """The end of a run, after the drain."""
        if self._session is not None:
            self._session.producer.flush(0)

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            if self._session is not None:
                self._session.producer.poll(0.1)
            else:
                time.sleep(0.1)

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

    # -- acknowledgements ---------------------------------------------------------------------

    def drain(self) -> None:
        """Wait until Kafka acknowledged everything produced (or the wait is given up)."""
        if self._session is None:
            return
        producer = self._session.producer
        tracker = self._session.tracker
        logged = False
        while (len(producer) > 0 or tracker.refused) and not self.aborting:
            producer.poll(0.2)
            self.dead_letter_refused()
            if not logged and len(producer) > 0:
                self.log.info("waiting for Kafka to acknowledge", in_flight=len(producer))
                logged = True

    def check_delivery(self) -> None:
        """A failed delivery report ends the session unconfirmed (a restart re-sends);
        a record refused for good goes to the dead-letter topic instead."""
        self.dead_letter_refused()
        failure = self.session.tracker.failure
        if failure is not None:
            raise KafkaDeliveryError(f"Kafka did not take an event: {failure}")

    def dead_letter_refused(self) -> None:
        """Records Kafka refused for good: sent again alone, else dead-lettered
        (:mod:`bizevents.capture.core.deadletters`)."""
        session = self.session
        dead_letter_refused(
            session.producer, session.tracker, self.config.dlq_topic, self.log, self._stop_if_asked
        )

    def _stop_if_asked(self) -> None:
        if self.aborting:
            raise Stop

    def wait_acknowledged(self) -> None:
        """Until Kafka acknowledged every event in flight (a second stop gives up)."""
        session = self.session
        while session.tracker.in_flight > 0:
            session.producer.poll(0.2)
            self.check_delivery()
            if self.aborting:
                raise Stop

    def backpressure(self, keepalive: Callable[[], None] | None = None) -> None:
        """At ``max_in_flight`` events unacknowledged, wait until three quarters drained
        (``keepalive`` keeps the source's connection alive meanwhile)."""
        session = self.session
        tracker = session.tracker
        if tracker.in_flight < self.config.max_in_flight:
            return
        self.stats.backpressure_pauses += 1
        low = self.config.max_in_flight * 3 // 4
        logged_at = time.monotonic()
        while tracker.in_flight > low and not self.aborting:
            session.producer.poll(0.1)
            self.check_delivery()
            if keepalive is not None:
                keepalive()
            if time.monotonic() - logged_at > 10:
                self.log.warning(
                    "Kafka is not acknowledging; slot reading paused", in_flight=tracker.in_flight
                )
                logged_at = time.monotonic()
            if self.stopping and not self.aborting and tracker.in_flight <= low:
                break

    # -- what both sources write ------------------------------------------------------------

    def start_routing(self, counts: dict[str, int]) -> None:
        """At start, the technical topics made (``counts``): the routing checked, declared."""
        new = to_declare(self.config, self.endpoints.kafka, counts)
        if new:
            declare(self.config, self.session.admin, self.session.producer, new)
        self.router.topics_created(counts)

    def transaction_blocks(self) -> NoBlocks:
        """The transaction metadata writer (its topic created, its schemas registered)."""
        cfg = self.config
        if not cfg.transaction_metadata:
            return NoBlocks()
        topic = transaction_topic(cfg.prefix)
        session = self.session
        # One partition: BEGIN and END of every transaction in commit order. Not
        # compacted: BEGIN and END share their key.
        ensure_topics(
            session.admin, [topic], 1, replication_factor=cfg.replication_factor, timeout_s=15
        )
        return TxBlocks.registered(session.registrar, topic, counted=self.router.routes)

    def conversion_failed(
        self, table: str, raw: bytes, where: str, fmt: str, exc: CaptureError, send: Send
    ) -> int:
        """A change whose value does not convert: dead letter, skip or stop, as
        ``on_conversion_error`` says. Returns the records sent (0 or 1). A change that
        cannot park (a snapshot row, a key that does not convert, a MySQL row) is
        dead-lettered under ``park``."""
        cfg = self.config
        mode = "dead-letter" if cfg.on_conversion_error == "park" else cfg.on_conversion_error
        if mode == "fail":
            raise exc
        counted = (table, mode)
        self.stats.conversion_errors[counted] = self.stats.conversion_errors.get(counted, 0) + 1
        self.log.warning(
            "change not converted: "
            + ("written to the dead-letter topic" if mode == "dead-letter" else "skipped"),
            table=table,
            column=getattr(exc, "column", None),
            position=where,
            reason=str(exc),
            topic=cfg.dlq_topic if mode == "dead-letter" else None,
        )
        if mode == "skip":
            return 0
        headers = dead_letter_headers(
            str(exc),
            type(exc).__name__,
            table_topic(cfg.prefix, table),
            (HEADER_SOURCE_POSITION, where.encode()),
            (HEADER_CAPTURE_TABLE, table.encode()),
            (HEADER_CAPTURE_FORMAT, fmt.encode()),
        )
        send(cfg.dlq_topic, None, raw, headers=headers)
        return 1

    def register(self, codec: Any, table: str) -> None:
        """Register a table layout's schemas (before its first record) and say so."""
        self.session.registrar.register(codec)
        self.router.learn(codec, table)
        self.log.info(
            "table schema registered",
            table=table,
            topic=codec.topic,
            key_schema_id=codec.key_schema_id,
            value_schema_id=codec.value_schema_id,
        )

    def snapshot_raw(self, codec: Any, row: Any) -> tuple[bytes, str]:
        """A snapshot row as its dead letter keeps it, without the columns ``codec``
        does not capture: ``(its bytes, their format)``."""
        raise NotImplementedError

    def snapshot_row(
        self,
        codec: Any,
        table: str,
        key: bytes | None,
        row: Any,
        source: bytes,
        ts: bytes,
        tx: Tx,
    ) -> bool:
        """One snapshot row (initial or incremental, either source) written as op ``r``
        under ``tx``; ``key`` is encoded here when not given. A row that does not
        convert goes where ``on_conversion_error`` says, with its original values.
        Whether the row was written."""
        producer = self.session.producer
        ack = tx.ack
        try:
            value = codec.envelope("r", None, codec.row(row), source, ts)
            if key is None:
                key = codec.key(row)
        except CaptureError as exc:
            raw, fmt = self.snapshot_raw(codec, row)

            def dead_letter(
                topic: str, k: bytes | None, v: bytes, headers: list[tuple[str, Any]]
            ) -> None:
                produce(producer, topic, v, k, headers=headers, on_delivery=ack)

            tx.produced(self.conversion_failed(table, raw, "snapshot", fmt, exc, dead_letter))
            return False
        partition = self.router.partition(codec.topic, key)
        produce(producer, codec.topic, value, key, partition=partition, on_delivery=ack)
        tx.produced()
        return True

    # -- the snapshot ledger ------------------------------------------------------------------

    def ledger_source(self) -> str:
        """The name of this source in the ledger's key."""
        return self.LEDGER_SOURCE

    def read_ledger(self) -> Ledger | None:
        """The ledger stored in the state topic, or ``None`` when there is none."""
        session = self.session
        session.store.ensure(session.admin, self.config.replication_factor)
        stored = session.store.read(session.store.ledger_key(self.ledger_source()))
        return Ledger.from_json(stored)

    def store_ledger(self) -> None:
        """Store the ledger and wait for Kafka's acknowledgement (with nothing in flight:
        at start, after the initial snapshot). While streaming, the incremental snapshots
        store it once their chunks are acknowledged (:class:`Incremental`)."""
        session = self.session
        key = session.store.ledger_key(self.ledger_source())
        session.store.write_acknowledged(session.producer, key, self.ledger.to_json())

    def start_incremental(self, configured: list[str]) -> Incremental:
        """The incremental snapshots of this run: those the ledger has under way, and
        (``snapshot_new_tables``) one of each table configured since the last run."""
        cfg = self.config
        ledger = self.ledger
        gone = [p.table for p in ledger.queue if p.table not in configured]
        if gone:
            self.log.warning("snapshots of tables no longer captured dropped", tables=gone)
            ledger.queue = [p for p in ledger.queue if p.table in configured]
        if cfg.snapshot == "initial" and cfg.snapshot_new_tables:
            added = ledger.added_tables(configured)
            if added:
                self.log.info("tables added since the last run: incremental snapshot", tables=added)
                ledger.queue.extend(Pending(t, "auto") for t in added)
        if gone or ledger.queue:
            self.store_ledger()
        session = self.session
        if self.signal_topic is None:
            # One partition: signals in the order they were sent. Not compacted.
            ensure_topics(
                session.admin,
                [cfg.signal_topic_name],
                1,
                replication_factor=cfg.replication_factor,
                timeout_s=15,
            )
            self.signal_topic = SignalTopic(self.endpoints.kafka, cfg.signal_topic_name, cfg.server)

        def progress(table: str, rows: int, this_run: int) -> None:
            self.stats.incremental_rows[table] = rows
            self.stats.incremental_snapshots = len(ledger.queue)
            if self.progress is not None:
                self.progress(table, this_run, this_run)

        self.incremental = Incremental(
            ledger,
            session.store,
            session.store.ledger_key(self.ledger_source()),
            cfg.incremental_chunk_rows,
            progress,
        )
        if ledger.queue:
            # The signals sent while capture was away go first: a stored snapshot does
            # not resume before a stop sent for it.
            self.poll_signals(wait_s=_SIGNALS_WAIT_S)
        return self.incremental

    # -- signals (bizevents.capture.core.signals) ------------------------------------------------

    def captured_tables(self) -> list[str]:
        """The tables this capture writes (``schema.table``)."""
        return list(self.config.tables)

    def checked_condition(self, table: str, where: str) -> str:
        """The condition ``where`` as it applies to ``table`` (each column named as the
        table names it), once the database took it; :class:`FilterError` with the
        reason otherwise."""
        raise NotImplementedError

    def stop_failed_snapshot(self, pending: Pending, reason: str) -> None:
        """A snapshot whose condition or chunk query failed: stopped with one sentence
        (a retry would fail the same way); capture goes on."""
        inc = self.incremental
        assert inc is not None
        inc.ledger.queue = [p for p in inc.ledger.queue if p is not pending]
        if inc.window is not None and inc.window.pending is pending:
            inc.window = None
        inc.changed()
        self.stats.incremental_snapshots = len(inc.ledger.queue)
        self.log.warning(
            f"incremental snapshot stopped: {reason}", table=pending.table, id=pending.id
        )

    def missing_signal_table(self, table: str, mysql: bool) -> CaptureError:
        """The sentence that stops start-up when the configured signal table is missing."""
        return CaptureError(
            f"the signal table {table} (signal_table in the capture configuration) does not "
            f"exist; create it with: {signal_table_ddl(table, mysql)}"
        )

    def poll_signals(self, wait_s: float = 0) -> None:
        """Carry out the signals that arrived on the signal topic (at most every 0.5 s);
        ``wait_s``: all those sent so far, waiting up to that long for them."""
        topic = self.signal_topic
        now = time.monotonic()
        if topic is None or (not wait_s and now - self._signals_polled < 0.5):
            return
        self._signals_polled = now
        for after, sig in topic.poll(self.ledger.signal_offset, wait_s):
            if after >= 0:
                self.ledger.signal_offset = after
            self.on_signal(sig)

    def on_signal(self, sig: Signal | SignalError, row: str | None = None) -> None:
        """Carry out one signal; one that cannot be is refused with one sentence and
        capture goes on. ``row``: the id of the signal table's row it came from, carried
        out once however often the log is read."""
        if row is not None and self.ledger.signal_row_done(row):
            self.log.info("signal already carried out: not again", id=row)
            return
        try:
            if isinstance(sig, SignalError):
                raise sig
            self._carry_out(sig)
            self.stats.incremental_snapshots = len(self.ledger.queue)
        except Stop:
            raise
        except Exception as exc:  # no signal may stop capture, whatever goes wrong
            if not isinstance(exc, SignalError):
                reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                sid = sig.id if isinstance(sig, Signal) else ""
                exc = SignalError(
                    f"signal {shown(sid)} could not be carried out ({type(exc).__name__}: {reason})"
                )
            self.stats.signals_refused += 1
            self.log.warning(f"signal refused: {exc}")
            if self.incremental is not None:
                self.incremental.changed()  # its offset: not to be read again

    def _carry_out(self, sig: Signal) -> None:
        inc = self.incremental
        if inc is None:
            raise SignalError(f"signal {sig.id!r}: this capture takes no snapshots")
        ledger = inc.ledger
        captured = self.captured_tables()
        named = [p for p in ledger.queue if not sig.tables or p.table in sig.tables]
        if sig.type == "execute-snapshot":
            conditions: dict[str, str] = {}
            for table in sig.tables:
                if table not in captured:
                    raise SignalError(
                        f"snapshot signal {sig.id!r}: table {table} is not captured here "
                        f"(captured: {', '.join(sorted(captured))})"
                    )
                running = next((p for p in ledger.queue if p.table == table), None)
                if running is not None:
                    raise SignalError(
                        f"snapshot signal {sig.id!r}: table {table} is already being "
                        f"snapshotted (signal {running.id!r}); stop that one first or let it end"
                    )
                where = sig.condition(table)
                if where is not None:
                    try:
                        conditions[table] = self.checked_condition(table, where)
                    except FilterError as exc:
                        raise SignalError(
                            f"snapshot signal {sig.id!r}: the condition {shown(where)} cannot "
                            f"be used on {table}: {exc}"
                        ) from None
            ledger.queue.extend(Pending(t, sig.id, conditions.get(t)) for t in sig.tables)
            self.log.info("incremental snapshot requested", id=sig.id, tables=sig.tables)
        elif sig.type in ("pause-snapshot", "resume-snapshot"):
            if not named:
                action = sig.type.removesuffix("-snapshot")
                raise SignalError(f"signal {sig.id!r}: no snapshot under way to {action}")
            for p in named:
                p.paused = sig.type == "pause-snapshot"
            self.log.info(
                "incremental snapshot " + ("paused" if named[0].paused else "resumed"),
                tables=[p.table for p in named],
            )
        else:  # stop-snapshot
            if not named:
                raise SignalError(f"signal {sig.id!r}: no snapshot under way to stop")
            ledger.queue = [p for p in ledger.queue if p not in named]
            if inc.window is not None and inc.window.pending in named:
                inc.window = None  # its rows are dropped, never written
            self.log.info("incremental snapshot stopped", tables=[p.table for p in named])
        inc.changed()
