"""Signals: what an operator asks a running capture to do, as Debezium's signals.

A signal has an ``id``, a ``type`` and JSON ``data``, and reaches capture in one of two
ways, read by the stream's reader between transactions:

- a row inserted into the **signal table** in the source database (``signal_table``,
  Debezium's ``debezium_signal``): it travels through the log like any change, so it
  takes effect at its place in the stream;
- a record on the **signal topic** in Kafka (``<server>.capture.signals``), which
  ``bizevents capture snapshot`` writes.

Types (Debezium's names): ``execute-snapshot`` (``data``: ``{"data-collections":
[tables], "type": "incremental", "additional-conditions": [{"data-collection": table,
"filter": "<condition>"}]}``), ``pause-snapshot``, ``resume-snapshot``,
``stop-snapshot`` (``data-collections`` optional: all when absent). A filter is a
condition of :mod:`bizevents.capture.core.filters` (data, never SQL text).

Parsing is pure, and total: :func:`read_signal` and :meth:`SignalTopic.poll` never
raise. A signal is read within bounds on its size and its JSON's nesting; one that
cannot be read or carried out is refused with one sentence and capture goes on.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from bizevents.capture.core.filters import FilterError, condition_text, parse_condition
from bizevents.plumbing.kafka import produce

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_SIGNAL_BYTES",
    "SIGNAL_TYPES",
    "Signal",
    "SignalError",
    "SignalTopic",
    "bounded_json",
    "new_signal",
    "parse_signal",
    "read_signal",
    "shown",
    "signal_table_ddl",
]

SIGNAL_TYPES: Final = ("execute-snapshot", "pause-snapshot", "resume-snapshot", "stop-snapshot")
_TABLE: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*\.[A-Za-z_][A-Za-z0-9_$]*$")
#: The most a signal's data, or a signal topic record's value, may hold (bytes).
MAX_SIGNAL_BYTES: Final = 256 * 1024
#: How deep a signal's JSON may nest (a signal needs 4 levels).
MAX_JSON_DEPTH: Final = 16
#: The longest signal id and table name taken.
_MAX_ID: Final = 200
#: A JSON string, whose brackets are text, not nesting (one not closed runs to the end).
_JSON_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"?', re.DOTALL)


class SignalError(ValueError):
    """A signal that cannot be carried out; its message is the sentence to show."""


@dataclass(frozen=True, slots=True)
class Signal:
    """One signal, checked for shape (not yet against what capture captures)."""

    id: str
    type: str
    #: The tables it names (``schema.table``); empty: every snapshot (pause, resume, stop).
    tables: tuple[str, ...] = ()
    #: ``table -> SQL condition`` the snapshot's rows must meet.
    conditions: tuple[tuple[str, str], ...] = ()

    def condition(self, table: str) -> str | None:
        return next((c for t, c in self.conditions if t == table), None)

    def to_row(self) -> tuple[str, str, str]:
        """``(id, type, data)`` as a signal table row or a signal topic record holds it."""
        data: dict[str, Any] = {}
        if self.tables:
            data["data-collections"] = list(self.tables)
        if self.type == "execute-snapshot":
            data["type"] = "incremental"
        if self.conditions:
            data["additional-conditions"] = [
                {"data-collection": t, "filter": c} for t, c in self.conditions
            ]
        return self.id, self.type, json.dumps(data)


def shown(value: Any) -> str:
    """A field of a signal as a sentence quotes it: its first 60 characters."""
    text = value if isinstance(value, str) else repr(value)
    return repr(text if len(text) <= 60 else text[:60] + "...")


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    return "" if value is None else str(value)


def bounded_json(text: str | bytes, what: str) -> Any:
    """JSON text read only within the bounds (size, nesting), so that no text can make
    the reader recurse or allocate without end; :class:`SignalError` names ``what``."""
    if len(text) > MAX_SIGNAL_BYTES:
        raise SignalError(f"{what} is larger than {MAX_SIGNAL_BYTES} bytes")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise SignalError(f"{what} is not UTF-8 text") from None
    depth = deepest = 0
    for bracket in _JSON_STRING.sub("", text):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif bracket in "]}":
            depth -= 1
    if deepest > MAX_JSON_DEPTH:
        raise SignalError(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except ValueError as exc:
        reason = str(exc).splitlines()[0][:100] if str(exc) else type(exc).__name__
        raise SignalError(f"{what} is not JSON ({reason})") from None


def read_signal(id_: Any, type_: Any, data: Any) -> Signal | SignalError:
    """:func:`parse_signal`, or the sentence that refuses the signal: never raises."""
    try:
        return parse_signal(id_, type_, data)
    except SignalError as exc:
        return exc
    except Exception as exc:  # no signal may stop capture, whatever it holds
        return SignalError(
            f"signal {shown(_text(id_))} cannot be read ({type(exc).__name__}); refused"
        )


def row_key(id_: Any) -> str:
    """The signal table's row id as the ledger keeps it: bounded, so a row of any id
    cannot swell the ledger (a longer id is kept as its digest)."""
    sid = _text(id_)
    if len(sid) <= _MAX_ID:
        return sid
    return "sha256:" + hashlib.sha256(sid.encode("utf-8", "surrogatepass")).hexdigest()


def parse_signal(id_: Any, type_: Any, data: Any) -> Signal:
    """A signal from its three fields as stored (``data`` JSON text, a JSON object, or
    ``None``)."""
    sid = _text(id_)
    if len(sid) > _MAX_ID:
        raise SignalError(f"signal {shown(sid)}: its id is longer than {_MAX_ID} characters")
    kind = _text(type_)
    if kind not in SIGNAL_TYPES:
        raise SignalError(
            f"signal {sid!r} has type {shown(kind)}; capture knows {', '.join(SIGNAL_TYPES)}"
        )
    if isinstance(data, dict):
        body: Any = data
    elif data is None or data in ("", b""):
        body = {}
    elif isinstance(data, str | bytes):
        body = bounded_json(data, f"signal {sid!r}: its data")
    else:
        raise SignalError(f"signal {sid!r}: its data is not JSON text")
    if not isinstance(body, dict):
        raise SignalError(f"signal {sid!r}: its data must be a JSON object")
    tables = body.get("data-collections") or []
    if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
        raise SignalError(f"signal {sid!r}: data-collections must be a list of table names")
    for t in tables:
        if len(t) > _MAX_ID or not _TABLE.match(t):
            raise SignalError(f"signal {sid!r}: {shown(t)} is not a table written schema.table")
    if kind == "execute-snapshot":
        if not tables:
            raise SignalError(f"signal {sid!r}: execute-snapshot names no table")
        snapshot_type = str(body.get("type") or "incremental").lower()
        if snapshot_type != "incremental":
            raise SignalError(
                f"signal {sid!r}: snapshot type {shown(snapshot_type)} is not offered; "
                "only incremental snapshots are"
            )
    items = body.get("additional-conditions") or []
    if not isinstance(items, list):
        items = [items]
    conditions = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("filter"), str):
            raise SignalError(
                f"signal {sid!r}: each additional condition is "
                '{"data-collection": "schema.table", "filter": "<condition>"}'
            )
        table = str(item.get("data-collection") or "")
        if table not in tables:
            raise SignalError(
                f"signal {sid!r}: a condition names {shown(table)}, which data-collections does not"
            )
        try:
            where = condition_text(parse_condition(item["filter"]))
        except FilterError as exc:
            raise SignalError(
                f"signal {sid!r}: the condition {shown(item['filter'])} on {table} does not "
                f"parse: {exc}"
            ) from None
        conditions.append((table, where))
    return Signal(sid, kind, tuple(tables), tuple(conditions))


def new_signal(kind: str, tables: tuple[str, ...] = (), where: str | None = None) -> Signal:
    """A signal with a fresh id (``where`` applies to every table; :class:`FilterError`
    when it is not a condition)."""
    text = condition_text(parse_condition(where)) if where is not None else None
    conditions = tuple((t, text) for t in tables) if text is not None else ()
    return Signal(uuid.uuid4().hex, kind, tables, conditions)


def signal_table_ddl(table: str, mysql: bool) -> str:
    """The statement that creates the signal table (Debezium's columns)."""
    if mysql:
        return (
            f"CREATE TABLE {table} (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, "
            "data VARCHAR(2048) NULL)"
        )
    return (
        f"CREATE TABLE {table} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, "
        "data varchar(2048))"
    )


class SignalTopic:
    """The Kafka signal topic: key = the signal's id, value = ``{"type", "data"}``."""

    def __init__(self, kafka: dict[str, Any], topic: str, server: str) -> None:
        self.kafka = kafka
        self.topic = topic
        self.group = f"bizevents-capture-signals-{server}"
        self._consumer: Consumer | None = None

    @staticmethod
    def record(signal: Signal) -> tuple[bytes, bytes]:
        """The signal's record: ``(key, value)``."""
        sid, kind, data = signal.to_row()
        return sid.encode(), json.dumps({"type": kind, "data": data}).encode()

    def send(self, producer: Producer, signal: Signal, on_delivery: Any = None) -> None:
        key, value = self.record(signal)
        produce(producer, self.topic, value, key, on_delivery=on_delivery)

    def poll(self, start: int | None, wait_s: float = 0) -> list[tuple[int, Signal | SignalError]]:
        """Signals that arrived since the last call, with the offset after each (never
        waits, unless ``wait_s``: then every signal sent before the call, waiting up to
        ``wait_s`` for them). The first call reads from ``start`` (``None``: the topic's
        beginning); where to go on from is capture's to keep (in its ledger), not a
        consumer group's."""
        if self._consumer is None:
            self._consumer = Consumer(
                {**self.kafka, "group.id": self.group, "enable.auto.commit": False}
            )
            self._consumer.assign(
                [TopicPartition(self.topic, 0, OFFSET_BEGINNING if start is None else start)]
            )
        consumer = self._consumer
        deadline = time.monotonic() + wait_s
        position = end = 0
        if wait_s:
            with suppress(KafkaException):
                low, end = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, 0), timeout=wait_s
                )
                position = consumer.position([TopicPartition(self.topic, 0)])[0].offset
                if position < 0:  # nothing fetched yet: where the first call starts
                    position = max(start or 0, low)
        out: list[tuple[int, Signal | SignalError]] = []
        while True:
            for msg in consumer.consume(100, timeout=0.1 if position < end else 0):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        bad = SignalError(f"the signal topic {self.topic}: {err.str()}")
                        out.append((-1, bad))
                    continue
                position = (msg.offset() or 0) + 1
                out.append((position, self.read(msg.key(), msg.value(), msg.offset())))
            if position >= end or time.monotonic() >= deadline:
                return out

    def read(
        self, key: bytes | None, value: bytes | None, offset: int | None
    ) -> Signal | SignalError:
        """The signal a record holds, or the sentence that refuses it: never raises."""
        record = f"the record at offset {offset} of {self.topic}"
        try:
            body = bounded_json(value or b"{}", record)
            if not isinstance(body, dict):
                raise SignalError(
                    f'{record} is not a signal ({{"type": ..., "data": ...}} keyed by its id)'
                )
            return read_signal(key, body.get("type"), body.get("data"))
        except SignalError as exc:
            return exc
        except Exception as exc:  # no record may stop capture, whatever it holds
            return SignalError(f"{record} cannot be read ({type(exc).__name__}); refused")

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
