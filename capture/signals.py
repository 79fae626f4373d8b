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
"filter": "<SQL condition>"}]}``), ``pause-snapshot``, ``resume-snapshot``,
``stop-snapshot`` (``data-collections`` optional: all when absent). Parsing is pure;
a signal that cannot be carried out is refused with one sentence and capture goes on.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from bizevents.plumbing.kafka import produce

__all__ = [
    "SIGNAL_TYPES",
    "Signal",
    "SignalError",
    "SignalTopic",
    "parse_signal",
    "signal_table_ddl",
]

SIGNAL_TYPES: Final = ("execute-snapshot", "pause-snapshot", "resume-snapshot", "stop-snapshot")
_TABLE: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*\.[A-Za-z_][A-Za-z0-9_$]*$")


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


def parse_signal(id_: Any, type_: Any, data: Any) -> Signal:
    """A signal from its three fields as stored (``data`` JSON text or ``None``)."""
    sid = str(id_) if id_ is not None else ""
    kind = str(type_ or "")
    if kind not in SIGNAL_TYPES:
        raise SignalError(
            f"signal {sid!r} has type {kind!r}; capture knows {', '.join(SIGNAL_TYPES)}"
        )
    try:
        body = json.loads(data) if data not in (None, "") else {}
    except (TypeError, ValueError) as exc:
        raise SignalError(f"signal {sid!r}: its data is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise SignalError(f"signal {sid!r}: its data must be a JSON object")
    tables = body.get("data-collections") or []
    if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
        raise SignalError(f"signal {sid!r}: data-collections must be a list of table names")
    for t in tables:
        if not _TABLE.match(t):
            raise SignalError(f"signal {sid!r}: {t!r} is not a table written schema.table")
    if kind == "execute-snapshot":
        if not tables:
            raise SignalError(f"signal {sid!r}: execute-snapshot names no table")
        snapshot_type = str(body.get("type") or "incremental").lower()
        if snapshot_type != "incremental":
            raise SignalError(
                f"signal {sid!r}: snapshot type {snapshot_type!r} is not offered; "
                "only incremental snapshots are"
            )
    conditions = []
    for item in body.get("additional-conditions") or []:
        if not isinstance(item, dict) or not isinstance(item.get("filter"), str):
            raise SignalError(
                f"signal {sid!r}: each additional condition is "
                '{"data-collection": "schema.table", "filter": "<SQL condition>"}'
            )
        table = str(item.get("data-collection") or "")
        if table not in tables:
            raise SignalError(
                f"signal {sid!r}: a condition names {table!r}, which data-collections does not"
            )
        conditions.append((table, item["filter"]))
    return Signal(sid, kind, tuple(tables), tuple(conditions))


def new_signal(kind: str, tables: tuple[str, ...] = (), where: str | None = None) -> Signal:
    """A signal with a fresh id (``where`` applies to every table)."""
    conditions = tuple((t, where) for t in tables) if where is not None else ()
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

    def send(self, producer: Producer, signal: Signal, on_delivery: Any = None) -> None:
        sid, kind, data = signal.to_row()
        value = json.dumps({"type": kind, "data": data}).encode()
        produce(producer, self.topic, value, sid.encode(), on_delivery=on_delivery)

    def poll(self, start: int | None) -> list[tuple[int, Signal | SignalError]]:
        """Signals that arrived since the last call, with the offset after each (never
        waits). The first call reads from ``start`` (``None``: the topic's beginning);
        where to go on from is capture's to keep (in its ledger), not a consumer group's.
        """
        if self._consumer is None:
            self._consumer = Consumer(
                {**self.kafka, "group.id": self.group, "enable.auto.commit": False}
            )
            self._consumer.assign(
                [TopicPartition(self.topic, 0, OFFSET_BEGINNING if start is None else start)]
            )
        out: list[tuple[int, Signal | SignalError]] = []
        for msg in self._consumer.consume(100, timeout=0):
            after = (msg.offset() or 0) + 1
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    out.append((-1, SignalError(f"the signal topic {self.topic}: {err.str()}")))
                continue
            key = msg.key()
            try:
                body = json.loads(msg.value() or b"{}")
                sig = parse_signal(
                    key.decode(errors="replace") if key else None,
                    body.get("type"),
                    body.get("data"),
                )
                out.append((after, sig))
            except SignalError as exc:
                out.append((after, exc))
            except (ValueError, AttributeError):
                bad = SignalError(
                    f"a record at offset {msg.offset()} of {self.topic} is not a signal "
                    '({"type": ..., "data": ...} keyed by its id)'
                )
                out.append((after, bad))
        return out

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
