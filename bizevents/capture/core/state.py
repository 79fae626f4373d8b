"""Capture's state in a compacted Kafka topic, so that it moves with the service.

One topic per capture (``<server>.capture.offsets`` by default, one partition,
``cleanup.policy=compact``): each record's key names one piece of state, the last record
of a key is its value (a null value forgets it). Two pieces live there:

- MySQL's binlog position, key ``{"server": ...}`` (the key Kafka Connect would use);
- the snapshot ledger of every source, key ``{"server": ..., "snapshots": <source>}``
  (the slot's name on PostgreSQL, ``binlog`` on MySQL): whether the initial snapshot
  reached Kafka, which tables have all their rows in their topics, and the incremental
  snapshots under way with their last acknowledged chunk (:class:`Ledger`).

Every record is written only after Kafka acknowledged every event it speaks for, so
a capture started on another machine (an empty state folder) against the same Kafka
resumes where this one stopped, without a second snapshot.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from confluent_kafka import Producer

from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import ensure_topics, produce, read_latest

__all__ = ["SIGNAL_ROWS_KEPT", "Ledger", "Pending", "StateStore"]

#: How many of the signal table's rows the ledger remembers as carried out.
SIGNAL_ROWS_KEPT: Final = 1000


def _key(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, separators=(", ", ": ")).encode()


class StateStore:
    """Reads and writes capture's records in its compacted state topic."""

    def __init__(self, kafka: dict[str, Any], topic: str, server: str) -> None:
        self.kafka = kafka
        self.topic = topic
        self.server = server

    def position_key(self) -> bytes:
        """The key of MySQL's binlog position."""
        return _key({"server": self.server})

    def ledger_key(self, source: str) -> bytes:
        """The key of a source's snapshot ledger."""
        return _key({"server": self.server, "snapshots": source})

    def ensure(self, admin: Any, replication_factor: int = -1) -> None:
        """Create the topic (one partition, compacted) if it does not exist."""
        ensure_topics(
            admin,
            [self.topic],
            1,
            replication_factor=replication_factor,
            config={"cleanup.policy": "compact"},
            timeout_s=15,
        )

    def read_all(self) -> dict[bytes, dict[str, Any] | None]:
        """The last value of every key (reads the topic to its end)."""
        # The broker answers an empty fetch at once, not after its 500 ms default: a
        # start reads the topic to its end before it captures anything.
        kafka = {**self.kafka, "fetch.wait.max.ms": 10}
        found = read_latest(kafka, self.topic, "bizevents-capture-offsets")
        return {key: None if value is None else json.loads(value) for key, value in found.items()}

    def read(self, key: bytes) -> dict[str, Any] | None:
        """The last value of ``key``, or ``None``."""
        return self.read_all().get(key)

    def write(
        self,
        producer: Producer,
        key: bytes,
        value: dict[str, Any] | None,
        on_delivery: Callable[..., None] | None = None,
    ) -> None:
        """Store ``value`` under ``key`` (acknowledged asynchronously)."""
        body = None if value is None else json.dumps(value).encode()
        produce(producer, self.topic, body, key, on_delivery=on_delivery)

    def write_acknowledged(
        self, producer: Producer, key: bytes, value: dict[str, Any] | None, timeout_s: float = 60
    ) -> None:
        """Store ``value`` and wait until Kafka acknowledged it."""
        outcome: list[Any] = []
        self.write(producer, key, value, on_delivery=lambda err, _msg: outcome.append(err))
        deadline = time.monotonic() + timeout_s
        while not outcome:
            producer.poll(0.1)
            if time.monotonic() > deadline:
                raise TransientError(f"Kafka did not acknowledge the state record in {self.topic}")
        if outcome[0] is not None:
            raise TransientError(f"Kafka did not take the state record: {outcome[0]}")


@dataclass(slots=True)
class Pending:
    """One incremental snapshot of one table under way."""

    #: ``schema.table`` (PostgreSQL) or ``database.table`` (MySQL).
    table: str
    #: The signal's id (``auto`` for a table added to the configuration).
    id: str
    #: A SQL condition the rows must meet (``--where``), or ``None`` for every row.
    where: str | None = None
    #: The key values (as text) of the last row of the last acknowledged chunk.
    after: list[str | None] | None = None
    #: Rows written so far.
    rows: int = 0
    paused: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "id": self.id,
            "where": self.where,
            "after": self.after,
            "rows": self.rows,
            "paused": self.paused,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Pending:
        return cls(
            table=str(data["table"]),
            id=str(data.get("id") or "auto"),
            where=data.get("where"),
            after=data.get("after"),
            rows=int(data.get("rows") or 0),
            paused=bool(data.get("paused")),
        )


@dataclass(slots=True)
class Ledger:
    """What a source's snapshots put into Kafka: the durable answer to "snapshot again?"."""

    #: The initial snapshot reached Kafka completely (or ``snapshot = "never"`` skipped it).
    initial_done: bool = False
    #: Tables whose rows are all in their topics (initial or incremental snapshot done).
    tables: list[str] = field(default_factory=list)
    #: Incremental snapshots under way, in the order they run.
    queue: list[Pending] = field(default_factory=list)
    #: Where the initial snapshot was consistent (an LSN or a binlog position), for people.
    consistent_point: str | None = None
    #: The next offset of the signal topic to read (signals before it were carried out).
    signal_offset: int | None = None
    #: The ids of the signal table's rows carried out (or refused), the latest
    #: :data:`SIGNAL_ROWS_KEPT`: a row read again (the log re-read after a crash or from
    #: an older position) is not carried out twice.
    signal_rows: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "initial_done": self.initial_done,
            "tables": sorted(self.tables),
            "queue": [p.to_json() for p in self.queue],
            "consistent_point": self.consistent_point,
            "signal_offset": self.signal_offset,
            "signal_rows": self.signal_rows,
            "ts_ms": int(time.time() * 1000),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Ledger | None:
        if not data:
            return None
        return cls(
            initial_done=bool(data.get("initial_done")),
            tables=[str(t) for t in data.get("tables") or []],
            queue=[Pending.from_json(p) for p in data.get("queue") or []],
            consistent_point=data.get("consistent_point"),
            signal_offset=data.get("signal_offset"),
            signal_rows=[str(r) for r in data.get("signal_rows") or []],
        )

    def signals_from(self, stored: Ledger | None) -> Ledger:
        """This new ledger, with the signals ``stored`` says were carried out: a new
        slot, ``snapshot = "never"`` or a new snapshot starts the snapshots' record
        again, never the signals'."""
        if stored is not None:
            self.signal_offset = stored.signal_offset
            self.signal_rows = list(stored.signal_rows)
        return self

    def signal_row_done(self, row_id: str) -> bool:
        """Whether the signal table's row ``row_id`` was carried out already; records
        it as carried out from now on."""
        if row_id in self.signal_rows:
            return True
        self.signal_rows.append(row_id)
        del self.signal_rows[:-SIGNAL_ROWS_KEPT]
        return False

    def added_tables(self, configured: list[str]) -> list[str]:
        """Configured tables without their rows in Kafka and no snapshot under way."""
        queued = {p.table for p in self.queue}
        return [t for t in configured if t not in self.tables and t not in queued]
