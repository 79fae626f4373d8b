"""Writing change events and tombstones in each of the three encodings."""

from __future__ import annotations

import io
import json
from typing import Any, Final, Literal

import fastavro

from bizevents.contracts.binary import text
from bizevents.contracts.envelope import (
    OPS,
    ChangeEvent,
    Row,
    Tombstone,
    Transaction,
)
from bizevents.contracts.exceptions import EncodeError
from bizevents.contracts.logical import (
    struct_encoder,
)
from bizevents.contracts.technical.schemas import (
    TableSchema,
    envelope_avro_schema,
    envelope_connect_schema,
)
from bizevents.contracts.technical.source import (
    source_wire,
)
from bizevents.plumbing.framing import header

#: Each operation code as an Avro string's bytes: what capture's record writers put in ``op``.
AVRO_OPS: Final[dict[str, bytes]] = {op: text(op) for op in sorted(OPS)}

# -- encoders ------------------------------------------------------------------------------


def _transaction_wire(tx: Transaction | None) -> dict[str, Any] | None:
    if tx is None:
        return None
    return {
        "id": tx.id,
        "total_order": tx.total_order,
        "data_collection_order": tx.data_collection_order,
    }


class _PayloadWriter:
    def __init__(self, table: TableSchema, wire: Literal["avro", "json"]) -> None:
        self.table = table
        self.row = struct_encoder(table.value_fields, wire)
        self.key = struct_encoder(table.key_fields, wire)

    def payload(self, event: ChangeEvent) -> dict[str, Any]:
        try:
            return {
                "before": None if event.before is None else self.row(event.before),
                "after": None if event.after is None else self.row(event.after),
                "source": source_wire(event.source, self.table.connector),
                "op": event.op,
                "ts_ms": event.ts_ms,
                "transaction": _transaction_wire(event.transaction),
            }
        except Exception as exc:
            raise EncodeError(f"cannot encode {event.coordinates}: {exc}") from exc

    def key_of(self, key: Row | None) -> dict[str, Any] | None:
        if key is None:
            return None
        try:
            return self.key(key)
        except Exception as exc:
            raise EncodeError(f"cannot encode the key: {exc}") from exc


def _frame(schema_id: int, schema: Any, record: Any) -> bytes:
    buffer = io.BytesIO()
    buffer.write(header(schema_id))
    try:
        fastavro.schemaless_writer(buffer, schema, record)
    except Exception as exc:
        raise EncodeError(f"the record does not fit its Avro schema: {exc}") from exc
    return buffer.getvalue()


class AvroEncoder:
    """Writes change events and tombstones as Confluent-framed Avro.

    The ids are those the registry gave the schemas of :func:`envelope_avro_schema`
    (registering is the caller's business, so this stays pure).
    """

    def __init__(self, table: TableSchema, key_schema_id: int | None, value_schema_id: int) -> None:
        schemas = envelope_avro_schema(
            table.server,
            table.schema,
            table.table,
            table.key_fields,
            table.value_fields,
            table.connector,
        )
        self.schemas = schemas
        self._value_schema = fastavro.parse_schema(schemas.value)
        self._key_schema = None if schemas.key is None else fastavro.parse_schema(schemas.key)
        self._key_id = key_schema_id
        self._value_id = value_schema_id
        self._writer = _PayloadWriter(table, "avro")

    def encode_key(self, key: Row | None) -> bytes | None:
        record = self._writer.key_of(key)
        if record is None:
            return None
        if self._key_schema is None or self._key_id is None:
            raise EncodeError("a key for a table without key columns")
        return _frame(self._key_id, self._key_schema, record)

    def encode(self, event: ChangeEvent | Tombstone) -> tuple[bytes | None, bytes | None]:
        """``(key bytes, value bytes)``; a tombstone has value ``None``."""
        key = self.encode_key(event.key)
        if isinstance(event, Tombstone):
            return key, None
        return key, _frame(self._value_id, self._value_schema, self._writer.payload(event))


class JsonEncoder:
    """Writes change events as Debezium JSON, with the embedded schema or without."""

    def __init__(self, table: TableSchema, with_schema: bool = True) -> None:
        self._writer = _PayloadWriter(table, "json")
        self._with_schema = with_schema
        self.schemas = envelope_connect_schema(table)

    def _dump(self, schema: Any, payload: Any) -> bytes:
        doc = {"schema": schema, "payload": payload} if self._with_schema else payload
        try:
            return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
        except (TypeError, ValueError) as exc:
            raise EncodeError(f"not representable as JSON: {exc}") from exc

    def encode(self, event: ChangeEvent | Tombstone) -> tuple[bytes | None, bytes | None]:
        """``(key bytes, value bytes)``; a tombstone has value ``None``."""
        key_record = self._writer.key_of(event.key)
        key = None if key_record is None else self._dump(self.schemas.key, key_record)
        if isinstance(event, Tombstone):
            return key, None
        return key, self._dump(self.schemas.value, self._writer.payload(event))
