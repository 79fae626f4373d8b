"""MySQL/MariaDB column types: binlog column metadata → the envelope's column types, and
each decoded value → its Avro bytes. Pure, no I/O.

The binlog's table map (with ``binlog_row_metadata=FULL``) says everything a column
needs: its type code, signedness, fractional-second precision, decimal precision and
scale, character set (``binary`` for byte strings), enum and set labels, bit width,
nullability, and which columns make the primary key. Only MariaDB's ``JSON`` is not in
it (MariaDB stores JSON as ``LONGTEXT`` with a ``json_valid`` check): the capture tells
which columns those are from the catalog (:attr:`MyColumn.json`).

The mapping follows Debezium's MySQL connector with ``decimal.handling.mode=precise``,
``bigint.unsigned.handling.mode=precise`` and ``time.precision.mode=adaptive_time_microseconds``;
docs/capture-mysql.md lists it and every difference.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from bizevents.capture.core.codec import Converters
from bizevents.capture.exceptions import CaptureError
from bizevents.contracts.binary import blob, fastavro_signed_bytes, text, zigzag
from bizevents.contracts.logical import ColumnType, Field, Kind, encoder_for

__all__ = [
    "MyColumn",
    "MyTypeError",
    "binlog_time2",
    "column_type",
    "converters_generation",
    "converters_of",
    "field_of",
    "inline_form",
    "register_converter",
    "type_name",
    "value_writer",
]

# MySQL's binlog type codes (include/mysql_com.h, enum_field_types).
DECIMAL, TINY, SHORT, LONG, FLOAT, DOUBLE, NULL, TIMESTAMP, LONGLONG, INT24 = range(10)
DATE, TIME, DATETIME, YEAR, NEWDATE, VARCHAR, BIT = range(10, 17)
TIMESTAMP2, DATETIME2, TIME2 = 17, 18, 19
JSON, NEWDECIMAL, ENUM, SET = 245, 246, 247, 248
TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = range(249, 256)

_TEXTS: Final = frozenset((VARCHAR, VAR_STRING, STRING, BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB))
_EPOCH_DAY: Final = date(1970, 1, 1).toordinal()
_EPOCH: Final = datetime(1970, 1, 1)
_MICROSECOND: Final = timedelta(microseconds=1)
_F32: Final = struct.Struct("<f")
_F64: Final = struct.Struct("<d")

Writer = Callable[[Any], bytes]


class MyTypeError(CaptureError):
    """A column whose type bizevents does not capture (geometry, ...)."""


@dataclass(frozen=True, slots=True)
class MyColumn:
    """One column as the binlog's table map describes it."""

    name: str
    type: int
    unsigned: bool = False
    nullable: bool = True
    fsp: int = 0
    precision: int | None = None
    scale: int | None = None
    binary: bool = False  # a byte string (character set ``binary``)
    labels: tuple[str, ...] = ()  # ENUM and SET
    bits: int = 0
    json: bool = False  # MariaDB: LONGTEXT CHECK (json_valid(...))
    #: BINARY(n)'s n: the binlog drops a fixed binary value's trailing zero bytes.
    pad: int = 0


def column_type(c: MyColumn, table: str) -> ColumnType:
    """The envelope's column type of ``c`` (a column of ``table``)."""
    t = c.type
    if t == TINY:
        return ColumnType(Kind.INT16)
    if t == SHORT:
        return ColumnType(Kind.INT32 if c.unsigned else Kind.INT16)
    if t == INT24:
        return ColumnType(Kind.INT32)
    if t == LONG:
        return ColumnType(Kind.INT64 if c.unsigned else Kind.INT32)
    if t == LONGLONG:
        # BIGINT UNSIGNED's top half does not fit a long: Debezium's "precise" mode.
        return (
            ColumnType(Kind.DECIMAL, scale=0, precision=20)
            if c.unsigned
            else ColumnType(Kind.INT64)
        )
    if t == FLOAT:
        return ColumnType(Kind.FLOAT32)
    if t == DOUBLE:
        return ColumnType(Kind.FLOAT64)
    if t in (NEWDECIMAL, DECIMAL):
        return ColumnType(Kind.DECIMAL, scale=c.scale or 0, precision=c.precision)
    if t in (DATE, NEWDATE):
        return ColumnType(Kind.DATE)
    if t in (DATETIME, DATETIME2):
        return ColumnType(Kind.TIMESTAMP_MILLIS if c.fsp <= 3 else Kind.TIMESTAMP_MICROS)
    if t in (TIMESTAMP, TIMESTAMP2):
        return ColumnType(Kind.ZONED_TIMESTAMP)
    if t in (TIME, TIME2):
        return ColumnType(Kind.TIME_MICROS)
    if t == YEAR:
        return ColumnType(Kind.INT32, name="io.debezium.time.Year")
    if t == BIT:
        if c.bits == 1:
            return ColumnType(Kind.BOOLEAN)
        return ColumnType(Kind.BYTES, name="io.debezium.data.Bits")
    if t == ENUM:
        return ColumnType(Kind.ENUM, labels=c.labels)
    if t == SET:
        return ColumnType(Kind.STRING, name="io.debezium.data.EnumSet")
    if t == JSON or (t in _TEXTS and c.json):
        return ColumnType(Kind.JSON)
    if t in _TEXTS:
        return ColumnType(Kind.BYTES if c.binary else Kind.STRING)
    raise MyTypeError(
        f"column {c.name} of {table} has binlog type {t}, which bizevents does not capture "
        "(geometry and other spatial types are not supported); exclude the column "
        f'([columns."{table}"] exclude = ["{c.name}"])'
    )


# -- the converter seam ------------------------------------------------------------------

_NAMES: Final = {
    TINY: "tinyint",
    SHORT: "smallint",
    INT24: "mediumint",
    LONG: "int",
    LONGLONG: "bigint",
    FLOAT: "float",
    DOUBLE: "double",
    DECIMAL: "decimal",
    NEWDECIMAL: "decimal",
    DATE: "date",
    NEWDATE: "date",
    DATETIME: "datetime",
    DATETIME2: "datetime",
    TIMESTAMP: "timestamp",
    TIMESTAMP2: "timestamp",
    TIME: "time",
    TIME2: "time",
    YEAR: "year",
    BIT: "bit",
    ENUM: "enum",
    SET: "set",
    JSON: "json",
    VARCHAR: "varchar",
    VAR_STRING: "varchar",
    STRING: "char",
    BLOB: "text",
    TINY_BLOB: "text",
    MEDIUM_BLOB: "text",
    LONG_BLOB: "text",
}
#: The binary twins of the text types' names.
_BINARY: Final = {"varchar": "varbinary", "char": "binary", "text": "blob"}
#: The names :func:`register_converter` takes.
TYPE_NAMES: Final = frozenset(_NAMES.values()) | frozenset(_BINARY.values())

#: Converters registered for a type name (:func:`register_converter`).
_OVERRIDES: Final = Converters[str]()


def type_name(c: MyColumn) -> str:
    """The SQL name of ``c``'s type, as :func:`register_converter` takes it."""
    if c.json:
        return "json"
    name = _NAMES.get(c.type, f"type {c.type}")
    return _BINARY.get(name, name) if c.binary else name


def converters_generation() -> int:
    """A number that changes whenever :func:`register_converter` is called."""
    return _OVERRIDES.generation


def register_converter(name: str, converter: Callable[[Any], Any] | None) -> None:
    """Convert every non-NULL value of the MySQL/MariaDB type ``name`` (``enum``,
    ``decimal``, ``datetime``, ``varchar``, ... as :func:`type_name` names them) with
    ``converter`` before it is written; ``None`` removes it.

    The seam for a conversion fix (docs/capture-mysql.md, "Parked keys"): a value that
    capture cannot convert parks its key, and once a converter that takes it is
    registered (by code loaded into the capture process), ``bizevents capture redrive``
    re-decodes the parked rows with it. ``converter`` takes the value as the binlog
    library decoded it and returns the value capture writes (``None`` writes NULL in a
    nullable column); a codec built earlier is built again at the table's next table map.
    """
    if name not in TYPE_NAMES:
        raise ValueError(f"{name!r} is not a type capture maps ({', '.join(sorted(TYPE_NAMES))})")
    _OVERRIDES.register(name, converter)


def converters_of(columns: Sequence[MyColumn]) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    """The registered converters of ``columns``: ``(column name, converter)``."""
    if not _OVERRIDES:
        return ()
    found = ((c.name, _OVERRIDES.get(type_name(c))) for c in columns)
    return tuple((name, f) for name, f in found if f is not None)


def field_of(c: MyColumn, table: str, optional: bool | None = None) -> Field:
    """``c`` as a field of the envelope (optional when the column is nullable)."""
    return Field(c.name, column_type(c, table), c.nullable if optional is None else optional)


# -- values → Avro bytes ------------------------------------------------------------------


def _int(v: Any) -> bytes:
    if v.__class__ is not int:
        raise TypeError(f"expected an integer, got {type(v).__name__}")
    return zigzag(v)


def _decimal(scale: int) -> Writer:
    factor = 10**scale

    def write(v: Any) -> bytes:
        if not isinstance(v, Decimal | int) or isinstance(v, bool):
            raise TypeError(f"expected a decimal, got {type(v).__name__}")
        # Exact: the value as a fraction (NaN and the infinities raise); at the scale only
        # when the denominator divides 10**scale (trailing zeros past it are no digits).
        num, den = v.as_integer_ratio()
        times, rest = divmod(factor, den)
        if rest:
            raise ValueError(f"{v} has more than {scale} fractional digits")
        return blob(fastavro_signed_bytes(num * times))

    return write


def _string(v: Any) -> bytes:
    if isinstance(v, bytes):
        v = v.decode()  # a text column read without its character set (utf8mb4 text)
    if not isinstance(v, str):
        raise TypeError(f"expected text, got {type(v).__name__}")
    return text(v)


def _padded(n: int) -> Writer:
    def write(v: Any) -> bytes:
        raw = v.encode("latin-1") if isinstance(v, str) else bytes(v)
        return blob(raw.ljust(n, b"\x00"))

    return write


def _bytes(v: Any) -> bytes:
    if isinstance(v, str):
        # pymysqlreplication hands CHAR/VARCHAR of a binary charset over as bytes, but a
        # BINARY column's value may come decoded; encode it back as the server stored it.
        v = v.encode("latin-1")
    if not isinstance(v, bytes | bytearray):
        raise TypeError(f"expected bytes, got {type(v).__name__}")
    return blob(bytes(v))


def _date(v: Any) -> bytes:
    if not isinstance(v, date) or isinstance(v, datetime):
        raise TypeError(f"expected a date, got {type(v).__name__}")
    return zigzag(v.toordinal() - _EPOCH_DAY)


def _micros(v: datetime) -> int:
    return ((v if v.tzinfo is None else v.replace(tzinfo=None)) - _EPOCH) // _MICROSECOND


def _datetime(millis: bool) -> Writer:
    def write(v: Any) -> bytes:
        if not isinstance(v, datetime):
            raise TypeError(f"expected a datetime, got {type(v).__name__}")
        n = _micros(v)
        return zigzag(n // 1000 if millis else n)

    return write


_zoned: Final = encoder_for(ColumnType(Kind.ZONED_TIMESTAMP), "avro")


def _timestamp(v: Any) -> bytes:
    # The binlog carries TIMESTAMP as seconds since the epoch: UTC, whatever the zones.
    if not isinstance(v, datetime):
        raise TypeError(f"expected a datetime, got {type(v).__name__}")
    return text(_zoned(v.replace(tzinfo=UTC)))


def _time(v: Any) -> bytes:
    if not isinstance(v, timedelta):
        raise TypeError(f"expected a duration, got {type(v).__name__}")
    return zigzag((v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds)


def binlog_time2(v: timedelta) -> timedelta:
    """A negative fractional ``TIME(n)`` as pymysqlreplication 1.0 decodes it, put right.

    The binlog packs ``TIME(n)`` as one two's-complement number of the seconds and the
    fraction; the library negates the seconds part on its own and reads the fraction
    as a separate signed number, so -00:00:01.25 comes out as -00:00:01.75 (the
    borrowed second and the fraction's complement). Exact inverse of that, for every value.
    """
    if v >= timedelta(0):
        return v
    magnitude = -v
    fraction = magnitude.microseconds
    if fraction == 0:
        return v
    whole = magnitude - timedelta(microseconds=fraction)
    return -(whole + timedelta(microseconds=1_000_000 - fraction))


def _bool(v: Any) -> bytes:
    # the binlog reader gives BIT as a string of 0s and 1s, the snapshot's reader as bytes
    if isinstance(v, str):
        bit = int(v, 2)
    elif isinstance(v, bytes | bytearray):
        bit = int.from_bytes(v, "big")
    else:
        bit = int(v)
    if bit not in (0, 1):
        raise ValueError(f"{v!r} is not one bit")
    return b"\x01" if bit else b"\x00"


def _bits(n: int) -> Writer:
    width = (n + 7) // 8

    def write(v: Any) -> bytes:
        value = int(v, 2) if isinstance(v, str) else int.from_bytes(v, "big")
        # Debezium's io.debezium.data.Bits: the value's bytes, least significant first.
        return blob(value.to_bytes(width, "little"))

    return write


def _enum(labels: Sequence[str]) -> Writer:
    known = frozenset(labels)

    def write(v: Any) -> bytes:
        if v not in known:
            raise ValueError(f"{v!r} is not one of the enum's labels {list(labels)}")
        return text(v)

    return write


def _set(labels: Sequence[str]) -> Writer:
    def write(v: Any) -> bytes:
        chosen = set(v.split(",")) if isinstance(v, str) else set(v or ())
        chosen.discard("")
        unknown = chosen.difference(labels)
        if unknown:
            raise ValueError(f"{sorted(unknown)} are not labels of the set {list(labels)}")
        # In the order of the definition, as MySQL prints a SET.
        return text(",".join(label for label in labels if label in chosen))

    return write


def _json(v: Any) -> bytes:
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, str):
        return text(v)
    import json

    # MySQL's binary JSON, decoded by the library into Python values.
    return text(json.dumps(v, separators=(",", ":"), ensure_ascii=False))


def _float(pack: Callable[[float], bytes]) -> Writer:
    def write(v: Any) -> bytes:
        if not isinstance(v, float | int) or isinstance(v, bool):
            raise TypeError(f"expected a number, got {type(v).__name__}")
        return pack(float(v))

    return write


def value_writer(c: MyColumn, ct: ColumnType) -> Writer:
    """Python value (as pymysqlreplication decodes ``c``) → Avro bytes of ``ct``."""
    kind = ct.kind
    if kind in (Kind.INT16, Kind.INT32, Kind.INT64):
        return _int
    if kind is Kind.DECIMAL:
        return _decimal(ct.scale or 0)
    if kind is Kind.FLOAT32:
        return _float(_F32.pack)
    if kind is Kind.FLOAT64:
        return _float(_F64.pack)
    if kind is Kind.DATE:
        return _date
    if kind in (Kind.TIMESTAMP_MILLIS, Kind.TIMESTAMP_MICROS):
        return _datetime(kind is Kind.TIMESTAMP_MILLIS)
    if kind is Kind.ZONED_TIMESTAMP:
        return _timestamp
    if kind is Kind.TIME_MICROS:
        return _time
    if kind is Kind.BOOLEAN:
        return _bool
    if kind is Kind.ENUM:
        return _enum(ct.labels or ())
    if kind is Kind.JSON:
        return _json
    if kind is Kind.BYTES:
        if c.type == BIT:
            return _bits(c.bits)
        return _padded(c.pad) if c.pad else _bytes
    if kind is Kind.STRING:
        return _set(c.labels) if c.type == SET else _string
    raise MyTypeError(f"column {c.name}: no writer for {kind}")  # pragma: no cover


def inline_form(c: MyColumn, ct: ColumnType) -> tuple[str, int]:
    """How the compiled record writer may write ``c`` in line, without calling its
    :func:`value_writer`: ``("int", 0)``, ``("str", 0)``, ``("decimal", scale)``,
    ``("datetime", 1000 or 1)`` (the divisor of microseconds), or ``("call", 0)``.

    An in-line form covers the value the library hands over for the column (an
    ``int``, a ``str``, a ``Decimal``, a naive ``datetime``) and must give the
    writer's bytes exactly; any other value goes through the writer
    (``tests/capture/mariadb/test_types.py`` holds the two together).
    """
    kind = ct.kind
    if kind in (Kind.INT16, Kind.INT32, Kind.INT64):
        return ("int", 0)
    if kind is Kind.DECIMAL:
        return ("decimal", ct.scale or 0)
    if kind in (Kind.TIMESTAMP_MILLIS, Kind.TIMESTAMP_MICROS):
        return ("datetime", 1000 if kind is Kind.TIMESTAMP_MILLIS else 1)
    if kind is Kind.STRING and c.type != SET:
        return ("str", 0)
    return ("call", 0)
