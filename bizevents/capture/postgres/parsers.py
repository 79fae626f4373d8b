"""PostgreSQL's text output parsed into Python values: booleans, bytea, money, dates,
times and timestamps (with PostgreSQL's infinities), intervals in both of its styles,
numerics, floats and arrays. Pure: a value that does not parse raises ValueError."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, Final

__all__ = [
    "Converter",
    "parse_array",
    "parse_bool",
    "parse_bytea",
    "parse_date",
    "parse_float",
    "parse_interval",
    "parse_money",
    "parse_numeric",
    "parse_time",
    "parse_timestamp",
    "parse_timestamptz",
    "parse_timetz",
]

#: A parser of one value's text.
Converter = Callable[[str], Any]


# -- scalar parsers ---------------------------------------------------------------------


def parse_bool(text: str) -> bool:
    if text == "t":
        return True
    if text == "f":
        return False
    raise ValueError("a boolean is 't' or 'f'")


_OCTAL: Final = re.compile(r"\\([0-7]{3}|\\)")


def parse_bytea(text: str) -> bytes:
    """``bytea`` in the hex format (``\\x0102``) or the older escape format."""
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    out = bytearray()
    last = 0
    for m in _OCTAL.finditer(text):
        out += text[last : m.start()].encode("latin-1")
        esc = m.group(1)
        out.append(92 if esc == "\\" else int(esc, 8))
        last = m.end()
    rest = text[last:]
    if "\\" in rest:
        raise ValueError("a backslash in escape-format bytea starts \\\\ or \\nnn")
    out += rest.encode("latin-1")
    return bytes(out)


def parse_money(text: str) -> Decimal:
    """``money`` as ``lc_monetary=C`` writes it (``$1,234.56``, ``-$0.01``) → ``Decimal``.

    Other locales' currency symbols and group separators are dropped too; their
    decimal separator must be ``.``.
    """
    negative = text.startswith("-") or text.startswith("(")
    digits = re.sub(r"[^0-9.]", "", text)
    if not digits or digits.count(".") > 1:
        raise ValueError("not a money amount with '.' as the decimal separator")
    value = Decimal(digits)
    return -value if negative else value


def _special(text: str) -> int:
    # 1 for 'infinity', -1 for '-infinity', 0 for a finite value.
    if text == "infinity":
        return 1
    if text == "-infinity":
        return -1
    return 0


_DATESTYLE_HINT: Final = (
    "expected ISO output (DateStyle ISO); years before 1 or after 9999 do not fit"
)


def parse_date(text: str) -> date:
    inf = _special(text)
    if inf:
        return date.max if inf > 0 else date.min
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ValueError(_DATESTYLE_HINT) from None


def parse_time(text: str) -> time:
    if text.startswith("24:00:00"):
        # PostgreSQL allows 24:00:00; Python's time stops one microsecond earlier.
        return time.max if len(text) == 8 else time.max.replace(tzinfo=_offset(text[8:]))
    return time.fromisoformat(text)


def _offset(text: str) -> timezone:
    parsed = time.fromisoformat("00:00:00" + text)
    assert parsed.tzinfo is not None
    return timezone(parsed.utcoffset() or timedelta(0))


def parse_timetz(text: str) -> time:
    value = parse_time(text)
    if value.tzinfo is None:
        raise ValueError("a time with time zone has no offset")
    return value


def parse_timestamp(text: str) -> datetime:
    inf = _special(text)
    if inf:
        return datetime.max if inf > 0 else datetime.min
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(_DATESTYLE_HINT) from None
    if value.tzinfo is not None:
        raise ValueError("a timestamp without time zone has an offset")
    return value


_MAX_UTC: Final = datetime.max.replace(tzinfo=UTC)
_MIN_UTC: Final = datetime.min.replace(tzinfo=UTC)


def parse_timestamptz(text: str) -> datetime:
    inf = _special(text)
    if inf:
        return _MAX_UTC if inf > 0 else _MIN_UTC
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(_DATESTYLE_HINT) from None
    if value.tzinfo is None:
        raise ValueError("a timestamp with time zone has no offset")
    return value.astimezone(UTC)


# Debezium's MicroDuration: a month is 365.25 / 12 = 30.4375 days.
_MONTH_US: Final = 2_629_800_000_000
_DAY_US: Final = 86_400_000_000

_PG_INTERVAL: Final = re.compile(
    r"(?:([+-]?\d+) years? ?)?(?:([+-]?\d+) mons? ?)?(?:([+-]?\d+) days? ?)?"
    r"(?:([+-])?(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?)?"
)
_ISO_INTERVAL: Final = re.compile(
    r"P(?:([+-]?\d+)Y)?(?:([+-]?\d+)M)?(?:([+-]?\d+)D)?"
    r"(?:T(?:([+-]?\d+)H)?(?:([+-]?\d+)M)?(?:([+-]?)(\d+)(?:\.(\d{1,6}))?S)?)?"
)


def _micros(fraction: str | None) -> int:
    return int((fraction or "").ljust(6, "0"))


def parse_interval(text: str) -> timedelta:
    """``interval`` (IntervalStyle ``postgres`` or ``iso_8601``) as a ``timedelta``.

    Months and years count as 30.4375 and 365.25 days, as Debezium's ``MicroDuration``
    does, so ``1 mon`` is not exactly any calendar month.
    """
    m = _PG_INTERVAL.fullmatch(text)
    if m is not None and text:
        years, months, days, sign, hh, mm, ss, frac = m.groups()
        clock = 0
        if hh is not None:
            clock = ((int(hh) * 60 + int(mm)) * 60 + int(ss)) * 1_000_000 + _micros(frac)
            if sign == "-":
                clock = -clock
        total_months = int(years or 0) * 12 + int(months or 0)
        micros = total_months * _MONTH_US + int(days or 0) * _DAY_US + clock
        return timedelta(microseconds=micros)
    m = _ISO_INTERVAL.fullmatch(text)
    if m is not None and text != "P":
        years, months, days, hours, minutes, sign, secs, frac = m.groups()
        seconds = int(secs or 0) * 1_000_000 + _micros(frac)
        if sign == "-":
            seconds = -seconds
        clock = (int(hours or 0) * 60 + int(minutes or 0)) * 60_000_000 + seconds
        total_months = int(years or 0) * 12 + int(months or 0)
        micros = total_months * _MONTH_US + int(days or 0) * _DAY_US + clock
        return timedelta(microseconds=micros)
    raise ValueError("not an interval in IntervalStyle postgres or iso_8601")


def parse_numeric(text: str) -> Decimal:
    return Decimal(text)


def parse_float(text: str) -> float:
    return float(text)


# -- arrays ---------------------------------------------------------------------------

_ARRAY_TOKEN: Final = re.compile(r'"((?:[^"\\]|\\.)*)"|([{},])|([^{},"]+)', re.DOTALL)
_UNESCAPE: Final = re.compile(r"\\(.)", re.DOTALL)


def parse_array(text: str, element: Converter) -> list[Any]:
    """An array's text form (``{1,2,NULL}``, ``{"a b","c\\"d"}``, ``{{1,2},{3,4}}``).

    Elements go through ``element``; ``NULL`` becomes ``None``. A multi-dimensional
    array becomes nested lists. Bounds other than 1 (``[0:1]={...}``) are dropped.
    Assumes the ``,`` delimiter, which every type mapped here uses.
    """
    if text.startswith("["):
        eq = text.find("=")
        if eq < 0:
            raise ValueError("array bounds without '='")
        text = text[eq + 1 :]
    if not text.startswith("{"):
        raise ValueError("an array starts with '{'")
    stack: list[list[Any]] = []
    result: list[Any] | None = None
    expect_item = True  # an element or '{' may come next
    pos = 0
    for m in _ARRAY_TOKEN.finditer(text):
        if m.start() != pos or result is not None:
            raise ValueError(f"unexpected character at {pos} of the array")
        pos = m.end()
        quoted, punct, bare = m.groups()
        if punct == "{":
            if not expect_item:
                raise ValueError(f"unexpected '{{' at {m.start()} of the array")
            new: list[Any] = []
            if stack:
                stack[-1].append(new)
            stack.append(new)
        elif punct == "}":
            if not stack or (expect_item and stack[-1]):
                raise ValueError(f"unexpected '}}' at {m.start()} of the array")
            done = stack.pop()
            if not stack:
                result = done
            expect_item = False
        elif punct == ",":
            if expect_item or not stack:
                raise ValueError(f"unexpected ',' at {m.start()} of the array")
            expect_item = True
            continue
        else:
            if not expect_item or not stack:
                raise ValueError(f"unexpected element at {m.start()} of the array")
            if quoted is not None:
                stack[-1].append(element(_UNESCAPE.sub(r"\1", quoted)))
            else:
                item = bare.strip()
                stack[-1].append(None if item == "NULL" else element(item))
            expect_item = False
            continue
        if punct == "{":
            expect_item = True
    if result is None or pos != len(text):
        raise ValueError("the array is not closed")
    return result
