"""Debezium's transaction metadata, written by the stream: each envelope's
``transaction`` block and the ``<prefix>.transaction`` topic's BEGIN and END records.

The id of a MySQL/MariaDB transaction is its GTID, as Debezium's MySQL connector
writes it (``<file>:<position>`` of its start on a server without GTIDs). The id of a
PostgreSQL transaction is ``<xid>:<commit LSN>`` (the Begin message's
``final_lsn``): xids wrap around, the commit LSN does not, and both are the same when
the slot sends the transaction again after a restart, so a re-sent transaction keeps
its id and its events their orders. ``total_order`` counts the transaction's change
events from 1, ``data_collection_order`` those of one table; tombstones carry no
block (they are not change events) and are not counted, a change that went to the
capture dead-letter topic neither. BEGIN goes out before the transaction's first
captured change, END after its last, with the counts; a transaction that touched no
captured table writes nothing. Both records are produced under the transaction's
acknowledgement tracking, so the slot passes a transaction only when Kafka has its
END too. ``ts_ms`` of both is the commit time (the same on a re-send). A capture that routes
tables by business key (:mod:`bizevents.capture.core.routing`) also counts each table's
change events per partition, told by :meth:`TxBlocks.placed` as each is sent, and
writes them in END's ``partition_counts``.

The bytes of each block are made here, once per event (two varints, looked up).
"""

from __future__ import annotations

import json
from typing import Final

from bizevents.capture.core.sink import SchemaRegistrar
from bizevents.contracts.binary import LENGTHS, NULL_BRANCH, VALUE_BRANCH, text, zigzag
from bizevents.contracts.technical.transaction import (
    STATUS_BEGIN,
    STATUS_END,
    TRANSACTION_KEY_AVRO,
    TRANSACTION_VALUE_AVRO,
    TRANSACTION_VALUE_COUNTED_AVRO,
    TransactionRecord,
    encode_transaction_key,
    encode_transaction_value,
)

__all__ = ["NoBlocks", "TxBlocks", "transaction_id"]

_KEY_JSON: Final = json.dumps(TRANSACTION_KEY_AVRO)
_VALUE_JSON: Final = json.dumps(TRANSACTION_VALUE_AVRO)
_COUNTED_JSON: Final = json.dumps(TRANSACTION_VALUE_COUNTED_AVRO)
#: Orders below this are looked up in LENGTHS (the zigzag of 0..16383): the stamp is
#: the costliest Python per change after the row path, a zigzag call each order.
_SMALL: Final = len(LENGTHS)


def transaction_id(xid: int, commit_lsn: int) -> str:
    """Debezium's PostgreSQL transaction id: ``<xid>:<commit LSN as a number>``."""
    return f"{xid}:{commit_lsn}"


class NoBlocks:
    """Transaction metadata switched off: a null ``transaction`` block, no records."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""

    def start(self, xid: int, commit_lsn: int, commit_ms: int, now_ms: int) -> None:
        """A PostgreSQL transaction starts."""
        self.start_id(transaction_id(xid, commit_lsn), commit_ms, now_ms)

    def start_id(self, tx_id: str, ts_ms: int, now_ms: int) -> None:
        """A transaction of id ``tx_id`` starts (MySQL: its GTID); ``ts_ms`` is the
        BEGIN and END records' time (set :attr:`TxBlocks.commit_ms` before END to
        give END another)."""
        self._tail = VALUE_BRANCH + zigzag(now_ms) + NULL_BRANCH

    def stamp(self, _table: str) -> bytes:
        """The envelope's ``ts_ms`` and ``transaction`` bytes."""
        return self._tail

    def mark(self, _table: str) -> tuple[int, int]:
        return (0, 0)

    def rollback(self, _table: str, _mark: tuple[int, int]) -> None:
        pass

    def placed(self, _table: str, _partition: int) -> None:
        """A change event of ``table`` went to ``partition`` (counted when routing)."""

    def begin_record(self) -> tuple[bytes, bytes] | None:
        """The BEGIN record to send before the first change, if one is due."""
        return None

    def end_record(self) -> tuple[bytes, bytes] | None:
        """The END record to send at commit, if a BEGIN went out."""
        return None


class TxBlocks(NoBlocks):
    """The open transaction's id, running orders and per-table counts."""

    __slots__ = (
        "_begun",
        "_counted",
        "_counts",
        "_head",
        "_key_id",
        "_placed",
        "_total",
        "_value_id",
        "commit_ms",
        "id",
    )

    def __init__(self, key_schema_id: int, value_schema_id: int, counted: bool = False) -> None:
        super().__init__()
        self._key_id = key_schema_id
        self._value_id = value_schema_id
        #: END carries ``partition_counts`` (in the counted schema).
        self._counted = counted
        self._placed: dict[tuple[str, int], int] = {}
        self.id = ""
        self.commit_ms = 0
        self._head = b""
        self._counts: dict[str, int] = {}
        self._total = 0
        self._begun = False

    @classmethod
    def registered(cls, registrar: SchemaRegistrar, topic: str, counted: bool = False) -> TxBlocks:
        """With the transaction topic's key and value schemas registered (the counted
        value schema when ``counted``)."""
        return cls(
            registrar.register_schema(f"{topic}-key", _KEY_JSON),
            registrar.register_schema(f"{topic}-value", _COUNTED_JSON if counted else _VALUE_JSON),
            counted,
        )

    @property
    def total(self) -> int:
        """Change events of the open transaction so far."""
        return self._total

    def start_id(self, tx_id: str, ts_ms: int, now_ms: int) -> None:
        self.id = tx_id
        self.commit_ms = ts_ms
        self._head = VALUE_BRANCH + zigzag(now_ms) + VALUE_BRANCH + text(tx_id)
        self._counts = {}
        self._placed = {}
        self._total = 0
        self._begun = False

    def stamp(self, table: str) -> bytes:
        counts = self._counts
        n = counts.get(table, 0) + 1
        counts[table] = n
        total = self._total = self._total + 1
        if total < _SMALL and n < _SMALL:  # both orders from the table, no zigzag call
            return self._head + LENGTHS[total] + LENGTHS[n]
        return self._head + zigzag(total) + zigzag(n)

    def mark(self, table: str) -> tuple[int, int]:
        """Where the orders stand, to roll back a change that was not sent after all."""
        return (self._total, self._counts.get(table, 0))

    def rollback(self, table: str, mark: tuple[int, int]) -> None:
        self._total, n = mark
        if n:
            self._counts[table] = n
        else:
            self._counts.pop(table, None)

    def placed(self, table: str, partition: int) -> None:
        if self._counted:
            at = (table, partition)
            self._placed[at] = self._placed.get(at, 0) + 1

    def begin_record(self) -> tuple[bytes, bytes] | None:
        if self._begun:
            return None
        self._begun = True
        record = TransactionRecord(STATUS_BEGIN, self.id, self.commit_ms)
        return self._key(), encode_transaction_value(self._value_id, record, self._counted)

    def end_record(self) -> tuple[bytes, bytes] | None:
        if not self._begun:
            return None
        self._begun = False
        counts = tuple((t, n) for t, n in self._counts.items() if n)
        per_partition = (
            tuple((t, p, n) for (t, p), n in sorted(self._placed.items()))
            if self._counted
            else None
        )
        record = TransactionRecord(
            STATUS_END, self.id, self.commit_ms, sum(n for _, n in counts), counts, per_partition
        )
        return self._key(), encode_transaction_value(self._value_id, record, self._counted)

    def _key(self) -> bytes:
        return encode_transaction_key(self._key_id, self.id)
