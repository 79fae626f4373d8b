"""Python value → wire value, per column type and wire."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from bizevents.contracts.binary import signed_bytes, unscaled
from bizevents.contracts.logical import model

# The placeholders a converter compares each value with are read by name, the rest
# of the model through the module.
from bizevents.contracts.logical.model import (
    _MICRO,
    _UNAVAILABLE_B64,
    _UNAVAILABLE_BYTES,
    UNAVAILABLE,
    UNAVAILABLE_MARKER,
    JsonDocument,
)
from bizevents.contracts.logical.placeholder import unavailable_placeholder
from bizevents.contracts.logical.scalars import (
    _check_labels,
    _iso_zoned_time,
    _iso_zoned_timestamp,
    days_from_date,
    time_to_micros,
    timestamp_to_micros,
)

# -- encoders ----------------------------------------------------------------------


def _enc_unavailable_str(convert: model.Converter) -> model.Converter:
    def encode(value: Any) -> Any:
        if value is UNAVAILABLE:
            return UNAVAILABLE_MARKER
        return convert(value)

    return encode


def _enc_typed(check: type | tuple[type, ...], what: str) -> model.Converter:
    def encode(value: Any) -> Any:
        if not isinstance(value, check) or (isinstance(value, bool) and what != "bool"):
            raise TypeError(f"expected {what}, got {type(value).__name__}")
        return value

    return encode


def _enc_bytes(wire: model.Wire) -> model.Converter:
    def encode(value: Any) -> Any:
        if value is UNAVAILABLE:
            raw = _UNAVAILABLE_BYTES
        elif isinstance(value, bytes | bytearray | memoryview):
            raw = bytes(value)
        else:
            raise TypeError(f"expected bytes, got {type(value).__name__}")
        return raw if wire == "avro" else base64.b64encode(raw).decode()

    return encode


def _enc_decimal(scale: int, wire: model.Wire) -> model.Converter:
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


def _enc_variable_decimal(wire: model.Wire) -> model.Converter:
    def encode(value: Any) -> Any:
        if value is UNAVAILABLE:
            return unavailable_placeholder(model.ColumnType(model.Kind.VARIABLE_DECIMAL), wire)
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


def _enc_time(divisor: int, multiplier: int) -> model.Converter:
    def encode(value: Any) -> int:
        if isinstance(value, timedelta):
            # MySQL's TIME outside 00:00-24:00 (see time_from_micros)
            micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
            return micros * multiplier // divisor
        if not isinstance(value, time):
            raise TypeError(f"expected a time, got {type(value).__name__}")
        return time_to_micros(value) * multiplier // divisor

    return encode


def _enc_timestamp(divisor: int, multiplier: int) -> model.Converter:
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


def _enc_array(item: model.Converter, placeholder: list[Any] | None) -> model.Converter:
    def encode(value: Any) -> Any:
        if value is UNAVAILABLE:
            if placeholder is None:
                raise TypeError("this array's items have no unavailable placeholder")
            return list(placeholder)
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        return [None if v is None else item(v) for v in value]

    return encode


def _enc_map(values: model.Converter) -> model.Converter:
    def encode(value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a mapping, got {type(value).__name__}")
        return {str(k): None if v is None else values(v) for k, v in value.items()}

    return encode


def struct_encoder(
    fields: Sequence[model.Field], wire: model.Wire
) -> Callable[[Any], dict[str, Any]]:
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


def encoder_for(ct: model.ColumnType, wire: model.Wire) -> model.Converter:
    """The function from a (non-null) Python value to its wire value."""
    kind = ct.kind
    if kind is model.Kind.BOOLEAN:
        return _enc_typed(bool, "bool")
    if kind in (model.Kind.INT8, model.Kind.INT16, model.Kind.INT32, model.Kind.INT64):
        return _enc_typed(int, "an integer")
    if kind in (model.Kind.FLOAT32, model.Kind.FLOAT64):
        return _enc_typed((int, float), "a number")
    if kind is model.Kind.STRING:
        return _enc_unavailable_str(_enc_typed(str, "a string"))
    if kind is model.Kind.BYTES:
        return _enc_bytes(wire)
    if kind is model.Kind.DECIMAL:
        return _enc_decimal(ct.scale or 0, wire)
    if kind is model.Kind.VARIABLE_DECIMAL:
        return _enc_variable_decimal(wire)
    if kind is model.Kind.DATE:
        return _enc_date
    if kind in model._CLOCKS:
        timestamp, divisor, multiplier = model._CLOCKS[kind]
        return (_enc_timestamp if timestamp else _enc_time)(divisor, multiplier)
    if kind is model.Kind.ZONED_TIMESTAMP:
        return _enc_unavailable_str(_enc_typed_then(datetime, _iso_zoned_timestamp))
    if kind is model.Kind.ZONED_TIME:
        return _enc_unavailable_str(_enc_typed_then(time, _iso_zoned_time))
    if kind is model.Kind.INTERVAL_MICROS:
        return _enc_typed_then(timedelta, lambda v: v // _MICRO)
    if kind is model.Kind.UUID:
        return _enc_unavailable_str(_enc_uuid)
    if kind is model.Kind.JSON:
        return _enc_unavailable_str(_enc_json)
    if kind is model.Kind.ENUM:
        return _enc_unavailable_str(_check_labels(ct))
    if kind is model.Kind.ARRAY:
        item = encoder_for(ct.items or model._ANY, wire)
        placeholder = unavailable_placeholder(ct, wire)
        if placeholder is not None and len(placeholder) == 1 and ct.items is not None:
            placeholder = [item(UNAVAILABLE)]
        return _enc_array(item, placeholder)
    if kind is model.Kind.MAP:
        return _enc_map(encoder_for(ct.items or model._ANY, wire))
    if kind is model.Kind.STRUCT:
        return struct_encoder(ct.fields or (), wire)
    return lambda v: v


def _enc_typed_then(check: type, convert: model.Converter) -> model.Converter:
    def encode(value: Any) -> Any:
        if not isinstance(value, check):
            raise TypeError(f"expected {check.__name__}, got {type(value).__name__}")
        return convert(value)

    return encode
