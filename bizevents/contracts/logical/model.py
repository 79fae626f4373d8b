"""The column type model: what a column is, and how it reads in Avro and Connect schemas."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Any, Final, Literal

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

#: The times and timestamps: (a timestamp, not a time of day; divisor, multiplier): the
#: wire's count is the microseconds times ``multiplier`` divided by ``divisor``.
_CLOCKS: Final[dict[Kind, tuple[bool, int, int]]] = {
    Kind.TIME_MILLIS: (False, 1000, 1),
    Kind.TIME_MICROS: (False, 1, 1),
    Kind.TIME_NANOS: (False, 1, 1000),
    Kind.TIMESTAMP_MILLIS: (True, 1000, 1),
    Kind.TIMESTAMP_MICROS: (True, 1, 1),
    Kind.TIMESTAMP_NANOS: (True, 1, 1000),
}


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
    # Kafka Connect's JsonConverter names FLOAT32 and FLOAT64 "float" and "double"
    Kind.FLOAT32: ("float", None, {}),
    Kind.FLOAT64: ("double", None, {}),
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
    "float": "float",
    "double": "double",
    "string": "string",
    "bytes": "bytes",
    "array": "array",
    "map": "map",
    "struct": "record",
}
