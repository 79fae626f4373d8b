"""Wire value → Python value, per column type and wire."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Final

from bizevents.contracts.binary import decimal_from_unscaled
from bizevents.contracts.logical import model

# The placeholders a converter compares each value with are read by name, the rest
# of the model through the module.
from bizevents.contracts.logical.model import (
    _UNAVAILABLE_B64,
    _UNAVAILABLE_BYTES,
    UNAVAILABLE,
    UNAVAILABLE_MARKER,
    JsonDocument,
)
from bizevents.contracts.logical.placeholder import (
    _avro_decimal_placeholder,
    unavailable_placeholder,
)
from bizevents.contracts.logical.scalars import (
    _b64,
    _check_labels,
    _int,
    _str,
    _zoned_time,
    _zoned_timestamp,
    date_from_days,
    time_from_micros,
    timestamp_from_micros,
)

# -- decoders ----------------------------------------------------------------------


def _typed(kind_check: type | tuple[type, ...], what: str) -> model.Converter:
    def check(value: Any) -> Any:
        if not isinstance(value, kind_check) or isinstance(value, bool) is not (what == "bool"):
            raise TypeError(f"expected {what}, got {type(value).__name__}")
        return value

    return check


_NON_FINITE: Final = frozenset({"NaN", "Infinity", "-Infinity"})


def _json_float(value: Any) -> float:
    # The JSON decoders parse numbers with fractions as Decimal so decimals stay exact;
    # a float column takes the correctly rounded double of the same text. Connect's
    # JsonConverter (Jackson) writes the non-finite ones as these strings.
    if isinstance(value, str) and value in _NON_FINITE:
        return float(value)
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


#: The attribute that carries a converter's :func:`native_conversion`.
_NATIVE: Final = "native_conversion"
#: The converters whose result a compiled reader may get by calling ``fromisoformat``
#: and checking the zone.
_ZONED: Final[dict[model.Converter, model.Converter]] = {
    _zoned_timestamp: datetime.fromisoformat,
    _zoned_time: time.fromisoformat,
}


def native_conversion(convert: model.Converter) -> tuple[Any, Any, Any, bool] | None:
    """``(marker, unavailable, then, zoned)``: what ``convert`` does, for a compiled
    reader to do without calling it. A value equal to ``marker`` (unless ``None``) reads
    as ``unavailable``; any other is ``then(value)`` (the value itself when ``then`` is
    ``None``; when ``then`` is a frozenset, the value itself if it is one of its
    strings, else a failure), whose result must have a zone when ``zoned``. ``None``:
    call ``convert``."""
    if convert in _ZONED:
        return (None, None, _ZONED[convert], True)
    found: tuple[Any, Any, Any, bool] | None = getattr(convert, _NATIVE, None)
    return found


def _unavailable_or(convert: model.Converter) -> model.Converter:
    def decode(value: Any) -> Any:
        if value == UNAVAILABLE_MARKER:
            return UNAVAILABLE
        return convert(value)

    zoned = _ZONED.get(convert)
    then = convert if zoned is None else zoned
    setattr(decode, _NATIVE, (UNAVAILABLE_MARKER, UNAVAILABLE, then, zoned is not None))
    return decode


def _unavailable_if(placeholder: Any, convert: model.Converter | None) -> model.Converter:
    def decode(value: Any) -> Any:
        if value == placeholder:
            return UNAVAILABLE
        return value if convert is None else convert(value)

    setattr(decode, _NATIVE, (placeholder, UNAVAILABLE, convert, False))
    return decode


# Strings and bytes, each wire with its placeholder for an unchanged TOASTed value.
_json_string = _unavailable_if(UNAVAILABLE_MARKER, _str)
_avro_string = _unavailable_if(UNAVAILABLE_MARKER, None)
_json_bytes = _unavailable_if(_UNAVAILABLE_B64, _b64)
_avro_bytes = _unavailable_if(_UNAVAILABLE_BYTES, None)


def _variable_decimal(bytes_of: model.Converter) -> model.Converter:
    def decode(value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError("a variable-scale decimal must be a struct {scale, value}")
        if value["value"] in (_UNAVAILABLE_BYTES, _UNAVAILABLE_B64):
            return UNAVAILABLE
        return decimal_from_unscaled(bytes_of(value["value"]), _int(value["scale"]))

    return decode


def _nullable(convert: model.Converter) -> model.Converter:
    def decode(value: Any) -> Any:
        return None if value is None else convert(value)

    return decode


def _array(
    item: model.Converter | None, wire: model.Wire, placeholder: Any = None
) -> model.Converter:
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


def _map(values: model.Converter | None) -> model.Converter:
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
    fields: Sequence[model.Field], wire: model.Wire, *, ranges: bool = True
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


def _in_range(bits: int, then: model.Converter | None) -> model.Converter:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def check(value: Any) -> Any:
        if type(value) is int and not low <= value <= high:
            raise ValueError(f"{value} does not fit int{bits}")
        return value if then is None else then(value)

    return check


def decoder_for(
    ct: model.ColumnType, wire: model.Wire, *, ranges: bool = True
) -> model.Converter | None:
    """The function from a (non-null) wire value to the Python value, or ``None`` when
    the wire value already is the Python value and nothing needs checking.

    A type whose Connect literal is an integer (``int32`` for a date, ``int64`` for a
    timestamp, ...) refuses a wire integer outside that literal's range. ``ranges=False``
    leaves that out for the Avro reader generated in :mod:`bizevents.contracts.avro_codegen`,
    which refuses out-of-range Avro ints itself (an Avro long cannot leave int64).
    """
    convert = _decoder_for(ct, wire, ranges)
    bits = _INT_BITS.get(model._CONNECT_SHAPE[ct.kind][0])
    if bits is None or not ranges or (wire == "avro" and (bits == 64 or ct.logical is not None)):
        return convert
    return _in_range(bits, convert)


def _decoder_for(ct: model.ColumnType, wire: model.Wire, ranges: bool) -> model.Converter | None:
    kind = ct.kind
    avro = wire == "avro"
    if kind is model.Kind.BOOLEAN:
        return None if avro else _typed(bool, "bool")
    if kind in (model.Kind.INT8, model.Kind.INT16, model.Kind.INT32, model.Kind.INT64):
        return None if avro else _typed(int, "an integer")
    if kind in (model.Kind.FLOAT32, model.Kind.FLOAT64):
        return None if avro else _json_float
    if kind is model.Kind.STRING:
        return _avro_string if avro else _json_string
    if kind is model.Kind.BYTES:
        return _avro_bytes if avro else _json_bytes
    if kind is model.Kind.DECIMAL:
        scale = ct.scale or 0
        if avro and ct.logical == "decimal":
            # fastavro made the placeholder's bytes a (huge) Decimal already.
            return _unavailable_if(_avro_decimal_placeholder(ct), None)
        if avro:
            return _unavailable_if(_UNAVAILABLE_BYTES, lambda v: decimal_from_unscaled(v, scale))
        return _unavailable_if(_UNAVAILABLE_B64, lambda v: _json_decimal(v, scale))
    if kind is model.Kind.VARIABLE_DECIMAL:
        return _variable_decimal((lambda v: v) if avro else _b64)
    if ct.logical is not None and avro:
        # fastavro converted date/time/timestamp/uuid; a local timestamp is made aware.
        if ct.logical.startswith("local-timestamp"):
            return lambda v: v.replace(tzinfo=UTC)
        return None
    if kind is model.Kind.DATE:
        return date_from_days
    if kind in model._CLOCKS:
        timestamp, divisor, multiplier = model._CLOCKS[kind]
        from_micros = timestamp_from_micros if timestamp else time_from_micros
        if divisor == multiplier:
            return from_micros
        # Python's datetime and time stop at microseconds: nanoseconds are floored.
        return lambda v: from_micros(_int(v) * divisor // multiplier)
    if kind is model.Kind.ZONED_TIMESTAMP:
        return _unavailable_or(_zoned_timestamp)
    if kind is model.Kind.ZONED_TIME:
        return _unavailable_or(_zoned_time)
    if kind is model.Kind.INTERVAL_MICROS:
        return lambda v: timedelta(microseconds=_int(v))
    if kind is model.Kind.UUID:
        return _unavailable_or(lambda v: uuid.UUID(_str(v)))
    if kind is model.Kind.JSON:
        return _unavailable_or(JsonDocument)
    if kind is model.Kind.ENUM:
        decode = _unavailable_or(_check_labels(ct))
        if ct.labels:  # the check is a membership test: the compiled reader's to do
            setattr(decode, _NATIVE, (UNAVAILABLE_MARKER, UNAVAILABLE, frozenset(ct.labels), False))
        return decode
    if kind is model.Kind.ARRAY:
        return _array(
            decoder_for(ct.items or model._ANY, wire, ranges=ranges),
            wire,
            unavailable_placeholder(ct, wire),
        )
    if kind is model.Kind.MAP:
        return _map(decoder_for(ct.items or model._ANY, wire, ranges=ranges))
    if kind is model.Kind.STRUCT:
        return struct_decoder(ct.fields or (), wire, ranges=ranges)
    return None
