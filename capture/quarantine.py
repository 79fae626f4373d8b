"""Capture quarantine: a change that cannot be converted parks its key until a re-drive.

With ``on_conversion_error = "park"`` (PostgreSQL streaming), a change whose values do
not convert goes to the capture dead-letter topic as it came (the raw pgoutput
message) with what re-decoding it needs later (the relation's columns and types at the
time, the key columns, the LSN, the transaction id and commit time), marked parked, and
its technical key is parked: the key's later changes go to the dead-letter topic too,
parked behind it, in order, and none reaches the technical topic. Other keys flow on.

The parked keys live in a compacted topic (``<server>.capture.parked``), restored at
start; ``bizevents capture redrive`` writes a request there, and the running capture
carries it out between two transactions of its stream, in the thread that reads the
slot: it waits until Kafka acknowledged everything sent, reads the key's parked changes
back, re-decodes them with the code it runs now (a converter registered since, see
:func:`bizevents.capture.pgtypes.register_converter`), writes them to the technical topic
in order, waits for their acknowledgement, then unparks the key. No live change of the
key is read in between, so none can overtake a re-driven one (docs/parking.md,
"Capture quarantine").

This module holds the pure parts (the dead-letter context, picking a key's parked
changes) and :class:`Quarantine`, the PostgreSQL capture's part that parks and
re-drives; the state is :mod:`bizevents.capture.parkstate`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from confluent_kafka import Consumer, TopicPartition

from bizevents.capture.encoding import TableCodec
from bizevents.capture.exceptions import CaptureError
from bizevents.capture.parkstate import (
    ANY_PARTITION,
    CAPTURE,
    PARKED_HEADER,
    STAGE_PARKED,
    ParkedKeys,
    Ref,
    Request,
    ref_key,
)
from bizevents.capture.pgcore import PgCore
from bizevents.capture.pgoutput import (
    Column,
    Delete,
    Insert,
    PgOutputDecoder,
    Relation,
    RelationCache,
    Update,
    format_lsn,
)
from bizevents.capture.transactions import NoBlocks
from bizevents.contracts.business import (
    HEADER_DLQ_ERROR,
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    HEADER_SOURCE_POSITION,
    HEADER_SOURCE_TOPIC,
)
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import ensure_topics, produce

__all__ = [
    "HEADER_CAPTURE_CONTEXT",
    "ParkedChange",
    "Quarantine",
    "TxInfo",
    "ask_redrive",
    "context_record",
    "parked_changes",
    "parked_keys",
    "read_topic",
    "relation_of",
    "relation_record",
]

#: The dead-letter header with what a parked change needs to be re-decoded (JSON).
HEADER_CAPTURE_CONTEXT: Final = "bizevents.capture.context"
_REQUEST_PREFIX: Final = b"request|"
_POLL_EVERY_S: Final = 0.5


@dataclass(frozen=True, slots=True)
class TxInfo:
    """The transaction a change belongs to: its id and commit time."""

    xid: int | None
    commit_ms: int
    commit_us: int


def context_record(codec: TableCodec, lsn: int, tx: TxInfo) -> dict[str, Any]:
    """What re-decoding a change of ``codec``'s table at ``lsn`` needs later."""
    return {
        "relation": relation_record(codec.relation),
        "key": list(codec.key_names),
        "key_nullable": codec.key_nullable,
        "lsn": lsn,
        "xid": tx.xid,
        "commit_ms": tx.commit_ms,
        "commit_us": tx.commit_us,
    }


def relation_record(relation: Relation) -> dict[str, Any]:
    """``relation`` as JSON-ready data (:func:`relation_of` reads it back)."""
    return {
        "oid": relation.oid,
        "namespace": relation.namespace,
        "name": relation.name,
        "replica_identity": relation.replica_identity,
        "columns": [[c.flags, c.name, c.type_oid, c.type_modifier] for c in relation.columns],
    }


def relation_of(context: dict[str, Any]) -> Relation:
    """The relation a parked change was decoded with (ValueError: not a context)."""
    try:
        r = context["relation"]
        columns = tuple(Column(int(f), str(n), int(t), int(m)) for f, n, t, m in r["columns"])
        return Relation(
            int(r["oid"]), str(r["namespace"]), str(r["name"]), str(r["replica_identity"]), columns
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a capture context: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ParkedChange:
    """A parked change as the dead-letter topic holds it."""

    raw: bytes
    context: dict[str, Any]
    lsn: int
    reason: str


def parked_changes(messages: Sequence[Any], ref: Ref, first: int) -> list[ParkedChange]:
    """``ref``'s parked changes among dead-letter ``messages`` (in the order read: one
    key's records are in one partition, in the order capture parked them) from the
    park's first position on, each once (a restart may have parked one twice)."""
    _, topic, _, key = ref
    found: list[ParkedChange] = []
    seen: set[int] = set()
    for msg in messages:
        headers = dict(msg.headers() or [])
        if headers.get(PARKED_HEADER) != b"1" or (msg.key() or b"") != key:
            continue
        if (headers.get(HEADER_SOURCE_TOPIC) or b"").decode(errors="replace") != topic:
            continue
        try:
            context = json.loads(headers.get(HEADER_CAPTURE_CONTEXT) or b"")
            lsn = int(context["lsn"])
        except (ValueError, TypeError, KeyError):
            continue
        if lsn < first or lsn in seen:
            continue
        seen.add(lsn)
        reason = (headers.get(HEADER_DLQ_REASON) or b"").decode(errors="replace")
        found.append(ParkedChange(msg.value() or b"", context, lsn, reason))
    return found


def read_topic(conf: dict[str, Any], topic: str, timeout_s: float = 30.0) -> list[Any]:
    """Every record of ``topic`` (confluent-kafka messages), each partition read to the
    end the fetch reports (the embedded broker's ListOffsets is wrong, docs/broker.md)."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError

    consumer = Consumer(
        {
            **conf,
            "group.id": "bizevents-capture-parked-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        unfinished = set(meta.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in unfinished])
        found: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while unfinished:
            msg = consumer.poll(0.2)
            if msg is None:
                if time.monotonic() > deadline:
                    raise TransientError(f"{topic} did not answer within {timeout_s:.0f} s")
                continue
            err = msg.error()
            if err is None:
                found.append(msg)
            elif err.code() == KafkaError._PARTITION_EOF:
                unfinished.discard(msg.partition())
            elif not err.retriable():
                raise TransientError(f"cannot read {topic}: {err}")
        return found
    finally:
        consumer.close()


Send = Callable[..., None]


class Quarantine(PgCore):
    """The PostgreSQL capture's parking: parks keys, restores them, re-drives them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.config
        #: None unless ``on_conversion_error = "park"``.
        self.parking: ParkedKeys | None = (
            ParkedKeys(cfg.max_parked_keys) if cfg.on_conversion_error == "park" else None
        )
        self.requests: dict[str, Request] = {}
        self._requests_at = 0
        self._request_reader: Consumer | None = None
        self._requests_polled = 0.0
        #: Table oid -> the converters' generation its codec was last refreshed for.
        self.codecs_generation: dict[int, int] = {}

    # -- restore ---------------------------------------------------------------------------

    def restore_parked(self) -> None:
        """Read the parked topic whole: the parked keys, and the requests not answered."""
        parking = self.parking
        if parking is None:
            return
        cfg = self.config
        ensure_topics(
            self.session.admin,
            [cfg.parked_topic_name],
            1,
            replication_factor=cfg.replication_factor,
            config={"cleanup.policy": "compact"},
            timeout_s=15,
        )
        messages = read_topic(self.endpoints.kafka, cfg.parked_topic_name)
        parking.reset()
        self.requests.clear()
        for msg in messages:
            key = msg.key()
            if key is None:
                continue
            if key.startswith(_REQUEST_PREFIX):
                self._fold_request(msg.value())
            else:
                parking.apply(key, msg.value())
        self._requests_at = messages[-1].offset() + 1 if messages else 0
        self.close_requests()
        self.log.info(
            "parked keys restored",
            keys=len(parking.parked),
            pending=sum(r.status == "pending" for r in self.requests.values()),
        )

    def _fold_request(self, value: bytes | None) -> None:
        if value is None:
            return
        try:
            request = Request.decode(value)
        except (ValueError, TypeError):
            return
        if request.translator != CAPTURE:
            return
        known = self.requests.get(request.id)
        if known is None or known.status == "pending":
            self.requests[request.id] = request

    def close_requests(self) -> None:
        if self._request_reader is not None:
            self._request_reader.close()
            self._request_reader = None

    def closing(self) -> None:
        self.close_requests()
        super().closing()

    # -- parking ---------------------------------------------------------------------------

    def park_failed(
        self,
        m: Insert | Update | Delete,
        codec: TableCodec,
        raw: bytes,
        lsn: int,
        exc: CaptureError,
        tx: TxInfo,
        send: Send,
    ) -> int | None:
        """Park the key of a change that did not convert; the records sent, or None when
        it cannot be parked (its key does not convert either: dead-letter it)."""
        if self.parking is None:
            return None
        key = _key_of(codec, m.old if isinstance(m, Delete) else m.new)
        if key is None:
            return None
        table = codec.relation.qualified_name
        self.log.warning(
            "change not converted: its key parked",
            table=table,
            column=getattr(exc, "column", None),
            position=format_lsn(lsn),
            reason=str(exc),
            topic=self.config.dlq_topic,
        )
        return self._park(codec, key, raw, lsn, tx, "capture", str(exc), type(exc).__name__, send)

    def parked_behind(
        self,
        m: Insert | Update | Delete,
        codec: TableCodec,
        raw: bytes,
        lsn: int,
        tx: TxInfo,
        send: Send,
    ) -> int | None:
        """A change of a table with parked (or re-driven) keys: parked behind its key
        (the records sent), skipped as already re-driven (0), or None: not parked."""
        parking = self.parking
        assert parking is not None
        keys = []
        if not isinstance(m, Delete):
            keys.append(_key_of(codec, m.new))
        if not isinstance(m, Insert) and m.old is not None:
            keys.append(_key_of(codec, m.old))
        for key in keys:
            if key is None:
                continue
            ref: Ref = (CAPTURE, codec.topic, ANY_PARTITION, key)
            state = parking.parked.get(ref)
            if state is not None:
                reason = f"key parked since {format_lsn(state.first)}"
                return self._park(codec, key, raw, lsn, tx, STAGE_PARKED, reason, "", send)
            if parking.skipped(ref, lsn):
                return 0
        return None

    def _park(
        self,
        codec: TableCodec,
        key: bytes,
        raw: bytes,
        lsn: int,
        tx: TxInfo,
        stage: str,
        reason: str,
        error: str,
        send: Send,
    ) -> int:
        parking = self.parking
        assert parking is not None
        cfg = self.config
        ref: Ref = (CAPTURE, codec.topic, ANY_PARTITION, key)
        if parking.would_pass_bound(ref):
            raise CaptureError(
                f"capture cannot park one more key of {codec.topic} (at {format_lsn(lsn)}): "
                f"{len(parking.parked)} keys are parked, the bound max_parked_keys; re-drive "
                "them (bizevents capture redrive) or raise the bound"
            )
        table = codec.relation.qualified_name
        counted = (table, "park" if stage != STAGE_PARKED else STAGE_PARKED)
        self.stats.conversion_errors[counted] = self.stats.conversion_errors.get(counted, 0) + 1
        context = json.dumps(context_record(codec, lsn, tx), separators=(",", ":"))
        headers: list[tuple[str, str | bytes | None]] = [
            (HEADER_DLQ_STAGE, stage.encode()),
            (HEADER_DLQ_REASON, reason.encode()),
            (HEADER_DLQ_ERROR, error.encode()),
            (HEADER_SOURCE_TOPIC, codec.topic.encode()),
            (HEADER_SOURCE_POSITION, format_lsn(lsn).encode()),
            ("bizevents.capture.table", table.encode()),
            ("bizevents.capture.format", b"pgoutput"),
            (HEADER_CAPTURE_CONTEXT, context.encode()),
            (PARKED_HEADER, b"1"),
        ]
        send(cfg.dlq_topic, key, raw, headers=headers)
        newly = ref not in parking.parked
        record = parking.park(ref, lsn, stage, reason)
        if not newly:
            # The dead-letter topic is the key's queue; its state record says since
            # when it is parked (a record per change behind it would only slow the
            # requests that follow on the same topic down).
            return 1
        send(cfg.parked_topic_name, ref_key(ref), record)
        return 2

    # -- re-drive --------------------------------------------------------------------------

    def carry_out_requests(self) -> None:
        """Carry out the re-drive requests that arrived (at most every half second);
        called between two transactions of the stream, nothing else running."""
        if self.parking is None:
            return
        now = time.monotonic()
        if now - self._requests_polled < _POLL_EVERY_S:
            return
        self._requests_polled = now
        reader = self._request_reader
        if reader is None:
            reader = self._request_reader = Consumer(
                {
                    **self.endpoints.kafka,
                    "group.id": "bizevents-capture-parked-follower",
                    "enable.auto.commit": False,
                }
            )
            reader.assign([TopicPartition(self.config.parked_topic_name, 0, self._requests_at)])
        for msg in reader.consume(500, timeout=0):
            key = msg.key()
            if msg.error() is None and key is not None and key.startswith(_REQUEST_PREFIX):
                self._fold_request(msg.value())
        for request in [r for r in self.requests.values() if r.status == "pending"]:
            status, message = self.redrive(request)
            self._answer(request, status, message)

    def _answer(self, request: Request, status: Any, message: str) -> None:
        answer = replace(request, status=status, message=message)
        self.requests[request.id] = answer
        self.log.info(
            "re-drive request answered", request=request.id, status=status, message=message
        )
        self._write_acknowledged(
            [(self.config.parked_topic_name, request.record_key(), answer.record())]
        )

    def _write_acknowledged(
        self, records: Sequence[tuple[str, bytes | None, bytes | None]]
    ) -> None:
        """Produce ``records`` and wait until Kafka acknowledged them (and all before)."""
        tracker = self.session.tracker
        tx = tracker.begin(None)
        for topic, key, value in records:
            produce(self.session.producer, topic, value, key, on_delivery=tx.ack)
            if self.incremental is not None:
                self.incremental.supersede(topic, key)
        tx.pending += len(records)
        tracker.in_flight += len(records)
        # At no position: the slot's confirmation does not wait for these.
        tracker.commit(tx, 0)
        self.wait_acknowledged()

    def redrive(self, request: Request) -> tuple[str, str]:
        """Re-decode the key's parked changes, write them in order, unpark the key."""
        parking = self.parking
        assert parking is not None
        ref = request.ref
        state = parking.parked.get(ref)
        if state is None:
            return "refused", "the key is not parked"
        self.wait_acknowledged()  # every parked change is on the dead-letter topic now
        changes = parked_changes(
            read_topic(self.endpoints.kafka, self.config.dlq_topic), ref, state.first
        )
        if not changes or changes[-1].lsn < state.last:
            return "failed", (
                f"the dead-letter topic {self.config.dlq_topic} does not hold the key's parked "
                f"changes up to {format_lsn(state.last)}; the key stays parked"
            )
        records: list[tuple[str, bytes | None, bytes | None]] = []
        codecs: dict[str, TableCodec] = {}
        now_ms = int(time.time() * 1000)
        for change in changes:
            try:
                records += self._redecode(change, codecs, now_ms)
            except (CaptureError, ValueError, KeyError, TypeError) as exc:
                reason = f"at {format_lsn(change.lsn)}: {exc}"
                again = parking.failed_again(ref, reason)
                if again is not None:
                    self._write_acknowledged([(self.config.parked_topic_name, ref_key(ref), again)])
                return "failed", (
                    f"the parked change {reason} still does not convert; nothing was written, "
                    "the key stays parked with this reason"
                )
        self._write_acknowledged(records)
        how = f"redriven by capture (request {request.id})"
        record = parking.unpark(ref, changes[-1].lsn, how)
        self._write_acknowledged([(self.config.parked_topic_name, ref_key(ref), record)])
        return "done", (
            f"{len(changes)} parked changes of {ref[1]} key {ref[3].hex()} re-decoded and "
            f"written up to {format_lsn(changes[-1].lsn)}"
        )

    def _redecode(
        self, change: ParkedChange, codecs: dict[str, TableCodec], now_ms: int
    ) -> list[tuple[str, bytes | None, bytes | None]]:
        """The technical records of one parked change, decoded with the code run now."""
        context = change.context
        shape = json.dumps([context["relation"], context["key"], context["key_nullable"]])
        codec = codecs.get(shape)
        relation = relation_of(context)
        if codec is None:
            codec = codecs[shape] = TableCodec(
                server=self.config.server,
                database=self.database,
                topic=self.topic(relation),
                relation=relation,
                key_names=[str(k) for k in context["key"]],
                types=self.types,
                keep=self.config.column_filter(relation.qualified_name).keeps,
                key_nullable=bool(context["key_nullable"]),
            )
            self.register(codec, relation.qualified_name)
        cache = RelationCache()
        cache.put(relation)
        m = PgOutputDecoder(1, cache).decode(change.raw)
        if not isinstance(m, Insert | Update | Delete):
            raise ValueError(f"a parked record holds a {type(m).__name__}, not a row change")
        xid = context.get("xid")
        blocks = NoBlocks()  # no transaction block: its END record did not count it
        blocks.start(int(xid or 0), 0, int(context["commit_ms"]), now_ms)
        src = codec.source(
            int(context["commit_ms"]), int(context["commit_us"]), "false", xid
        ).with_long(change.lsn)
        out: list[tuple[str, bytes | None, bytes | None]] = []

        def collect(topic: str, key: bytes | None, value: bytes | None) -> None:
            out.append((topic, key, value))

        self.row_change(m, codec, src, blocks.stamp, collect)
        return out

    def row_change(
        self,
        m: Insert | Update | Delete,
        codec: TableCodec,
        src: Any,
        stamp: Callable[[str], bytes],
        send: Callable[..., None],
    ) -> int:
        raise NotImplementedError  # the stream's (bizevents.capture.stream.Streaming)


def _key_of(codec: TableCodec, values: Any) -> bytes | None:
    try:
        return codec.key(values)
    except CaptureError:
        return None


# -- the command's side (``bizevents capture redrive``) ----------------------------------------


def parked_keys(kafka: dict[str, Any], parked_topic: str) -> tuple[ParkedKeys, int]:
    """The parked keys the parked topic holds now, and the offset after its last record."""
    messages = read_topic(kafka, parked_topic)
    keys = ParkedKeys()
    for msg in messages:
        key = msg.key()
        if key is not None and not key.startswith(_REQUEST_PREFIX):
            keys.apply(key, msg.value())
    return keys, (messages[-1].offset() + 1 if messages else 0)


def ask_redrive(
    kafka: dict[str, Any], parked_topic: str, key_hex: str | None, timeout_s: float
) -> list[Request]:
    """Ask the running capture to re-drive one parked key (its hex, as the parked topic
    and the dead-letter records name it), or every parked key (``None``); wait for the
    answers. A key that is not parked, or no answer in time: :class:`CaptureError`."""
    import uuid

    from confluent_kafka import Producer

    keys, position = parked_keys(kafka, parked_topic)
    refs = [r for r in keys.parked if r[0] == CAPTURE and key_hex in (None, r[3].hex())]
    if not refs:
        what = "no key is parked" if key_hex is None else f"key {key_hex} is not parked"
        raise CaptureError(f"{what} in {parked_topic}: nothing to re-drive")
    requests = [
        Request(uuid.uuid4().hex, "redrive", CAPTURE, topic, partition, key.hex())
        for _, topic, partition, key in refs
    ]
    producer = Producer(kafka)
    for request in requests:
        producer.produce(
            parked_topic, key=request.record_key(), value=request.record(), partition=0
        )
    if producer.flush(30):
        raise CaptureError(f"the re-drive request could not be written to {parked_topic} in 30 s")
    wanted = {r.id for r in requests}
    deadline = time.monotonic() + timeout_s
    while True:
        answers: dict[str, Request] = {}
        for msg in read_topic(kafka, parked_topic):
            key = msg.key()
            value = msg.value()
            if msg.offset() < position or key is None or value is None:
                continue
            if not key.startswith(_REQUEST_PREFIX):
                continue
            try:
                answer = Request.decode(value)
            except (ValueError, TypeError):
                continue
            if answer.id in wanted and answer.status != "pending":
                answers[answer.id] = answer
        if len(answers) == len(wanted):
            return [answers[r.id] for r in requests]
        if time.monotonic() > deadline:
            raise CaptureError(
                f"no capture answered within {timeout_s:.0f} s: is `bizevents capture postgres` "
                f'running with on_conversion_error = "park"? The request stays in {parked_topic} '
                "and the capture carries it out when it runs"
            )
        time.sleep(0.3)
