"""Scalar conversions between wire values and Python values (dates, times, decimals)."""

from __future__ import annotations

import base64
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from bizevents.contracts.logical.model import _EPOCH, _EPOCH_DATE, _MICRO, ColumnType, Converter

# -- scalar conversions --------------------------------------------------------------


def date_from_days(days: int) -> date:
    """``io.debezium.time.Date``: days since 1970-01-01."""
    return _EPOCH_DATE + timedelta(days=_int(days))


def days_from_date(value: date) -> int:
    """The inverse of :func:`date_from_days`."""
    return (value - _EPOCH_DATE).days


def time_from_micros(micros: int) -> time | timedelta:
    """Microseconds past midnight as a ``time``.

    A value outside a day (MySQL's ``TIME`` runs from -838:59:59 to 838:59:59, and
    Debezium writes it as ``MicroTime`` unchanged; 24:00:00 has no Python ``time``)
    becomes a ``timedelta`` rather than an error.
    """
    micros = _int(micros)
    if not 0 <= micros < 86_400_000_000:
        return timedelta(microseconds=micros)
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
