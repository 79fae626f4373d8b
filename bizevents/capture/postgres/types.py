"""PostgreSQL column values: from pgoutput's text format to Python, and their Avro types.

``pgoutput`` sends each column in its type's text output form (``1234.50``,
``2024-05-01 12:34:56.5+00``, ``{1,2,NULL}``, ``\\x0102``). :class:`PgTypeMapper`
turns a column's type oid and type modifier into

* a converter from that text to the Python value a translator author expects
  (``Decimal`` exactly, ``date``/``time``/``datetime``, ``UUID``, ``bytes``,
  :class:`~bizevents.contracts.logical.JsonDocument`, enum labels, lists for arrays), and
* the :class:`~bizevents.contracts.logical.ColumnType` (hence the Debezium-style Avro field, with
  its ``connect.name``) that the technical-event encoders write and the contracts
  layer's decoders read back.

The mapping table, the choices where Debezium offers several, and the limits are in
``docs/capture-postgres.md``. The text forms of dates, times and intervals depend on the
session's ``DateStyle``/``IntervalStyle``/``TimeZone``; a replication connection should
pass :data:`REPLICATION_SESSION_OPTIONS` so the output is the one parsed here (by
:mod:`bizevents.capture.postgres.parsers`).

Pure: no I/O. A value that does not convert raises
:class:`~bizevents.capture.exceptions.ValueConversionError`; a type without a mapping raises
:class:`~bizevents.capture.exceptions.UnsupportedTypeError` unless ``unknown_as_text`` is set.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bizevents.capture.core.codec import Converters
from bizevents.capture.exceptions import UnsupportedTypeError, ValueConversionError
from bizevents.capture.postgres.messages import Column, Relation, TupleData
from bizevents.capture.postgres.parsers import (
    Converter,
    parse_array,
    parse_bool,
    parse_bytea,
    parse_date,
    parse_float,
    parse_interval,
    parse_money,
    parse_numeric,
    parse_time,
    parse_timestamp,
    parse_timestamptz,
    parse_timetz,
)
from bizevents.contracts.logical import UNAVAILABLE, ColumnType, Field, JsonDocument, Kind

__all__ = [
    "BUILTIN_TYPE_OIDS",
    "ENUM_TYPES_SQL",
    "MONEY_SCALE",
    "REPLICATION_SESSION_OPTIONS",
    "PgTypeMapper",
    "RowConverter",
    "avro_field_for",
    "converters_generation",
    "enum_types_from_rows",
    "from_text",
    "numeric_precision_scale",
    "register_converter",
]


#: libpq ``options`` for the replication connection: pins the text forms parsed here
#: (ISO dates, the ``postgres`` interval style, UTC offsets, hex bytea, ``$1,234.56``
#: money, shortest exact floats). The walsender runs the types' output functions under
#: these settings.
REPLICATION_SESSION_OPTIONS: Final = (
    "-c datestyle=ISO,MDY -c intervalstyle=postgres -c timezone=UTC "
    "-c bytea_output=hex -c lc_monetary=C -c extra_float_digits=1"
)

#: Enum types, their array types and their labels in order; feed the rows to
#: :func:`enum_types_from_rows`.
ENUM_TYPES_SQL: Final = (
    "SELECT t.oid, t.typarray, array_agg(e.enumlabel::text ORDER BY e.enumsortorder) "
    "FROM pg_type t JOIN pg_enum e ON e.enumtypid = t.oid GROUP BY t.oid, t.typarray"
)

#: Fraction digits of ``money`` (Debezium's ``money.fraction.digits`` default).
MONEY_SCALE: Final = 2

# -- type table -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Scalar:
    name: str
    parse: Converter | None  # None: the text is the value
    column_type: ColumnType | None  # None: depends on the typmod (numeric)


_STRING: Final = ColumnType(Kind.STRING)

_SCALARS: Final[dict[int, _Scalar]] = {
    16: _Scalar("boolean", parse_bool, ColumnType(Kind.BOOLEAN)),
    17: _Scalar("bytea", parse_bytea, ColumnType(Kind.BYTES)),
    18: _Scalar('"char"', None, _STRING),
    19: _Scalar("name", None, _STRING),
    20: _Scalar("bigint", int, ColumnType(Kind.INT64)),
    21: _Scalar("smallint", int, ColumnType(Kind.INT16)),
    23: _Scalar("integer", int, ColumnType(Kind.INT32)),
    25: _Scalar("text", None, _STRING),
    26: _Scalar("oid", int, ColumnType(Kind.INT64)),
    114: _Scalar("json", JsonDocument, ColumnType(Kind.JSON)),
    142: _Scalar("xml", None, _STRING),
    650: _Scalar("cidr", None, _STRING),
    700: _Scalar("real", parse_float, ColumnType(Kind.FLOAT32)),
    701: _Scalar("double precision", parse_float, ColumnType(Kind.FLOAT64)),
    774: _Scalar("macaddr8", None, _STRING),
    790: _Scalar("money", parse_money, ColumnType(Kind.DECIMAL, scale=MONEY_SCALE)),
    829: _Scalar("macaddr", None, _STRING),
    869: _Scalar("inet", None, _STRING),
    1042: _Scalar("character", None, _STRING),
    1043: _Scalar("character varying", None, _STRING),
    1082: _Scalar("date", parse_date, ColumnType(Kind.DATE)),
    1083: _Scalar("time without time zone", parse_time, ColumnType(Kind.TIME_MICROS)),
    1114: _Scalar(
        "timestamp without time zone", parse_timestamp, ColumnType(Kind.TIMESTAMP_MICROS)
    ),
    1184: _Scalar("timestamp with time zone", parse_timestamptz, ColumnType(Kind.ZONED_TIMESTAMP)),
    1186: _Scalar("interval", parse_interval, ColumnType(Kind.INTERVAL_MICROS)),
    1266: _Scalar("time with time zone", parse_timetz, ColumnType(Kind.ZONED_TIME)),
    1700: _Scalar("numeric", parse_numeric, None),
    2950: _Scalar("uuid", uuid.UUID, ColumnType(Kind.UUID)),
    3802: _Scalar("jsonb", JsonDocument, ColumnType(Kind.JSON)),
}

#: Built-in array type oid → element type oid (for the scalars above).
_ARRAYS: Final[dict[int, int]] = {
    1000: 16,
    1001: 17,
    1002: 18,
    1003: 19,
    1016: 20,
    1005: 21,
    1007: 23,
    1009: 25,
    1028: 26,
    199: 114,
    143: 142,
    651: 650,
    1021: 700,
    1022: 701,
    775: 774,
    791: 790,
    1040: 829,
    1041: 869,
    1014: 1042,
    1015: 1043,
    1182: 1082,
    1183: 1083,
    1115: 1114,
    1185: 1184,
    1187: 1186,
    1270: 1266,
    1231: 1700,
    2951: 2950,
    3807: 3802,
}

#: Every built-in type oid (scalars and their arrays) with a mapping here.
BUILTIN_TYPE_OIDS: Final = frozenset(_SCALARS) | frozenset(_ARRAYS)

#: Converters registered in place of a built-in scalar's, by oid (:func:`register_converter`).
_OVERRIDES: Final = Converters[int]()


def converters_generation() -> int:
    """A number that changes whenever :func:`register_converter` is called."""
    return _OVERRIDES.generation


def register_converter(type_name: str, converter: Converter | None) -> None:
    """Convert the text of the built-in scalar type ``type_name`` (``numeric``,
    ``timestamp with time zone``, ... as :meth:`PgTypeMapper.type_name` names them)
    with ``converter`` from now on; ``None`` restores the built-in one.

    The seam for a conversion fix (docs/capture-postgres.md, "Parked keys"): a value
    that capture cannot convert parks its key, and once a converter that takes it is
    registered (by code loaded into the capture process), ``bizevents capture
    redrive`` re-decodes the parked changes with it. Codecs built earlier keep the
    converters they were built with until a value fails to convert (then capture
    builds the table's codec again); a re-drive builds its codec anew. ``converter``
    returns the Python value of the type (a ``Decimal`` for ``numeric``, ...).
    """
    oid = next((o for o, s in _SCALARS.items() if s.name == type_name), None)
    if oid is None:
        known = ", ".join(sorted(s.name for s in _SCALARS.values()))
        raise ValueError(f"{type_name!r} is not a built-in scalar type capture maps ({known})")
    _OVERRIDES.register(oid, converter)


def numeric_precision_scale(typmod: int) -> tuple[int, int] | None:
    """``(precision, scale)`` of ``numeric(p, s)`` from its type modifier; ``None`` if unset.

    The scale is an 11-bit signed number since PostgreSQL 15 (``numeric(3, -2)``).
    """
    if typmod < 4:
        return None
    raw = typmod - 4
    precision = (raw >> 16) & 0xFFFF
    scale = ((raw & 0x7FF) ^ 1024) - 1024
    return precision, scale


def _numeric_type(typmod: int) -> ColumnType:
    ps = numeric_precision_scale(typmod)
    if ps is None or ps[1] < 0:
        # No declared scale (or a negative one, which Avro's decimal cannot carry).
        return ColumnType(Kind.VARIABLE_DECIMAL)
    return ColumnType(Kind.DECIMAL, precision=ps[0], scale=ps[1])


def from_text(type_oid: int, text: str, typmod: int = -1) -> Any:
    """The Python value of a built-in type's text form (arrays included)."""
    return PgTypeMapper().converter(type_oid, typmod)(text)


def enum_types_from_rows(
    rows: Iterable[tuple[int, int, Sequence[str]]],
) -> tuple[dict[int, tuple[str, ...]], dict[int, int]]:
    """``(enum oid → labels, enum array oid → enum oid)`` from :data:`ENUM_TYPES_SQL` rows."""
    labels: dict[int, tuple[str, ...]] = {}
    arrays: dict[int, int] = {}
    for oid, array_oid, enum_labels in rows:
        labels[int(oid)] = tuple(enum_labels)
        if array_oid:
            arrays[int(array_oid)] = int(oid)
    return labels, arrays


class RowConverter:
    """Turns one relation's TupleData into ``{column: Python value}``.

    ``None`` (NULL) and :data:`~bizevents.capture.postgres.messages.UNCHANGED_TOAST` pass through.
    """

    __slots__ = ("_plan", "relation", "types")

    def __init__(self, relation: Relation, plan: Sequence[tuple[str, Converter | None, str]]):
        self.relation = relation
        self._plan = tuple(plan)
        self.types = tuple(name for _, _, name in plan)

    def __call__(self, values: TupleData) -> dict[str, Any]:
        plan = self._plan
        if len(values) != len(plan):
            raise ValueConversionError(
                self.relation.qualified_name,
                "*",
                "row",
                "",
                f"{len(values)} values for {len(plan)} columns",
            )
        out: dict[str, Any] = {}
        for (name, conv, _), value in zip(plan, values, strict=True):
            if value.__class__ is str:
                if conv is None:
                    out[name] = value
                else:
                    try:
                        out[name] = conv(value)
                    except (ValueError, ArithmeticError, TypeError) as exc:
                        raise self._error(name, str(value), exc) from exc
            elif value is None or value is UNAVAILABLE:
                out[name] = value
            else:
                raise self._error(name, repr(value)[:80], "the binary format is not supported")
        return out

    def _error(self, column: str, text: str, why: object) -> ValueConversionError:
        type_name = next(t for n, _, t in self._plan if n == column)
        return ValueConversionError(
            self.relation.qualified_name, column, type_name, text, str(why) or type(why).__name__
        )


class PgTypeMapper:
    """Which converter and which column type each PostgreSQL type gets.

    ``enum_labels`` maps enum type oids to their labels in order (read from
    ``pg_enum``, see :data:`ENUM_TYPES_SQL`); ``array_elements`` maps further array
    type oids (an enum's array type) to their element type; ``type_names`` names types
    for error messages (the names of pgoutput's Type messages). With
    ``unknown_as_text`` a type without a mapping is captured as its text form (an Avro
    string) instead of raising :class:`~bizevents.capture.exceptions.UnsupportedTypeError`.
    """

    __slots__ = ("_arrays", "_enums", "_names", "unknown_as_text")

    def __init__(
        self,
        *,
        enum_labels: Mapping[int, Sequence[str]] | None = None,
        array_elements: Mapping[int, int] | None = None,
        type_names: Mapping[int, str] | None = None,
        unknown_as_text: bool = False,
    ) -> None:
        self._enums = {oid: tuple(labels) for oid, labels in (enum_labels or {}).items()}
        self._arrays = {**_ARRAYS, **(array_elements or {})}
        self._names = dict(type_names or {})
        self.unknown_as_text = unknown_as_text

    def with_enums(self, enum_labels: Mapping[int, Sequence[str]]) -> PgTypeMapper:
        """A mapper that also knows these enums (labels replace known ones of the same oid)."""
        return PgTypeMapper(
            enum_labels={**self._enums, **enum_labels},
            array_elements=self._arrays,
            type_names=self._names,
            unknown_as_text=self.unknown_as_text,
        )

    def type_name(self, type_oid: int) -> str:
        """A readable name of the type (``oid 16385`` when nothing names it)."""
        if type_oid in _SCALARS:
            return _SCALARS[type_oid].name
        if type_oid in self._arrays:
            return self.type_name(self._arrays[type_oid]) + "[]"
        return self._names.get(type_oid, f"oid {type_oid}")

    def _unsupported(self, type_oid: int, table: str, column: str) -> UnsupportedTypeError:
        return UnsupportedTypeError(table, column, self.type_name(type_oid))

    def column_type(
        self, type_oid: int, typmod: int = -1, *, table: str = "?", column: str = "?"
    ) -> ColumnType:
        """The :class:`~bizevents.contracts.logical.ColumnType` of values of this type."""
        scalar = _SCALARS.get(type_oid)
        if scalar is not None:
            return scalar.column_type or _numeric_type(typmod)
        if type_oid in self._enums:
            return ColumnType(Kind.ENUM, labels=self._enums[type_oid])
        element = self._arrays.get(type_oid)
        if element is not None:
            # An array's typmod is its element's (numeric(10,2)[]).
            items = self.column_type(element, typmod, table=table, column=column)
            return ColumnType(Kind.ARRAY, items=items)
        if self.unknown_as_text:
            return _STRING
        raise self._unsupported(type_oid, table, column)

    def converter(
        self, type_oid: int, typmod: int = -1, *, table: str = "?", column: str = "?"
    ) -> Converter:
        """The function from a (non-NULL) text value of this type to its Python value."""
        override = _OVERRIDES.get(type_oid)
        if override is not None:
            return override
        scalar = _SCALARS.get(type_oid)
        if scalar is not None:
            return scalar.parse or _identity
        if type_oid in self._enums:
            return _identity
        element = self._arrays.get(type_oid)
        if element is not None:
            item = self.converter(element, typmod, table=table, column=column)
            return lambda text: parse_array(text, item)
        if self.unknown_as_text:
            return _identity
        raise self._unsupported(type_oid, table, column)

    def _direct(self, type_oid: int, typmod: int, table: str, column: str) -> Converter | None:
        # None where the text already is the value, so the row loop skips the call.
        override = _OVERRIDES.get(type_oid)
        if override is not None:
            return override
        scalar = _SCALARS.get(type_oid)
        if scalar is not None:
            return scalar.parse
        if type_oid in self._enums:
            return None
        conv = self.converter(type_oid, typmod, table=table, column=column)
        return None if conv is _identity else conv

    def row_converter(self, relation: Relation) -> RowConverter:
        """The converter of ``relation``'s tuples (build once per Relation message)."""
        table = relation.qualified_name
        plan = [
            (
                c.name,
                self._direct(c.type_oid, c.type_modifier, table, c.name),
                self.type_name(c.type_oid),
            )
            for c in relation.columns
        ]
        return RowConverter(relation, plan)

    def field(self, column: Column, *, table: str = "?", optional: bool = True) -> Field:
        """The column as a contracts :class:`~bizevents.contracts.logical.Field`."""
        ct = self.column_type(
            column.type_oid, column.type_modifier, table=table, column=column.name
        )
        return Field(column.name, ct, optional)

    def fields(self, relation: Relation, *, key_required: bool = True) -> tuple[Field, ...]:
        """Every column of ``relation`` as a Field; key columns are not optional if asked."""
        table = relation.qualified_name
        return tuple(
            self.field(c, table=table, optional=not (key_required and c.is_key))
            for c in relation.columns
        )


def _identity(text: str) -> str:
    return text


def avro_field_for(
    column: Column,
    *,
    table: str = "?",
    types: PgTypeMapper | None = None,
    optional: bool = True,
) -> dict[str, Any]:
    """The Avro record field Debezium's Avro converter would write for ``column``.

    Optional fields are ``["null", T]`` with a null default. The type carries the
    ``connect.name``/``connect.parameters`` that
    :func:`bizevents.contracts.logical.column_type_from_avro` reads back.
    """
    mapper = types or PgTypeMapper()
    schema = mapper.column_type(
        column.type_oid, column.type_modifier, table=table, column=column.name
    ).avro_schema()
    if optional:
        return {"name": column.name, "type": ["null", schema], "default": None}
    return {"name": column.name, "type": schema}
