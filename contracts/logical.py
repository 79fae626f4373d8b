"""Column types of technical events and their conversion to and from the wire.

Debezium (through Kafka Connect) writes a column's value as a *literal* type (int64,
string, bytes, struct, ...) and says what it means with a *semantic* name
(``io.debezium.time.MicroTimestamp``, ``org.apache.kafka.connect.data.Decimal``, ...).
This module turns both into one :class:`ColumnType`, and gives, per column type, the
function that turns a wire value into the Python value a translator author expects
(``Decimal``, aware ``datetime``, ``date``, ``time``, ``UUID``, :class:`JsonDocument`,
``bytes``, labels for enums, :data:`UNAVAILABLE` for an unchanged TOASTed value) and back.

Two wires exist: ``"avro"`` (values as fastavro reads and writes them: bytes stay
bytes, Avro logical types are already converted by fastavro) and ``"json"`` (values as
Kafka Connect's JsonConverter writes them: bytes and decimals in base64).

Timestamps without a zone (``io.debezium.time.Timestamp``, ``MicroTimestamp``,
``NanoTimestamp``, Connect's ``Timestamp``) carry the column's wall-clock value counted
from the epoch as if it were UTC; they become aware datetimes in UTC whose wall clock is
the column's. That keeps every datetime a translator sees aware, and is exact: nothing
is shifted by the database's or the worker's zone.

Everything here is pure; a conversion that fails raises ``ValueError``/``TypeError``
(or ``OverflowError``), which the decoders turn into ``DecodeError``.
"""

from __future__ import annotations

import base64
import io
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any, Final, Literal

from contracts.binary import decimal_from_unscaled, signed_bytes, unscaled

__all__ = [
    "UNAVAILABLE",
    "UNAVAILABLE_MARKER",
    "ColumnError",
    "ColumnType",
    "Converter",
    "Field",
    "JsonDocument",
    "Kind",
    "Unavailable",
    "Wire",
    "column_type_from_avro",
    "column_type_from_connect",
    "date_from_days",
    "days_from_date",
    "decoder_for",
    "encoder_for",
    "time_from_micros",
    "time_to_micros",
    "timestamp_from_micros",
    "timestamp_to_micros",
    "unavailable_placeholder",
]

Wire = Literal["avro", "json"]
Converter = Callable[[Any], Any]

#: What Debezium writes for a TOASTed column that did not change (PostgreSQL).
UNAVAILABLE_MARKER: Final = "__debezium_unavailable_value"
_UNAVAILABLE_BYTES: Final = UNAVAILABLE_MARKER.encode()
_UNAVAILABLE_B64: Final = base64.b64encode(_UNAVAILABLE_BYTES).decode()
#: Debezium's placeholder of an unchanged TOASTed int or bigint array: the marker's
#: bytes as numbers. Arrays of other numbers, dates and times use the same numbers.
_UNAVAILABLE_NUMBERS: Final = tuple(_UNAVAILABLE_BYTES)


class Unavailable:
    """The type of :data:`UNAVAILABLE`: a value the database did not send.

    PostgreSQL does not log an unchanged TOASTed column; the value exists but is not in
    the event. It is never ``None``, since ``None`` means SQL NULL.
    """

    __slots__ = ()
    _instance: Unavailable | None = None

    def __new__(cls) -> Unavailable:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNAVAILABLE"

    def __reduce__(self) -> str:
        # Pickled into Spark executors and back, it stays the singleton.
        return "UNAVAILABLE"


UNAVAILABLE: Final = Unavailable()

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DATE: Final = date(1970, 1, 1)
_MICRO: Final = timedelta(microseconds=1)


class JsonDocument:
    """A JSON column: the text as the database gave it, and its parsed value.

    Equality is on the text, which every encoding here carries unchanged.
    """

    __slots__ = ("text", "value")

    text: str
    value: Any

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"a JSON column must be text, not {type(text).__name__}")
        self.text = text
        self.value = json.loads(text)

    @classmethod
    def from_value(cls, value: Any) -> JsonDocument:
        """The document whose text is the compact JSON form of ``value``."""
        return cls(json.dumps(value, separators=(",", ":"), ensure_ascii=False))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonDocument) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"JsonDocument({self.text!r})"


class Kind(StrEnum):
    """What a column means, independent of how a wire carries it."""

    BOOLEAN = "boolean"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    STRING = "string"
    BYTES = "bytes"
    DECIMAL = "decimal"  # fixed scale: Connect Decimal / Avro decimal
    VARIABLE_DECIMAL = "variable_decimal"  # io.debezium.data.VariableScaleDecimal
    DATE = "date"
    TIME_MILLIS = "time_millis"
    TIME_MICROS = "time_micros"
    TIME_NANOS = "time_nanos"
    ZONED_TIME = "zoned_time"
    TIMESTAMP_MILLIS = "timestamp_millis"
    TIMESTAMP_MICROS = "timestamp_micros"
    TIMESTAMP_NANOS = "timestamp_nanos"
    ZONED_TIMESTAMP = "zoned_timestamp"
    INTERVAL_MICROS = "interval_micros"  # io.debezium.time.MicroDuration
    UUID = "uuid"
    JSON = "json"
    ENUM = "enum"
    ARRAY = "array"
    MAP = "map"
    STRUCT = "struct"
    ANY = "any"  # a shape we do not know: passed through as the wire gives it


@dataclass(frozen=True, slots=True)
class Field:
    """A named column (or struct member) and its type; ``optional`` means nullable."""

    name: str
    type: ColumnType
    optional: bool = True


@dataclass(frozen=True, slots=True)
class ColumnType:
    """A column's type: its :class:`Kind` and the parameters that kind needs.

    ``logical`` remembers an Avro ``logicalType`` met while decoding, since fastavro has
    then already converted the value.
    """

    kind: Kind
    scale: int | None = None
    precision: int | None = None
    labels: tuple[str, ...] | None = None
    items: ColumnType | None = None
    fields: tuple[Field, ...] | None = None
    logical: str | None = None
    name: str | None = None  # a semantic name we keep but do not interpret

    # -- schemas -------------------------------------------------------------------

    def connect_schema(self, optional: bool = True, field: str | None = None) -> dict[str, Any]:
        """The Kafka Connect JSON schema Debezium would embed for this type."""
        literal, name, params = _CONNECT_SHAPE[self.kind]
        out: dict[str, Any] = {"type": literal, "optional": optional}
        if name is not None:
            out["name"] = name
            out["version"] = 1
        elif self.name is not None:
            out["name"] = self.name
        if self.kind is Kind.DECIMAL:
            params = {"scale": str(self.scale or 0)}
            if self.precision is not None:
                params["connect.decimal.precision"] = str(self.precision)
        elif self.kind is Kind.ENUM:
            params = {"allowed": ",".join(self.labels or ())}
        if params:
            out["parameters"] = params
        if self.kind is Kind.ARRAY:
            out["items"] = (self.items or _ANY).connect_schema(optional=True)
        elif self.kind is Kind.MAP:
            out["keys"] = {"type": "string", "optional": False}
            out["values"] = (self.items or _ANY).connect_schema(optional=True)
        elif self.kind is Kind.VARIABLE_DECIMAL:
            out["fields"] = [
                {"type": "int32", "optional": False, "field": "scale"},
                {"type": "bytes", "optional": False, "field": "value"},
            ]
        elif self.kind is Kind.STRUCT:
            out["fields"] = [
                f.type.connect_schema(optional=f.optional, field=f.name) for f in self.fields or ()
            ]
        if field is not None:
            out["field"] = field
        return out

    def avro_schema(self, record_name: str | None = None, seen: set[str] | None = None) -> Any:
        """The Avro type Confluent's AvroConverter would write for this type.

        ``seen`` collects the named types already defined in the enclosing schema: Avro
        allows one definition per name, later uses refer to it by name.
        """
        if seen is None:
            seen = set()
        literal, name, params = _CONNECT_SHAPE[self.kind]
        avro_type = _AVRO_LITERAL[literal]
        if self.kind is Kind.ANY:
            raise ValueError("a column of unknown type has no Avro schema")
        if self.kind is Kind.ARRAY:
            items = (self.items or _ANY).avro_schema(seen=seen)
            return {"type": "array", "items": ["null", items]}
        if self.kind is Kind.MAP:
            values = (self.items or _ANY).avro_schema(seen=seen)
            return {"type": "map", "values": ["null", values]}
        if self.kind is Kind.VARIABLE_DECIMAL:
            if _VSD in seen:
                return _VSD
            seen.add(_VSD)
            return {
                "type": "record",
                "name": "VariableScaleDecimal",
                "namespace": "io.debezium.data",
                "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
                "connect.doc": "Variable scaled decimal",
                "connect.version": 1,
                "connect.name": "io.debezium.data.VariableScaleDecimal",
            }
        if self.kind is Kind.STRUCT:
            return {
                "type": "record",
                "name": record_name or (self.name or "Struct").rsplit(".", 1)[-1],
                "fields": [_avro_field(f, seen) for f in self.fields or ()],
            }
        out: dict[str, Any] = {"type": avro_type}
        if name is not None:
            out["connect.version"] = 1
            out["connect.name"] = name
        if self.kind is Kind.DECIMAL:
            scale = self.scale or 0
            precision = self.precision if self.precision is not None else 64
            out["logicalType"] = "decimal"
            out["scale"] = scale
            out["precision"] = precision
            out["connect.parameters"] = {
                "scale": str(scale),
                "connect.decimal.precision": str(precision),
            }
        elif self.kind is Kind.ENUM:
            out["connect.parameters"] = {"allowed": ",".join(self.labels or ())}
        elif params:
            out["connect.parameters"] = dict(params)
        if len(out) == 1:
            return avro_type
        return out


_ANY: Final = ColumnType(Kind.ANY)


_VSD: Final = "io.debezium.data.VariableScaleDecimal"


def _avro_field(f: Field, seen: set[str]) -> dict[str, Any]:
    t = f.type.avro_schema(seen=seen)
    if f.optional:
        return {"name": f.name, "type": ["null", t], "default": None}
    return {"name": f.name, "type": t}


# kind -> (Connect literal type, Debezium/Connect semantic name, fixed parameters)
_CONNECT_SHAPE: Final[dict[Kind, tuple[str, str | None, dict[str, str]]]] = {
    Kind.BOOLEAN: ("boolean", None, {}),
    Kind.INT8: ("int8", None, {}),
    Kind.INT16: ("int16", None, {}),
    Kind.INT32: ("int32", None, {}),
    Kind.INT64: ("int64", None, {}),
    Kind.FLOAT32: ("float32", None, {}),
    Kind.FLOAT64: ("float64", None, {}),
    Kind.STRING: ("string", None, {}),
    Kind.BYTES: ("bytes", None, {}),
    Kind.DECIMAL: ("bytes", "org.apache.kafka.connect.data.Decimal", {}),
    Kind.VARIABLE_DECIMAL: ("struct", "io.debezium.data.VariableScaleDecimal", {}),
    Kind.DATE: ("int32", "io.debezium.time.Date", {}),
    Kind.TIME_MILLIS: ("int32", "io.debezium.time.Time", {}),
    Kind.TIME_MICROS: ("int64", "io.debezium.time.MicroTime", {}),
    Kind.TIME_NANOS: ("int64", "io.debezium.time.NanoTime", {}),
    Kind.ZONED_TIME: ("string", "io.debezium.time.ZonedTime", {}),
    Kind.TIMESTAMP_MILLIS: ("int64", "io.debezium.time.Timestamp", {}),
    Kind.TIMESTAMP_MICROS: ("int64", "io.debezium.time.MicroTimestamp", {}),
    Kind.TIMESTAMP_NANOS: ("int64", "io.debezium.time.NanoTimestamp", {}),
    Kind.ZONED_TIMESTAMP: ("string", "io.debezium.time.ZonedTimestamp", {}),
    Kind.INTERVAL_MICROS: ("int64", "io.debezium.time.MicroDuration", {}),
    Kind.UUID: ("string", "io.debezium.data.Uuid", {}),
    Kind.JSON: ("string", "io.debezium.data.Json", {}),
    Kind.ENUM: ("string", "io.debezium.data.Enum", {}),
    Kind.ARRAY: ("array", None, {}),
    Kind.MAP: ("map", None, {}),
    Kind.STRUCT: ("struct", None, {}),
    Kind.ANY: ("string", None, {}),
}

_AVRO_LITERAL: Final = {
    "boolean": "boolean",
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float32": "float",
    "float64": "double",
    "string": "string",
    "bytes": "bytes",
    "array": "array",
    "map": "map",
    "struct": "record",
}

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
    "float32": Kind.FLOAT32,
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


# -- scalar conversions --------------------------------------------------------------


def date_from_days(days: int) -> date:
    """``io.debezium.time.Date``: days since 1970-01-01."""
    return _EPOCH_DATE + timedelta(days=_int(days))


def days_from_date(value: date) -> int:
    """The inverse of :func:`date_from_days`."""
    return (value - _EPOCH_DATE).days


def time_from_micros(micros: int) -> time:
    """Microseconds past midnight as a ``time``; 24:00:00 has no Python ``time``."""
    micros = _int(micros)
    if not 0 <= micros < 86_400_000_000:
        raise ValueError(f"{micros} microseconds is not a time of day")
    seconds, micro = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return time(hour, minute, second, micro)


def time_to_micros(value: time) -> int:
    """The inverse of :func:`time_from_micros` (a zone, if any, is dropped)."""
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def timestamp_from_micros(micros: int) -> datetime:
    """Microseconds since the epoch as an aware UTC datetime."""
    return _EPOCH + timedelta(microseconds=_int(micros))


def timestamp_to_micros(value: datetime) -> int:
    """The inverse of :func:`timestamp_from_micros`; a naive value counts as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // _MICRO


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _b64(value: Any) -> bytes:
    return base64.b64decode(_str(value), validate=True)


def _zoned_timestamp(value: Any) -> datetime:
    parsed = datetime.fromisoformat(_str(value))
    if parsed.tzinfo is None:
        raise ValueError(f"zoned timestamp {value!r} has no zone")
    return parsed


def _zoned_time(value: Any) -> time:
    parsed = time.fromisoformat(_str(value))
    if parsed.tzinfo is None:
        raise ValueError(f"zoned time {value!r} has no zone")
    return parsed


def _iso_zoned_timestamp(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError("a zoned timestamp needs an aware datetime")
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _iso_zoned_time(value: time) -> str:
    if value.tzinfo is None:
        raise ValueError("a zoned time needs a zone")
    offset = value.utcoffset()
    if offset:
        shifted = datetime.combine(_EPOCH_DATE, value) - offset
        value = shifted.time().replace(tzinfo=UTC)
    return value.replace(tzinfo=None).isoformat() + "Z"


def _check_labels(ct: ColumnType) -> Converter:
    labels = frozenset(ct.labels) if ct.labels else None

    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"an enum value must be its label, got {type(value).__name__}")
        if labels is not None and value not in labels:
            raise ValueError(f"{value!r} is not one of the enum's labels")
        return value

    return check


# -- decoders ----------------------------------------------------------------------


def _typed(kind_check: type | tuple[type, ...], what: str) -> Converter:
    def check(value: Any) -> Any:
        if not isinstance(value, kind_check) or isinstance(value, bool) is not (what == "bool"):
            raise TypeError(f"expected {what}, got {type(value).__name__}")
        return value

    return check


def _json_float(value: Any) -> float:
    # The JSON decoders parse numbers with fractions as Decimal so decimals stay exact;
    # a float column takes the correctly rounded double of the same text.
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return float(value)


def _json_decimal(value: Any, scale: int) -> Decimal:
    # JsonConverter writes base64 by default, a number with decimal.format=NUMERIC.
    if isinstance(value, str):
        return decimal_from_unscaled(_b64(value), scale)
    if isinstance(value, int | Decimal) and not isinstance(value, bool):
        return Decimal(value)
    raise TypeError(f"expected a decimal, got {type(value).__name__}")


def _json_string(value: Any) -> Any:
    if value == UNAVAILABLE_MARKER:
        return UNAVAILABLE
    return _str(value)


def _avro_string(value: Any) -> Any:
    return UNAVAILABLE if value == UNAVAILABLE_MARKER else value


def _json_bytes(value: Any) -> Any:
    if value == _UNAVAILABLE_B64:
        return UNAVAILABLE
    return _b64(value)


def _avro_bytes(value: Any) -> Any:
    return UNAVAILABLE if value == _UNAVAILABLE_BYTES else value


def _unavailable_or(convert: Converter) -> Converter:
    def decode(value: Any) -> Any:
        if value == UNAVAILABLE_MARKER:
            return UNAVAILABLE
        return convert(value)

    return decode


def _unavailable_if(placeholder: Any, convert: Converter | None) -> Converter:
    def decode(value: Any) -> Any:
        if value == placeholder:
            return UNAVAILABLE
        return value if convert is None else convert(value)

    return decode


def _variable_decimal(bytes_of: Converter) -> Converter:
    def decode(value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError("a variable-scale decimal must be a struct {scale, value}")
        if value["value"] in (_UNAVAILABLE_BYTES, _UNAVAILABLE_B64):
            return UNAVAILABLE
        return decimal_from_unscaled(bytes_of(value["value"]), _int(value["scale"]))

    return decode


def _nullable(convert: Converter) -> Converter:
    def decode(value: Any) -> Any:
        return None if value is None else convert(value)

    return decode


def _array(item: Converter | None, wire: Wire, placeholder: Any = None) -> Converter:
    def decode(value: Any) -> Any:
        if not isinstance(value, list):
            raise TypeError(f"expected an array, got {type(value).__name__}")
        if len(value) == 1 and value[0] in (UNAVAILABLE_MARKER, _UNAVAILABLE_BYTES):
            return UNAVAILABLE
        if value == placeholder:
            return UNAVAILABLE
        if item is None:
            return value
        return [None if v is None else item(v) for v in value]

    return decode


def _map(values: Converter | None) -> Converter:
    def decode(value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a map, got {type(value).__name__}")
        if values is None:
            return dict(value)
        return {k: None if v is None else values(v) for k, v in value.items()}

    return decode


class ColumnError(ValueError):
    """A member of a row (or struct) that its schema refuses: missing, null where it is
    not optional, not in the schema, or a value its type cannot hold."""

    def __init__(self, column: str, problem: str) -> None:
        self.column = column
        self.problem = problem
        super().__init__(f"column {column!r}: {problem}")


def struct_decoder(
    fields: Sequence[Field], wire: Wire, *, ranges: bool = True
) -> Callable[[Any], dict[str, Any]]:
    """Decodes a row (or any struct) in place: converts the members that need it.

    The row must have the schema's members and no other: a non-optional member that is
    missing or null, or a member the schema does not name, raises :class:`ColumnError`
    (an optional member that is missing becomes null, as Kafka Connect reads it).
    ``ranges`` is :func:`decoder_for`'s.
    """
    plan = [(f.name, decoder_for(f.type, wire, ranges=ranges), f.optional) for f in fields]
    names = frozenset(f.name for f in fields)
    size = len(names)

    def decode(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise TypeError(f"expected a struct, got {type(value).__name__}")
        for name, conv, optional in plan:
            v = value.get(name)
            if v is None:
                if not optional:
                    problem = "null" if name in value else "no value"
                    raise ColumnError(name, f"{problem}, and the column is not optional")
                value[name] = None
            elif conv is not None:
                try:
                    value[name] = conv(v)
                except Exception as exc:
                    raise ColumnError(name, str(exc)) from exc
        if len(value) != size:
            extra = next(k for k in value if k not in names)
            raise ColumnError(extra, "not in the schema")
        return value

    return decode


_INT_BITS: Final = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _in_range(bits: int, then: Converter | None) -> Converter:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def check(value: Any) -> Any:
        if type(value) is int and not low <= value <= high:
            raise ValueError(f"{value} does not fit int{bits}")
        return value if then is None else then(value)

    return check


def decoder_for(ct: ColumnType, wire: Wire, *, ranges: bool = True) -> Converter | None:
    """The function from a (non-null) wire value to the Python value, or ``None`` when
    the wire value already is the Python value and nothing needs checking.

    A type whose Connect literal is an integer (``int32`` for a date, ``int64`` for a
    timestamp, ...) refuses a wire integer outside that literal's range. ``ranges=False``
    leaves that out for the Avro reader generated in :mod:`contracts.avro_codegen`,
    which refuses out-of-range Avro ints itself (an Avro long cannot leave int64).
    """
    convert = _decoder_for(ct, wire, ranges)
    bits = _INT_BITS.get(_CONNECT_SHAPE[ct.kind][0])
    if bits is None or not ranges or (wire == "avro" and (bits == 64 or ct.logical is not None)):
        return convert
    return _in_range(bits, convert)


def _decoder_for(ct: ColumnType, wire: Wire, ranges: bool) -> Converter | None:
    kind = ct.kind
    avro = wire == "avro"
    if kind is Kind.BOOLEAN:
        return None if avro else _typed(bool, "bool")
    if kind in (Kind.INT8, Kind.INT16, Kind.INT32, Kind.INT64):
        return None if avro else _typed(int, "an integer")
    if kind in (Kind.FLOAT32, Kind.FLOAT64):
        return None if avro else _json_float
    if kind is Kind.STRING:
        return _avro_string if avro else _json_string
    if kind is Kind.BYTES:
        return _avro_bytes if avro else _json_bytes
    if kind is Kind.DECIMAL:
        scale = ct.scale or 0
        if avro and ct.logical == "decimal":
            # fastavro made the placeholder's bytes a (huge) Decimal already.
            return _unavailable_if(_avro_decimal_placeholder(ct), None)
        if avro:
            return _unavailable_if(_UNAVAILABLE_BYTES, lambda v: decimal_from_unscaled(v, scale))
        return _unavailable_if(_UNAVAILABLE_B64, lambda v: _json_decimal(v, scale))
    if kind is Kind.VARIABLE_DECIMAL:
        return _variable_decimal((lambda v: v) if avro else _b64)
    if ct.logical is not None and avro:
        # fastavro converted date/time/timestamp/uuid; a local timestamp is made aware.
        if ct.logical.startswith("local-timestamp"):
            return lambda v: v.replace(tzinfo=UTC)
        return None
    if kind is Kind.DATE:
        return date_from_days
    if kind is Kind.TIME_MILLIS:
        return lambda v: time_from_micros(_int(v) * 1000)
    if kind is Kind.TIME_MICROS:
        return time_from_micros
    if kind is Kind.TIME_NANOS:
        return lambda v: time_from_micros(_int(v) // 1000)
    if kind is Kind.TIMESTAMP_MILLIS:
        return lambda v: timestamp_from_micros(_int(v) * 1000)
    if kind is Kind.TIMESTAMP_MICROS:
        return timestamp_from_micros
    if kind is Kind.TIMESTAMP_NANOS:
        # Python's datetime stops at microseconds: nanoseconds are floored.
        return lambda v: timestamp_from_micros(_int(v) // 1000)
    if kind is Kind.ZONED_TIMESTAMP:
        return _unavailable_or(_zoned_timestamp)
    if kind is Kind.ZONED_TIME:
        return _unavailable_or(_zoned_time)
    if kind is Kind.INTERVAL_MICROS:
        return lambda v: timedelta(microseconds=_int(v))
    if kind is Kind.UUID:
        return _unavailable_or(lambda v: uuid.UUID(_str(v)))
    if kind is Kind.JSON:
        return _unavailable_or(JsonDocument)
    if kind is Kind.ENUM:
        return _unavailable_or(_check_labels(ct))
    if kind is Kind.ARRAY:
        return _array(
            decoder_for(ct.items or _ANY, wire, ranges=ranges),
            wire,
            unavailable_placeholder(ct, wire),
        )
    if kind is Kind.MAP:
        return _map(decoder_for(ct.items or _ANY, wire, ranges=ranges))
    if kind is Kind.STRUCT:
        return struct_decoder(ct.fields or (), wire, ranges=ranges)
    return None


# -- the unchanged-TOAST placeholder ---------------------------------------------------

_STRING_WIRE: Final = frozenset(
    {Kind.STRING, Kind.UUID, Kind.JSON, Kind.ENUM, Kind.ZONED_TIMESTAMP, Kind.ZONED_TIME}
)
_NUMBER_WIRE: Final = frozenset(
    {
        Kind.INT8,
        Kind.INT16,
        Kind.INT32,
        Kind.INT64,
        Kind.DATE,
        Kind.TIME_MILLIS,
        Kind.TIME_MICROS,
        Kind.TIME_NANOS,
        Kind.TIMESTAMP_MILLIS,
        Kind.TIMESTAMP_MICROS,
        Kind.TIMESTAMP_NANOS,
        Kind.INTERVAL_MICROS,
    }
)


def _avro_decimal_placeholder(ct: ColumnType) -> Any:
    # fastavro reads a decimal in a context of the schema's precision, which rounds the
    # placeholder's 67 digits: compare with what it reads, not with the exact number.
    import fastavro

    schema = fastavro.parse_schema(ct.avro_schema())
    data = bytes([2 * len(_UNAVAILABLE_BYTES)]) + _UNAVAILABLE_BYTES  # Avro bytes: zigzag length
    return fastavro.schemaless_reader(io.BytesIO(data), schema)


def unavailable_placeholder(ct: ColumnType, wire: Wire) -> Any:
    """The value standing for :data:`UNAVAILABLE` in a column of type ``ct``, as the
    wire's reader hands it over (fastavro's ``Decimal`` for an Avro decimal), or
    ``None`` for a type without one.

    Strings (and string-encoded types) carry ``__debezium_unavailable_value``, bytes and
    decimals its bytes, arrays one placeholder item, or, for items of numbers, dates and
    times, the marker's bytes as numbers (Debezium's int-array placeholder). Fixed-size
    scalars (integers, floats, booleans, dates, times) have none: PostgreSQL never
    stores them out of line, so they are never unchanged-TOASTed.
    """
    kind = ct.kind
    avro = wire == "avro"
    if kind in _STRING_WIRE:
        return UNAVAILABLE_MARKER
    if kind is Kind.BYTES:
        return _UNAVAILABLE_BYTES if avro else _UNAVAILABLE_B64
    if kind is Kind.DECIMAL:
        return _avro_decimal_placeholder(ct) if avro else _UNAVAILABLE_B64
    if kind is Kind.VARIABLE_DECIMAL:
        return {"scale": 0, "value": _UNAVAILABLE_BYTES if avro else _UNAVAILABLE_B64}
    if kind is Kind.ARRAY:
        items = ct.items or _ANY
        if items.kind in _NUMBER_WIRE:
            return list(_UNAVAILABLE_NUMBERS)
        if items.kind in (Kind.FLOAT32, Kind.FLOAT64):
            return [float(n) for n in _UNAVAILABLE_NUMBERS]
        if items.kind is Kind.BOOLEAN:
            return [bool(n >> bit & 1) for n in _UNAVAILABLE_NUMBERS for bit in range(8)]
        if items.kind is Kind.ANY:
            return [UNAVAILABLE_MARKER]
        one = unavailable_placeholder(items, wire)
        return None if one is None else [one]
    return None


# -- encoders ----------------------------------------------------------------------


def _enc_unavailable_str(convert: Converter) -> Converter:
    def encode(value: Any) -> Any:
        if value is UNAVAILABLE:
            return UNAVAILABLE_MARKER
        return convert(value)

    return encode


def _enc_typed(check: type | tuple[type, ...], what: str) -> Converter:
    def encode(value: Any) -> Any:
        if not isinstance(value, check) or (isinstance(value, bool) and what != "bool"):
            raise TypeError(f"expected {what}, got {type(value).__name__}")
        return value

    return encode


def _enc_bytes(wire: Wire) -> Converter:
    def encode(value: Any) -> Any:
        if value is UNAVAILABLE:
            raw = _UNAVAILABLE_BYTES
        elif isinstance(value, bytes | bytearray | memoryview):
            raw = bytes(value)
        else:
            raise TypeError(f"expected bytes, got {type(value).__name__}")
        return raw if wire == "avro" else base64.b64encode(raw).decode()

    return encode


def _enc_decimal(scale: int, wire: Wire) -> Converter:
    def encode(value: Any) -> Any:
        if value is UNAVAILABLE:
            # The bytes, not their huge Decimal, which fastavro would check for precision.
            return _UNAVAILABLE_BYTES if wire == "avro" else _UNAVAILABLE_B64
        if not isinstance(value, Decimal | int) or isinstance(value, bool):
            raise TypeError(f"expected a Decimal, got {type(value).__name__}")
        n, _ = unscaled(Decimal(value), scale)
        if wire == "avro":
            # fastavro writes Decimal itself; give it the value at the column's scale.
            return Decimal(f"{n}E{-scale}")
        return base64.b64encode(signed_bytes(n)).decode()

    return encode


def _enc_variable_decimal(wire: Wire) -> Converter:
    def encode(value: Any) -> Any:
        if value is UNAVAILABLE:
            return unavailable_placeholder(ColumnType(Kind.VARIABLE_DECIMAL), wire)
        if not isinstance(value, Decimal | int) or isinstance(value, bool):
            raise TypeError(f"expected a Decimal, got {type(value).__name__}")
        n, scale = unscaled(Decimal(value))
        raw = signed_bytes(n)
        return {"scale": scale, "value": raw if wire == "avro" else base64.b64encode(raw).decode()}

    return encode


def _enc_date(value: Any) -> int:
    if not isinstance(value, date) or isinstance(value, datetime):
        raise TypeError(f"expected a date, got {type(value).__name__}")
    return days_from_date(value)


def _enc_time(divisor: int, multiplier: int) -> Converter:
    def encode(value: Any) -> int:
        if not isinstance(value, time):
            raise TypeError(f"expected a time, got {type(value).__name__}")
        return time_to_micros(value) * multiplier // divisor

    return encode


def _enc_timestamp(divisor: int, multiplier: int) -> Converter:
    def encode(value: Any) -> int:
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, got {type(value).__name__}")
        return timestamp_to_micros(value) * multiplier // divisor

    return encode


def _enc_uuid(value: Any) -> str:
    if not isinstance(value, uuid.UUID):
        raise TypeError(f"expected a UUID, got {type(value).__name__}")
    return str(value)


def _enc_json(value: Any) -> str:
    if isinstance(value, JsonDocument):
        return value.text
    raise TypeError(f"expected a JsonDocument, got {type(value).__name__}")


def _enc_array(item: Converter, placeholder: list[Any] | None) -> Converter:
    def encode(value: Any) -> Any:
        if value is UNAVAILABLE:
            if placeholder is None:
                raise TypeError("this array's items have no unavailable placeholder")
            return list(placeholder)
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        return [None if v is None else item(v) for v in value]

    return encode


def _enc_map(values: Converter) -> Converter:
    def encode(value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a mapping, got {type(value).__name__}")
        return {str(k): None if v is None else values(v) for k, v in value.items()}

    return encode


def struct_encoder(fields: Sequence[Field], wire: Wire) -> Callable[[Any], dict[str, Any]]:
    """Encodes a row into a new dict with every field of ``fields`` (absent -> null)."""
    steps = [(f.name, encoder_for(f.type, wire), f.optional) for f in fields]

    def encode(value: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a row, got {type(value).__name__}")
        out: dict[str, Any] = {}
        for name, conv, optional in steps:
            v = value.get(name)
            if v is None:
                if not optional:
                    raise ValueError(f"column {name!r} is not nullable")
                out[name] = None
                continue
            try:
                out[name] = conv(v)
            except Exception as exc:
                raise ValueError(f"column {name!r}: {exc}") from exc
        return out

    return encode


def encoder_for(ct: ColumnType, wire: Wire) -> Converter:
    """The function from a (non-null) Python value to its wire value."""
    kind = ct.kind
    if kind is Kind.BOOLEAN:
        return _enc_typed(bool, "bool")
    if kind in (Kind.INT8, Kind.INT16, Kind.INT32, Kind.INT64):
        return _enc_typed(int, "an integer")
    if kind in (Kind.FLOAT32, Kind.FLOAT64):
        return _enc_typed((int, float), "a number")
    if kind is Kind.STRING:
        return _enc_unavailable_str(_enc_typed(str, "a string"))
    if kind is Kind.BYTES:
        return _enc_bytes(wire)
    if kind is Kind.DECIMAL:
        return _enc_decimal(ct.scale or 0, wire)
    if kind is Kind.VARIABLE_DECIMAL:
        return _enc_variable_decimal(wire)
    if kind is Kind.DATE:
        return _enc_date
    if kind is Kind.TIME_MILLIS:
        return _enc_time(1000, 1)
    if kind is Kind.TIME_MICROS:
        return _enc_time(1, 1)
    if kind is Kind.TIME_NANOS:
        return _enc_time(1, 1000)
    if kind is Kind.TIMESTAMP_MILLIS:
        return _enc_timestamp(1000, 1)
    if kind is Kind.TIMESTAMP_MICROS:
        return _enc_timestamp(1, 1)
    if kind is Kind.TIMESTAMP_NANOS:
        return _enc_timestamp(1, 1000)
    if kind is Kind.ZONED_TIMESTAMP:
        return _enc_unavailable_str(_enc_typed_then(datetime, _iso_zoned_timestamp))
    if kind is Kind.ZONED_TIME:
        return _enc_unavailable_str(_enc_typed_then(time, _iso_zoned_time))
    if kind is Kind.INTERVAL_MICROS:
        return _enc_typed_then(timedelta, lambda v: v // _MICRO)
    if kind is Kind.UUID:
        return _enc_unavailable_str(_enc_uuid)
    if kind is Kind.JSON:
        return _enc_unavailable_str(_enc_json)
    if kind is Kind.ENUM:
        return _enc_unavailable_str(_check_labels(ct))
    if kind is Kind.ARRAY:
        item = encoder_for(ct.items or _ANY, wire)
        placeholder = unavailable_placeholder(ct, wire)
        if placeholder is not None and len(placeholder) == 1 and ct.items is not None:
            placeholder = [item(UNAVAILABLE)]
        return _enc_array(item, placeholder)
    if kind is Kind.MAP:
        return _enc_map(encoder_for(ct.items or _ANY, wire))
    if kind is Kind.STRUCT:
        return struct_encoder(ct.fields or (), wire)
    return lambda v: v


def _enc_typed_then(check: type, convert: Converter) -> Converter:
    def encode(value: Any) -> Any:
        if not isinstance(value, check):
            raise TypeError(f"expected {check.__name__}, got {type(value).__name__}")
        return convert(value)

    return encode
