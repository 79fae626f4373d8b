"""The unchanged-TOAST placeholder: what stands for UNAVAILABLE on each wire."""

from __future__ import annotations

import io
from typing import Any, Final

from bizevents.contracts.logical.model import (
    _ANY,
    _UNAVAILABLE_B64,
    _UNAVAILABLE_BYTES,
    _UNAVAILABLE_NUMBERS,
    UNAVAILABLE_MARKER,
    ColumnType,
    Kind,
    Wire,
)

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
