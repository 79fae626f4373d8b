"""Capture quarantine, the part both sources share: park a key, follow requests, re-drive.

With ``on_conversion_error = "park"``, a change whose values do not convert goes to the
capture dead-letter topic as the source gave it (PostgreSQL: the raw pgoutput message;
MySQL/MariaDB: the row's values as the binlog library decoded them), with what
re-decoding it needs later in a JSON header (:data:`HEADER_CAPTURE_CONTEXT`: the
table's layout at the time, the key columns, the position and the transaction),
marked parked, and its technical key is parked: the key's later changes go to the
dead-letter topic too, parked behind it, in order, and none reaches the technical
topic. Other keys flow on.

The parked keys live in a compacted topic (``<server>.capture.parked``), restored at
start. ``bizevents capture redrive`` and ``bizevents capture discard`` write a request
there, and the running capture carries it out between two transactions of its stream,
in the thread that reads the log: it waits until Kafka acknowledged everything sent,
reads the key's parked changes back, re-decodes them with the code it runs now (a
converter registered since), writes them to the technical topic in order, waits for
their acknowledgement, then unparks the key (a discard unparks it with the reason,
writing nothing). No live change of the key is read in between, so none can overtake
a re-driven one (docs/parking.md, "Capture quarantine").

A capture holds a :class:`Quarantine` as a part, made with the source's
:class:`ParkedSource`: how a position reads (an LSN, a binlog file, position and row)
and how a parked change is decoded again; what the quarantine asks of the capture is
:class:`QuarantineHost`. Every position is an integer that grows with the log
(``context["position"]``), so the parked-key state (:mod:`bizevents.plumbing.parking`)
is the same for both.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, Protocol

from confluent_kafka import Consumer, TopicPartition

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.capture import CaptureEndpoints, Session
from bizevents.capture.core.incremental import Incremental
from bizevents.capture.core.routing import Router
from bizevents.capture.exceptions import CaptureError
from bizevents.capture.metrics import CaptureStats
from bizevents.contracts.business import (
    HEADER_DLQ_ERROR,
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    HEADER_SOURCE_POSITION,
    HEADER_SOURCE_TOPIC,
)
from bizevents.plumbing.kafka import ensure_topics, produce
from bizevents.plumbing.parking import (
    PARKED_HEADER,
    STAGE_PARKED,
    Parked,
    ParkedKeys,
    Ref,
    Request,
    ref_key,
)
from bizevents.plumbing.parkingio import REQUEST_PREFIX, ask, parked_keys, read_to_end

__all__ = [
    "ANY_PARTITION",
    "CAPTURE",
    "HEADER_CAPTURE_CONTEXT",
    "ParkedChange",
    "ParkedSource",
    "Quarantine",
    "QuarantineHost",
    "Record",
    "ToPark",
    "ask_capture",
    "parked_changes",
    "parked_keys",
]

#: The dead-letter header with what a parked change needs to be re-decoded (JSON).
HEADER_CAPTURE_CONTEXT: Final = "bizevents.capture.context"
#: The name in capture's refs of the parked-key state (the worker's are translator names).
CAPTURE: Final = "capture"
#: Capture parks a technical key whatever partition it is produced to.
ANY_PARTITION: Final = -1
_POLL_EVERY_S: Final = 0.5

#: A technical record: (topic, key, value); a None value is a tombstone.
Record = tuple[str, bytes | None, bytes | None]
Send = Callable[..., None]


@dataclass(frozen=True, slots=True)
class ParkedChange:
    """A parked change as the dead-letter topic holds it."""

    raw: bytes
    context: dict[str, Any]
    position: int
    reason: str
    #: ``capture`` for the change that parked its key, ``parked`` for one behind it
    stage: str = ""


@dataclass(frozen=True, slots=True)
class ToPark:
    """A change about to be parked: its table and topic, its record key, the bytes the
    source gave (re-decoded by a re-drive), its position and the context it needs."""

    table: str
    topic: str
    key: bytes
    raw: bytes
    position: int
    context: dict[str, Any]


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
            position = int(context["position"])
        except (ValueError, TypeError, KeyError):
            continue
        if position < first or position in seen:
            continue
        seen.add(position)
        reason = (headers.get(HEADER_DLQ_REASON) or b"").decode(errors="replace")
        stage = (headers.get(HEADER_DLQ_STAGE) or b"").decode(errors="replace")
        found.append(ParkedChange(msg.value() or b"", context, position, reason, stage))
    return found


class QuarantineHost(Protocol):
    """What the quarantine asks of its capture."""

    config: CaptureConfig
    endpoints: CaptureEndpoints
    stats: CaptureStats
    log: Any
    incremental: Incremental | None
    #: Each technical record's partition (routing by business key).
    router: Router

    @property
    def session(self) -> Session: ...

    def wait_acknowledged(self) -> None: ...


class ParkedSource(Protocol):
    """What a source tells its quarantine."""

    #: The dead-letter records' ``bizevents.capture.format`` (how ``raw`` is written).
    raw_format: str

    def describe(self, position: int) -> str:
        """``position`` as the source's operators read it (an LSN, a binlog place)."""
        ...

    def redecode(self, change: ParkedChange, cache: dict[str, Any]) -> list[Record]:
        """The technical records of one parked change, decoded with the code run now
        (``cache``: codecs built during this re-drive). CaptureError, ValueError,
        KeyError or TypeError: it still does not decode."""
        ...


class Quarantine:
    """A capture's parking, whatever its source: parks keys, restores them, carries
    out re-drive and discard requests. A part of ``capture``; ``source`` says what
    is the source's own."""

    def __init__(self, capture: QuarantineHost, source: ParkedSource) -> None:
        self.capture = capture
        self.source = source
        self.describe = source.describe
        cfg = capture.config
        #: None unless ``on_conversion_error = "park"``.
        self.parking: ParkedKeys | None = (
            ParkedKeys(cfg.max_parked_keys) if cfg.on_conversion_error == "park" else None
        )
        self.requests: dict[str, Request] = {}
        self._requests_at = 0
        self._request_reader: Consumer | None = None
        self._requests_polled = 0.0

    # -- restore ---------------------------------------------------------------------------

    def restore_parked(self) -> None:
        """Read the parked topic whole: the parked keys, and the requests not answered."""
        parking = self.parking
        if parking is None:
            return
        cfg = self.capture.config
        ensure_topics(
            self.capture.session.admin,
            [cfg.parked_topic_name],
            1,
            replication_factor=cfg.replication_factor,
            config={"cleanup.policy": "compact"},
            timeout_s=15,
        )
        messages = read_to_end(self.capture.endpoints.kafka, cfg.parked_topic_name)
        parking.reset()
        self.requests.clear()
        for msg in messages:
            key = msg.key()
            if key is None:
                continue
            if key.startswith(REQUEST_PREFIX):
                self._fold_request(msg.value())
            else:
                parking.apply(key, msg.value())
        self._requests_at = messages[-1].offset() + 1 if messages else 0
        counts = dict.fromkeys(self.capture.stats.parked_keys, 0)
        for _, topic, _, _ in parking.parked:
            self._count(counts, topic, 1)
        self.capture.stats.parked_keys = counts
        self.close_requests()
        self.capture.log.info(
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

    def _table_of(self, topic: str) -> str:
        """The table label of capture's metrics for a technical topic (``schema.table``)."""
        return topic.removeprefix(f"{self.capture.config.prefix}.")

    def _count(self, counts: dict[str, int], topic: str, delta: int) -> None:
        table = self._table_of(topic)
        counts[table] = counts.get(table, 0) + delta

    def close_requests(self) -> None:
        if self._request_reader is not None:
            self._request_reader.close()
            self._request_reader = None

    # -- parking ---------------------------------------------------------------------------

    def park_key(self, change: ToPark, exc: CaptureError, send: Send) -> int:
        """Park the key of a change that did not convert; the records sent."""
        self.capture.log.warning(
            "change not converted: its key parked",
            table=change.table,
            column=getattr(exc, "column", None),
            position=self.describe(change.position),
            reason=str(exc),
            topic=self.capture.config.dlq_topic,
        )
        return self._park(change, "capture", str(exc), type(exc).__name__, send)

    def park_behind(
        self,
        table: str,
        topic: str,
        keys: Iterable[bytes | None],
        raw: Callable[[], bytes],
        position: int,
        context: Callable[[], dict[str, Any]],
        send: Send,
    ) -> int | None:
        """A change of a topic with parked (or re-driven) keys, whose record keys are
        ``keys`` (None: one that does not convert): parked behind its key (the records
        sent), skipped as already re-driven (0), or None: not parked. ``raw`` and
        ``context`` are called only for a change that parks (every change of a table
        with a parked key comes here)."""
        parking = self.parking
        assert parking is not None
        for key in keys:
            if key is None:
                continue
            ref: Ref = (CAPTURE, topic, ANY_PARTITION, key)
            state = parking.parked.get(ref)
            if state is not None:
                reason = f"key parked since {self.describe(state.first)}"
                change = ToPark(table, topic, key, raw(), position, context())
                return self._park(change, STAGE_PARKED, reason, "", send)
            if parking.skipped(ref, position):
                return 0
        return None

    def _park(self, change: ToPark, stage: str, reason: str, error: str, send: Send) -> int:
        parking = self.parking
        assert parking is not None
        cfg = self.capture.config
        table, topic, key, position = change.table, change.topic, change.key, change.position
        ref: Ref = (CAPTURE, topic, ANY_PARTITION, key)
        if parking.would_pass_bound(ref):
            raise CaptureError(
                f"capture cannot park one more key of {topic} (at {self.describe(position)}): "
                f"{len(parking.parked)} keys are parked, the bound max_parked_keys; re-drive "
                "them (bizevents capture redrive) or raise the bound"
            )
        counted = (table, "park" if stage != STAGE_PARKED else STAGE_PARKED)
        self.capture.stats.conversion_errors[counted] = (
            self.capture.stats.conversion_errors.get(counted, 0) + 1
        )
        text = json.dumps({**change.context, "position": position}, separators=(",", ":"))
        headers: list[tuple[str, str | bytes | None]] = [
            (HEADER_DLQ_STAGE, stage.encode()),
            (HEADER_DLQ_REASON, reason.encode()),
            (HEADER_DLQ_ERROR, error.encode()),
            (HEADER_SOURCE_TOPIC, topic.encode()),
            (HEADER_SOURCE_POSITION, self.describe(position).encode()),
            ("bizevents.capture.table", table.encode()),
            ("bizevents.capture.format", self.source.raw_format.encode()),
            (HEADER_CAPTURE_CONTEXT, text.encode()),
            (PARKED_HEADER, b"1"),
        ]
        send(cfg.dlq_topic, key, change.raw, headers=headers)
        newly = ref not in parking.parked
        record = parking.park(ref, position, stage, reason)
        if not newly:
            # The dead-letter topic is the key's queue; its state record says since
            # when it is parked (a record per change behind it would only slow the
            # requests that follow on the same topic down).
            return 1
        send(cfg.parked_topic_name, ref_key(ref), record)
        self._count(self.capture.stats.parked_keys, topic, 1)
        return 2

    # -- requests --------------------------------------------------------------------------

    def carry_out_requests(self) -> None:
        """Carry out the re-drive and discard requests that arrived (at most every half
        second); called between two transactions of the stream, nothing else running."""
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
                    **self.capture.endpoints.kafka,
                    "group.id": "bizevents-capture-parked-follower",
                    "enable.auto.commit": False,
                }
            )
            reader.assign(
                [TopicPartition(self.capture.config.parked_topic_name, 0, self._requests_at)]
            )
        for msg in reader.consume(500, timeout=0):
            key = msg.key()
            if msg.error() is None and key is not None and key.startswith(REQUEST_PREFIX):
                self._fold_request(msg.value())
        for request in [r for r in self.requests.values() if r.status == "pending"]:
            if request.kind == "discard":
                status, message = self.discard(request)
            else:
                status, message = self.redrive(request)
            self._answer(request, status, message)

    def _answer(self, request: Request, status: Any, message: str) -> None:
        answer = replace(request, status=status, message=message)
        self.requests[request.id] = answer
        self.capture.log.info(
            "parked-key request answered",
            request=request.id,
            kind=request.kind,
            status=status,
            message=message,
        )
        self._write_acknowledged(
            [(self.capture.config.parked_topic_name, request.record_key(), answer.record())]
        )

    def _write_acknowledged(self, records: Sequence[Record]) -> None:
        """Produce ``records`` and wait until Kafka acknowledged them (and all before)."""
        tracker = self.capture.session.tracker
        tx = tracker.begin(None)
        route = self.capture.router.partition
        for topic, key, value in records:
            produce(
                self.capture.session.producer,
                topic,
                value,
                key,
                partition=route(topic, key),
                on_delivery=tx.ack,
            )
            if self.capture.incremental is not None:
                self.capture.incremental.supersede(topic, key)
        tx.pending += len(records)
        tracker.in_flight += len(records)
        # At no position: the log's confirmation does not wait for these.
        tracker.commit(tx, 0)
        self.capture.wait_acknowledged()

    def _not_parked(self, ref: Ref) -> tuple[str, str]:
        """The answer to a request for a key that is not parked (any more)."""
        assert self.parking is not None
        through = self.parking.through.get(ref)
        if through is None:
            return "refused", "the key is not parked"
        # Unparked by this request before a crash left it unanswered, or by another.
        return "done", (
            f"the key is no longer parked: its changes up to {self.describe(through)} were "
            "re-driven or discarded before"
        )

    def _parked(self, ref: Ref) -> tuple[ParkedKeys, Parked] | None:
        """The parked keys and ``ref``'s state, every change parked so far acknowledged
        (on the dead-letter topic, counted in the state); None: the key is not parked."""
        parking = self.parking
        assert parking is not None
        state = parking.parked.get(ref)
        if state is None:
            return None
        self.capture.wait_acknowledged()
        return parking, state

    def _unpark(self, ref: Ref, through: int, how: str) -> None:
        """Unpark ``ref`` (its changes up to ``through`` dealt with, ``how``), the state
        record acknowledged."""
        assert self.parking is not None
        record = self.parking.unpark(ref, through, how)
        self._write_acknowledged([(self.capture.config.parked_topic_name, ref_key(ref), record)])
        self._count(self.capture.stats.parked_keys, ref[1], -1)

    def redrive(self, request: Request) -> tuple[str, str]:
        """Re-decode the key's parked changes, write them in order, unpark the key."""
        ref = request.ref
        found = self._parked(ref)
        if found is None:
            return self._not_parked(ref)
        parking, state = found
        cfg = self.capture.config
        changes = parked_changes(
            read_to_end(self.capture.endpoints.kafka, cfg.dlq_topic),
            ref,
            state.first,
        )
        if not changes or changes[-1].position < state.last:
            return "failed", (
                f"the dead-letter topic {cfg.dlq_topic} does not hold the key's parked "
                f"changes up to {self.describe(state.last)}; the key stays parked"
            )
        records: list[Record] = []
        cache: dict[str, Any] = {}
        for change in changes:
            try:
                records += self.source.redecode(change, cache)
            except (CaptureError, ValueError, KeyError, TypeError) as exc:
                reason = f"at {self.describe(change.position)}: {exc}"
                again = parking.failed_again(ref, state.first, reason)
                if again is not None:
                    self._write_acknowledged([(cfg.parked_topic_name, ref_key(ref), again)])
                return "failed", (
                    f"the parked change {reason} still does not convert; nothing was written, "
                    "the key stays parked with this reason"
                )
        self._write_acknowledged(records)
        self._unpark(ref, changes[-1].position, f"redriven by capture (request {request.id})")
        self._count(self.capture.stats.redriven, ref[1], len(changes))
        return "done", (
            f"{len(changes)} parked changes of {ref[1]} key {ref[3].hex()} re-decoded and "
            f"written up to {self.describe(changes[-1].position)}"
        )

    def discard(self, request: Request) -> tuple[str, str]:
        """Drop the key's parked changes (they stay on the dead-letter topic, for the
        record) and unpark it, the reason in its state record."""
        ref = request.ref
        found = self._parked(ref)
        if found is None:
            return self._not_parked(ref)
        count, through = found[1].count, found[1].last
        self._unpark(ref, through, f"discarded (request {request.id}): {request.reason}")
        self._count(self.capture.stats.discarded_keys, ref[1], 1)
        return "done", (
            f"{count} parked changes of {ref[1]} key {ref[3].hex()} up to "
            f"{self.describe(through)} discarded: {request.reason}"
        )


# -- the commands' side (``bizevents capture redrive | discard | parked``) ------------------


def ask_capture(
    kafka: dict[str, Any],
    parked_topic: str,
    kind: Literal["redrive", "discard"],
    key_hex: str | None,
    timeout_s: float,
    reason: str = "",
) -> list[Request]:
    """Ask the running capture to re-drive (or discard, with ``reason``) one parked key
    (its hex, as the parked topic and the dead-letter records name it), or every parked
    key (``None``); wait for the answers. A key that is not parked, or no answer in
    time: :class:`CaptureError`."""
    keys, position = parked_keys(kafka, parked_topic)
    refs = [r for r in keys.parked if r[0] == CAPTURE and key_hex in (None, r[3].hex())]
    if not refs:
        what = "no key is parked" if key_hex is None else f"key {key_hex} is not parked"
        raise CaptureError(f"{what} in {parked_topic}: nothing to {kind}")
    requests = [
        Request(uuid.uuid4().hex, kind, CAPTURE, topic, partition, key.hex(), reason=reason)
        for _, topic, partition, key in refs
    ]
    answers = ask(kafka, parked_topic, requests, position, timeout_s)
    if answers is None:
        raise CaptureError(
            f"no capture answered within {timeout_s:.0f} s: is `bizevents capture postgres` "
            f'(or `mysql`) running with on_conversion_error = "park"? The request stays in '
            f"{parked_topic} and the capture carries it out when it runs"
        )
    return answers
