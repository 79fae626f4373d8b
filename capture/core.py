"""What every capture run shares, whatever the source: the producer and its acknowledgement
tracking, back-pressure, the confirmed position, per-table codecs and the dead-letter route."""

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Final

import psycopg2
import psycopg2.extras
import structlog
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bizevents.capture import postgres as pg
from bizevents.capture.config import CaptureConfig
from bizevents.capture.encoding import TableCodec
from bizevents.capture.exceptions import CaptureError, KafkaDeliveryError
from bizevents.capture.metrics import CaptureStats
from bizevents.capture.offsets import AckTracker, SnapshotState
from bizevents.capture.pgoutput import (
    Relation,
    format_lsn,
)
from bizevents.capture.pgtypes import PgTypeMapper
from bizevents.capture.sink import SchemaRegistrar, producer_config
from bizevents.capture.transactions import NoBlocks, TxBlocks
from bizevents.contracts.business import (
    HEADER_DLQ_ERROR,
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    HEADER_SOURCE_POSITION,
    HEADER_SOURCE_TOPIC,
)
from bizevents.contracts.technical.transaction import transaction_topic
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import ensure_topics
from bizevents.plumbing.registry import registry_client

__all__ = ["HEADER_CAPTURE_FORMAT", "HEADER_CAPTURE_TABLE", "CaptureCore", "CaptureEndpoints"]

#: Dead-letter headers of capture's own (the stage, reason, error and source ones are
#: the translators' names).
HEADER_CAPTURE_TABLE: Final = "bizevents.capture.table"
#: ``pgoutput``: the value is the change's raw pgoutput message; ``snapshot-text-json``:
#: a JSON array of the snapshot row's column texts (``null`` for NULL);
#: ``mysql-row-json``: the MySQL row as decoded, in JSON (values as their text).
HEADER_CAPTURE_FORMAT: Final = "bizevents.capture.format"

_FEEDBACK_EVERY_S = 0.5
#: The longest wait between two attempts to reach a lost source.
_MAX_BACKOFF_S: Final = 30.0


@dataclass(frozen=True, slots=True)
class CaptureEndpoints:
    """Where capture connects: the database, Kafka (librdkafka config), the registry."""

    dsn: str
    kafka: dict[str, Any]
    registry: dict[str, Any]
    state_dir: Path


class _Stop(Exception):
    """Raised inside the run when a stop was asked for at a point that must unwind."""


class CaptureCore:
    """The state of one capture and the steps the snapshot and the stream share."""

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
        self.log = structlog.get_logger("bizevents.capture.postgres").bind(
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

    #: The errors that may mean a lost connection to the source (see :meth:`_lost`).
    LOST: tuple[type[BaseException], ...] = (TransientError,)

    def run(self) -> None:
        """Capture until stopped; a lost connection is retried with backoff."""
        backoff = 0.5
        self._producer = Producer(producer_config(self.endpoints.kafka, self.config))
        self._admin = AdminClient(self.endpoints.kafka)
        self._registrar = SchemaRegistrar(registry_client(self.endpoints.registry))
        try:
            while not self.stopping:
                try:
                    self._session()
                    backoff = 0.5
                except self.LOST as exc:
                    if not self._lost(exc):
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
            self._closing()
            # librdkafka's clients close when the last reference goes.
            self._producer = None
            self._admin = None

    def _session(self) -> None:
        """One connection's work, until stopped or the connection is lost."""
        raise NotImplementedError

    def _lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` (one of :attr:`LOST`) is a lost connection, retried, rather
        than a failure that stops capture."""
        return True

    def _closing(self) -> None:
        """The end of a run, after the drain."""
        if self._producer is not None:
            self._producer.flush(0)

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            if self._producer is not None:
                self._producer.poll(0.1)
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

    def _transaction_blocks(self) -> NoBlocks:
        """The transaction metadata writer (its topic created, its schemas registered)."""
        cfg = self.config
        if not cfg.transaction_metadata:
            return NoBlocks()
        topic = transaction_topic(cfg.prefix)
        assert self._admin is not None and self._registrar is not None
        # One partition: BEGIN and END of every transaction in commit order. Not
        # compacted: BEGIN and END share their key.
        ensure_topics(
            self._admin, [topic], 1, replication_factor=cfg.replication_factor, timeout_s=15
        )
        return TxBlocks.registered(self._registrar, topic)

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
