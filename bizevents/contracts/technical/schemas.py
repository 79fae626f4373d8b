"""The Avro and Kafka Connect schemas of a technical topic, as Debezium registers them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from bizevents.contracts.logical import (
    ColumnType,
    Field,
    Kind,
)
from bizevents.contracts.technical.source import (
    Connector,
    source_avro_schema,
    source_connect_schema,
)

# -- schemas for encoding ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableSchema:
    """A table as a technical topic carries it: names, key columns, value columns."""

    server: str
    schema: str
    table: str
    key_fields: tuple[Field, ...]
    value_fields: tuple[Field, ...]
    connector: Connector = "postgresql"

    @property
    def namespace(self) -> str:
        """``<server>.<schema>.<table>``: the topic name and the Avro namespace."""
        return f"{self.server}.{self.schema}.{self.table}"


@dataclass(frozen=True, slots=True)
class EnvelopeSchemas:
    """The key schema (``None`` for a table without a primary key) and value schema."""

    key: dict[str, Any] | None
    value: dict[str, Any]


_TRANSACTION_AVRO: Final = {
    "type": "record",
    "name": "block",
    "namespace": "event",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "total_order", "type": "long"},
        {"name": "data_collection_order", "type": "long"},
    ],
    "connect.version": 1,
    "connect.name": "event.block",
}


def envelope_avro_schema(
    server: str,
    schema: str,
    table: str,
    key_fields: Sequence[Field],
    value_fields: Sequence[Field],
    connector: Connector = "postgresql",
) -> EnvelopeSchemas:
    """The Avro key and value schemas Debezium's Avro converter would register.

    The value is ``<server>.<schema>.<table>.Envelope`` with ``before``/``after`` as
    nullable ``Value`` records, the connector's ``Source`` record, ``op``, ``ts_ms``
    and an optional ``transaction`` block; the key is the ``Key`` record of the
    primary-key columns (``None`` without any).
    """
    namespace = f"{server}.{schema}.{table}"
    value_record = ColumnType(Kind.STRUCT, fields=tuple(value_fields)).avro_schema("Value")
    value_record["namespace"] = namespace
    value_record["connect.name"] = f"{namespace}.Value"
    envelope = {
        "type": "record",
        "name": "Envelope",
        "namespace": namespace,
        "fields": [
            {"name": "before", "type": ["null", value_record], "default": None},
            {"name": "after", "type": ["null", f"{namespace}.Value"], "default": None},
            {"name": "source", "type": source_avro_schema(connector)},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {"name": "transaction", "type": ["null", _TRANSACTION_AVRO], "default": None},
        ],
        "connect.version": 1,
        "connect.name": f"{namespace}.Envelope",
    }
    key: dict[str, Any] | None = None
    if key_fields:
        key = ColumnType(Kind.STRUCT, fields=tuple(key_fields)).avro_schema("Key")
        key["namespace"] = namespace
        key["connect.name"] = f"{namespace}.Key"
    return EnvelopeSchemas(key, envelope)


def envelope_connect_schema(table: TableSchema) -> EnvelopeSchemas:
    """The Kafka Connect schemas Debezium embeds in JSON with ``schemas.enable=true``."""
    ns = table.namespace
    row = ColumnType(Kind.STRUCT, fields=table.value_fields)
    value = {
        "type": "struct",
        "fields": [
            {**row.connect_schema(True, "before"), "name": f"{ns}.Value"},
            {**row.connect_schema(True, "after"), "name": f"{ns}.Value"},
            source_connect_schema(table.connector),
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {
                "type": "struct",
                "fields": [
                    {"type": "string", "optional": False, "field": "id"},
                    {"type": "int64", "optional": False, "field": "total_order"},
                    {"type": "int64", "optional": False, "field": "data_collection_order"},
                ],
                "optional": True,
                "name": "event.block",
                "version": 1,
                "field": "transaction",
            },
        ],
        "optional": False,
        "name": f"{ns}.Envelope",
        "version": 1,
    }
    key: dict[str, Any] | None = None
    if table.key_fields:
        key = {
            **ColumnType(Kind.STRUCT, fields=table.key_fields).connect_schema(False),
            "name": f"{ns}.Key",
        }
    return EnvelopeSchemas(key, value)
