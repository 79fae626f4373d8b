"""Column types read back from Avro and Kafka Connect schemas."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from bizevents.contracts.logical.model import _ANY, ColumnType, Field, Kind

# Semantic names -> kind. Connect's own Date/Time/Timestamp count in millis like
# Debezium's connect mode; both spellings decode the same way.
_BY_NAME: Final[dict[str, Kind]] = {
    "org.apache.kafka.connect.data.Decimal": Kind.DECIMAL,
    "io.debezium.data.VariableScaleDecimal": Kind.VARIABLE_DECIMAL,
    "io.debezium.time.Date": Kind.DATE,
    "org.apache.kafka.connect.data.Date": Kind.DATE,
    "io.debezium.time.Time": Kind.TIME_MILLIS,
    "org.apache.kafka.connect.data.Time": Kind.TIME_MILLIS,
    "io.debezium.time.MicroTime": Kind.TIME_MICROS,
    "io.debezium.time.NanoTime": Kind.TIME_NANOS,
    "io.debezium.time.ZonedTime": Kind.ZONED_TIME,
    "io.debezium.time.Timestamp": Kind.TIMESTAMP_MILLIS,
    "org.apache.kafka.connect.data.Timestamp": Kind.TIMESTAMP_MILLIS,
    "io.debezium.time.MicroTimestamp": Kind.TIMESTAMP_MICROS,
    "io.debezium.time.NanoTimestamp": Kind.TIMESTAMP_NANOS,
    "io.debezium.time.ZonedTimestamp": Kind.ZONED_TIMESTAMP,
    "io.debezium.time.MicroDuration": Kind.INTERVAL_MICROS,
    "io.debezium.data.Uuid": Kind.UUID,
    "io.debezium.data.Json": Kind.JSON,
    "io.debezium.data.Enum": Kind.ENUM,
}

_BY_LITERAL: Final[dict[str, Kind]] = {
    "boolean": Kind.BOOLEAN,
    "int8": Kind.INT8,
    "int16": Kind.INT16,
    "int32": Kind.INT32,
    "int64": Kind.INT64,
    "float": Kind.FLOAT32,  # what Connect's JsonConverter writes, and so Debezium
    "double": Kind.FLOAT64,
    "float32": Kind.FLOAT32,  # what bizevents wrote before it wrote the above
    "float64": Kind.FLOAT64,
    "string": Kind.STRING,
    "bytes": Kind.BYTES,
}

_AVRO_PRIMITIVE: Final[dict[str, Kind]] = {
    "boolean": Kind.BOOLEAN,
    "int": Kind.INT32,
    "long": Kind.INT64,
    "float": Kind.FLOAT32,
    "double": Kind.FLOAT64,
    "string": Kind.STRING,
    "bytes": Kind.BYTES,
}

_AVRO_LOGICAL: Final[dict[str, Kind]] = {
    "decimal": Kind.DECIMAL,
    "date": Kind.DATE,
    "time-millis": Kind.TIME_MILLIS,
    "time-micros": Kind.TIME_MICROS,
    "timestamp-millis": Kind.TIMESTAMP_MILLIS,
    "timestamp-micros": Kind.TIMESTAMP_MICROS,
    "local-timestamp-millis": Kind.TIMESTAMP_MILLIS,
    "local-timestamp-micros": Kind.TIMESTAMP_MICROS,
    "uuid": Kind.UUID,
}


def _labels(allowed: Any) -> tuple[str, ...] | None:
    if isinstance(allowed, str):
        return tuple(allowed.split(",")) if allowed else ()
    return None


def _int_param(params: Mapping[str, Any], key: str) -> int | None:
    raw = params.get(key)
    if raw is None:
        return None
    return int(raw)


# -- from schemas ------------------------------------------------------------------


def column_type_from_connect(schema: Mapping[str, Any]) -> ColumnType:
    """The column type a Kafka Connect JSON schema (as Debezium embeds it) describes."""
    if not isinstance(schema, Mapping):
        raise TypeError("a field schema must be an object")
    literal = schema.get("type")
    name = schema.get("name")
    params = schema.get("parameters") or {}
    if not isinstance(params, Mapping):
        raise TypeError("schema parameters must be an object")
    kind = _BY_NAME.get(name) if isinstance(name, str) else None
    if kind is Kind.DECIMAL:
        return ColumnType(
            kind,
            scale=_int_param(params, "scale") or 0,
            precision=_int_param(params, "connect.decimal.precision"),
        )
    if kind is Kind.ENUM:
        return ColumnType(kind, labels=_labels(params.get("allowed")))
    if kind is not None:
        return ColumnType(kind)
    if literal == "array":
        return ColumnType(Kind.ARRAY, items=column_type_from_connect(schema.get("items") or {}))
    if literal == "map":
        return ColumnType(Kind.MAP, items=column_type_from_connect(schema.get("values") or {}))
    if literal == "struct":
        raw_fields = schema.get("fields")
        if not isinstance(raw_fields, list):
            raise TypeError("a struct schema needs a list of fields")
        return ColumnType(
            Kind.STRUCT,
            fields=tuple(connect_field(f) for f in raw_fields),
            name=name if isinstance(name, str) else None,
        )
    if isinstance(literal, str) and literal in _BY_LITERAL:
        return ColumnType(_BY_LITERAL[literal], name=name if isinstance(name, str) else None)
    raise ValueError(f"unknown Connect schema type {literal!r}")


def connect_field(schema: Any) -> Field:
    """A struct member from its Connect schema (which names it in ``field``)."""
    if not isinstance(schema, Mapping) or not isinstance(schema.get("field"), str):
        raise TypeError("a struct member's schema needs a 'field' name")
    return Field(schema["field"], column_type_from_connect(schema), bool(schema.get("optional")))


def column_type_from_avro(schema: Any, named: Mapping[str, Any] | None = None) -> ColumnType:
    """The column type an Avro schema describes (nullable unions are unwrapped).

    ``named`` resolves references to named types (fastavro's ``__named_schemas``).
    """
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            return _ANY
        schema = branches[0]
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVE:
            return ColumnType(_AVRO_PRIMITIVE[schema])
        if named is not None and schema in named:
            return column_type_from_avro(named[schema], named)
        return _ANY
    if not isinstance(schema, Mapping):
        return _ANY
    name = schema.get("connect.name")
    params = schema.get("connect.parameters") or {}
    logical = schema.get("logicalType")
    kind = _BY_NAME.get(name) if isinstance(name, str) else None
    if kind is None and isinstance(logical, str):
        kind = _AVRO_LOGICAL.get(logical)
    if not isinstance(logical, str) or logical not in _AVRO_LOGICAL:
        logical = None
    if kind is Kind.DECIMAL:
        scale = schema.get("scale", _int_param(params, "scale"))
        return ColumnType(
            kind, scale=int(scale or 0), precision=schema.get("precision"), logical=logical
        )
    if kind is Kind.ENUM:
        return ColumnType(kind, labels=_labels(params.get("allowed")))
    if kind is not None:
        return ColumnType(kind, logical=logical)
    avro_type = schema.get("type")
    if avro_type == "array":
        return ColumnType(Kind.ARRAY, items=column_type_from_avro(schema.get("items"), named))
    if avro_type == "map":
        return ColumnType(Kind.MAP, items=column_type_from_avro(schema.get("values"), named))
    if avro_type == "enum":
        # fastavro already gives the symbol, never the index.
        symbols = schema.get("symbols")
        return ColumnType(Kind.ENUM, labels=tuple(symbols) if isinstance(symbols, list) else None)
    if avro_type == "record":
        return ColumnType(
            Kind.STRUCT,
            fields=tuple(avro_field(f, named) for f in schema.get("fields") or ()),
            name=schema.get("name"),
        )
    if isinstance(avro_type, str | list | dict) and avro_type != schema:
        inner = column_type_from_avro(avro_type, named)
        if inner.kind is not Kind.ANY:
            return inner
    return _ANY


def avro_field(field: Mapping[str, Any], named: Mapping[str, Any] | None = None) -> Field:
    """A record field of an Avro schema as a :class:`Field`."""
    t = field.get("type")
    optional = isinstance(t, list) and "null" in t
    return Field(str(field.get("name")), column_type_from_avro(t, named), optional)
