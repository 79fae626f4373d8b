"""Debezium's transaction metadata topic, ``<server>.transaction``: BEGIN and END records.

A capture that writes transaction metadata puts, for every committed transaction that
changed a captured table, a ``BEGIN`` record before its first change and an ``END``
record after its last, both keyed by the transaction id. ``END`` carries the number of
change events the transaction wrote, in all and per table (``data_collections``), so a
reader that counts the envelopes whose ``transaction.id`` is that id knows when it has
seen all of them. The schemas are Debezium's (``TransactionMetadataKey`` and
``TransactionMetadataValue``); the records are Confluent-framed Avro, or Debezium JSON
with or without the embedded Connect schema.

A capture that routes tables by business key (:mod:`bizevents.contracts.technical.routing`)
writes END with one more field, last: ``partition_counts``, the transaction's events per
table and technical partition (an optional field whose default is null, so a reader of
Debezium's schema is unaffected). A capture without routing writes Debezium's schema
byte for byte.

Pure: the schema lookup is injected, as for the envelopes.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

import fastavro

from bizevents.contracts.binary import NULL_BRANCH, VALUE_BRANCH, text, zigzag
from bizevents.contracts.exceptions import Coordinates, DecodeError
from bizevents.plumbing.framing import MAGIC_BYTE, FramingError, header, unframe

#: The first byte of a Confluent-framed record (a JSON one starts with ``{``).
FRAMED: Final = bytes([MAGIC_BYTE])

__all__ = [
    "STATUS_BEGIN",
    "STATUS_END",
    "TRANSACTION_KEY_AVRO",
    "TRANSACTION_VALUE_AVRO",
    "TRANSACTION_VALUE_COUNTED_AVRO",
    "TransactionDecoder",
    "TransactionRecord",
    "TransactionStatus",
    "encode_transaction_key",
    "encode_transaction_value",
    "transaction_connect_json",
    "transaction_topic",
]

TransactionStatus: TypeAlias = Literal["BEGIN", "END"]
STATUS_BEGIN: Final = "BEGIN"
STATUS_END: Final = "END"

TRANSACTION_KEY_AVRO: Final[dict[str, Any]] = {
    "type": "record",
    "name": "TransactionMetadataKey",
    "namespace": "io.debezium.connector.common",
    "fields": [{"name": "id", "type": "string"}],
    "connect.version": 1,
    "connect.name": "io.debezium.connector.common.TransactionMetadataKey",
}

#: The fields of one count (name, Avro type, Connect type): Debezium's per table, and
#: the routing capture's per table and partition.
_COLLECTION_FIELDS: Final = (
    ("data_collection", "string", "string"),
    ("event_count", "long", "int64"),
)
_PARTITION_FIELDS: Final = (
    ("data_collection", "string", "string"),
    ("partition", "int", "int32"),
    ("event_count", "long", "int64"),
)
_Fields: TypeAlias = tuple[tuple[str, str, str], ...]


def _avro_counts(field: str, record: str, namespace: str, fields: _Fields) -> dict[str, Any]:
    """An optional array of count records (default null)."""
    items = {
        "type": "record",
        "name": record,
        "namespace": namespace,
        "fields": [{"name": name, "type": avro} for name, avro, _ in fields],
    }
    return {"name": field, "type": ["null", {"type": "array", "items": items}], "default": None}


def _connect_counts(field: str, fields: _Fields) -> dict[str, Any]:
    """The same array in Kafka Connect's JSON schema."""
    items = {
        "type": "struct",
        "fields": [{"type": kind, "optional": False, "field": name} for name, _, kind in fields],
        "optional": False,
    }
    return {"type": "array", "items": items, "optional": True, "field": field}


TRANSACTION_VALUE_AVRO: Final[dict[str, Any]] = {
    "type": "record",
    "name": "TransactionMetadataValue",
    "namespace": "io.debezium.connector.common",
    "fields": [
        {"name": "status", "type": "string"},
        {"name": "id", "type": "string"},
        {"name": "event_count", "type": ["null", "long"], "default": None},
        _avro_counts(
            "data_collections", "ConnectDefault", "io.confluent.connect.avro", _COLLECTION_FIELDS
        ),
        {"name": "ts_ms", "type": "long"},
    ],
    "connect.version": 1,
    "connect.name": "io.debezium.connector.common.TransactionMetadataValue",
}

#: The value schema of a capture that routes tables: Debezium's, then ``partition_counts``.
TRANSACTION_VALUE_COUNTED_AVRO: Final[dict[str, Any]] = {
    **TRANSACTION_VALUE_AVRO,
    "fields": [
        *TRANSACTION_VALUE_AVRO["fields"],
        _avro_counts("partition_counts", "PartitionCount", "io.bizevents", _PARTITION_FIELDS),
    ],
}

_CONNECT_VALUE: Final[dict[str, Any]] = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "status"},
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": True, "field": "event_count"},
        _connect_counts("data_collections", _COLLECTION_FIELDS),
        {"type": "int64", "optional": False, "field": "ts_ms"},
    ],
    "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataValue",
    "version": 1,
}

_CONNECT_COUNTED_VALUE: Final[dict[str, Any]] = {
    **_CONNECT_VALUE,
    "fields": [
        *_CONNECT_VALUE["fields"],
        _connect_counts("partition_counts", _PARTITION_FIELDS),
    ],
}


def transaction_topic(prefix: str) -> str:
    """The transaction metadata topic of a capture whose topic prefix is ``prefix``."""
    return f"{prefix}.transaction"


@dataclass(frozen=True, slots=True)
class TransactionRecord:
    """One BEGIN or END record. ``event_count`` and ``data_collections`` are ``None``
    on BEGIN; on END the counts per ``schema.table`` (``db.table`` for MySQL).
    ``partition_counts`` is ``None`` but on the END of a capture that routes tables:
    ``(table, partition, count)`` for every table and technical partition written."""

    status: TransactionStatus
    id: str
    ts_ms: int
    event_count: int | None = None
    data_collections: tuple[tuple[str, int], ...] | None = None
    partition_counts: tuple[tuple[str, int, int], ...] | None = None

    def counts(self) -> dict[str, int]:
        """The END record's events per data collection (empty for BEGIN)."""
        return dict(self.data_collections or ())


def encode_transaction_key(schema_id: int, tx_id: str) -> bytes:
    """The framed Avro key ``{"id": tx_id}``."""
    return header(schema_id) + text(tx_id)


def encode_transaction_value(
    schema_id: int, record: TransactionRecord, counted: bool = False
) -> bytes:
    """The framed Avro value of ``record`` (written by hand: capture writes two per
    transaction; ``tests/contracts/test_transaction_topic.py`` holds it to fastavro),
    in :data:`TRANSACTION_VALUE_COUNTED_AVRO` when ``counted``, else in Debezium's schema."""
    parts = [header(schema_id), text(record.status), text(record.id)]
    if record.event_count is None:
        parts.append(NULL_BRANCH)
    else:
        parts += (VALUE_BRANCH, zigzag(record.event_count))
    parts += _avro_array(record.data_collections)
    parts.append(zigzag(record.ts_ms))
    if counted:
        parts += _avro_array(record.partition_counts)
    elif record.partition_counts is not None:
        raise ValueError("partition_counts needs the counted schema")
    return b"".join(parts)


def _avro_array(items: Sequence[tuple[str | int, ...]] | None) -> list[bytes]:
    """An optional array of counts in Avro: null, or the items (strings and longs)."""
    if items is None:
        return [NULL_BRANCH]
    parts = [VALUE_BRANCH]
    if items:
        parts.append(zigzag(len(items)))
        for item in items:
            parts += [text(v) if isinstance(v, str) else zigzag(v) for v in item]
    parts.append(NULL_BRANCH)  # the array's end block (count 0)
    return parts


def _json_array(items: Sequence[tuple[str | int, ...]] | None, fields: _Fields) -> Any:
    names = [name for name, _, _ in fields]
    return None if items is None else [dict(zip(names, item, strict=True)) for item in items]


def transaction_connect_json(
    record: TransactionRecord, with_schema: bool, counted: bool = False
) -> bytes:
    """The record as Debezium's JSON converter writes it (with ``partition_counts``,
    last, when ``counted``)."""
    payload: dict[str, Any] = {
        "status": record.status,
        "id": record.id,
        "event_count": record.event_count,
        "data_collections": _json_array(record.data_collections, _COLLECTION_FIELDS),
        "ts_ms": record.ts_ms,
    }
    if counted:
        payload["partition_counts"] = _json_array(record.partition_counts, _PARTITION_FIELDS)
    elif record.partition_counts is not None:
        raise ValueError("partition_counts needs the counted schema")
    schema = _CONNECT_COUNTED_VALUE if counted else _CONNECT_VALUE
    body = {"schema": schema, "payload": payload} if with_schema else payload
    return json.dumps(body, separators=(",", ":")).encode()


def _record(d: Any) -> TransactionRecord:
    """A decoded dict as a record; a sentence on anything missing or mistyped."""
    if not isinstance(d, dict):
        raise ValueError("the value is not a struct")
    status, tid, ts_ms = d.get("status"), d.get("id"), d.get("ts_ms")
    if status not in (STATUS_BEGIN, STATUS_END):
        raise ValueError(f"status is {status!r}, not BEGIN or END")
    if not isinstance(tid, str) or not tid:
        raise ValueError("id must be a non-empty string")
    if type(ts_ms) is not int:
        raise ValueError("ts_ms must be an integer")
    count = d.get("event_count")
    if count is not None and (type(count) is not int or count < 0):
        raise ValueError("event_count must be a non-negative integer")
    collections = _decoded_array(d.get("data_collections"), "data_collections", _COLLECTION_FIELDS)
    if status == STATUS_END and count is None:
        raise ValueError("an END record needs event_count")
    per_partition = _decoded_array(d.get("partition_counts"), "partition_counts", _PARTITION_FIELDS)
    return TransactionRecord(status, tid, ts_ms, count, collections, per_partition)


def _decoded_array(raw: Any, field: str, fields: _Fields) -> tuple[tuple[Any, ...], ...] | None:
    """An array of counts as decoded (absent or null: ``None``): a name, then
    non-negative integers; a sentence on anything else."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ValueError(f"{field} must be an array")
    names = [name for name, _, _ in fields]
    items = []
    for item in raw:
        values = tuple(item.get(n) for n in names) if isinstance(item, dict) else (None,)
        if not isinstance(values[0], str) or not all(type(v) is int and v >= 0 for v in values[1:]):
            said = f"{', '.join(names[:-1])} and {names[-1]}"
            raise ValueError(f"each {field} item needs {said}")
        items.append(values)
    return tuple(items)


class TransactionDecoder:
    """Decodes transaction-topic values: framed Avro (writer schema by id), or JSON with
    or without the Connect schema. Raises :class:`DecodeError` naming the record."""

    def __init__(self, schema_for_id: Callable[[int], Any]) -> None:
        self._lookup = schema_for_id
        self._schemas: dict[int, Any] = {}

    def _schema(self, schema_id: int) -> Any:
        parsed = self._schemas.get(schema_id)
        if parsed is None:
            found = self._lookup(schema_id)
            if found is None:
                raise LookupError(schema_id)
            raw = json.loads(found) if isinstance(found, str) else found
            parsed = self._schemas[schema_id] = fastavro.parse_schema(raw)
        return parsed

    def decode(self, value: bytes | None, where: Coordinates | None = None) -> TransactionRecord:
        """The record in ``value``."""
        if value is None:
            raise DecodeError("a transaction record has no value", where)
        try:
            if value[:1] == FRAMED:
                schema_id, body = unframe(value)
                try:
                    schema = self._schema(schema_id)
                except (KeyError, LookupError) as exc:
                    raise DecodeError(f"schema id {schema_id} is not registered", where) from exc
                data = fastavro.schemaless_reader(io.BytesIO(body), schema, None)
            else:
                data = json.loads(value)
                if isinstance(data, dict) and "payload" in data and "schema" in data:
                    data = data["payload"]
            return _record(data)
        except DecodeError:
            raise
        except (FramingError, ValueError, TypeError, EOFError, IndexError) as exc:
            raise DecodeError(f"not a transaction metadata record: {exc}", where) from exc
