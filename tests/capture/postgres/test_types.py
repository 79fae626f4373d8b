"""Tests of pgoutput text values → Python values, and of the Avro fields of columns."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bizevents.capture.exceptions import UnsupportedTypeError, ValueConversionError
from bizevents.capture.postgres.messages import UNCHANGED_TOAST, Column, Relation
from bizevents.capture.postgres.parsers import parse_array, parse_interval
from bizevents.capture.postgres.types import (
    PgTypeMapper,
    avro_field_for,
    enum_types_from_rows,
    from_text,
    numeric_precision_scale,
)
from bizevents.contracts.logical import (
    ColumnType,
    Field,
    JsonDocument,
    Kind,
    avro_field,
    column_type_from_avro,
    struct_decoder,
    struct_encoder,
)

MOOD = 16390
MOOD_ARRAY = 16389

# numeric(10,2): typmod = (10 << 16 | 2) + 4
NUMERIC_10_2 = (10 << 16 | 2) + 4

# (type oid, typmod, text, expected Python value)
CASES: list[tuple[str, int, int, str, Any]] = [
    ("bool-true", 16, -1, "t", True),
    ("bool-false", 16, -1, "f", False),
    ("int2", 21, -1, "-32768", -32768),
    ("int4", 23, -1, "2147483647", 2147483647),
    ("int8", 20, -1, "-9223372036854775808", -9223372036854775808),
    ("oid", 26, -1, "4294967295", 4294967295),
    ("float4", 700, -1, "1.5", 1.5),
    ("float8", 701, -1, "0.1", 0.1),
    ("float8-inf", 701, -1, "-Infinity", float("-inf")),
    ("numeric-typmod", 1700, NUMERIC_10_2, "12345678.90", Decimal("12345678.90")),
    (
        "numeric-free",
        1700,
        -1,
        "3.14159265358979323846264338327950288",
        Decimal("3.14159265358979323846264338327950288"),
    ),
    (
        "numeric-big",
        1700,
        -1,
        "123456789012345678901234567890123456789",
        Decimal("123456789012345678901234567890123456789"),
    ),
    ("numeric-nan", 1700, -1, "NaN", Decimal("NaN")),
    ("money", 790, -1, "-$1,234.56", Decimal("-1234.56")),
    ("text", 25, -1, 'grüße, "world"', 'grüße, "world"'),
    ("varchar", 1043, 24, "abc", "abc"),
    ("bpchar", 1042, 9, "ab   ", "ab   "),
    ("name", 19, -1, "pg_class", "pg_class"),
    ("char", 18, -1, "x", "x"),
    ("bytea-hex", 17, -1, "\\x00ff10", b"\x00\xff\x10"),
    ("bytea-escape", 17, -1, "a\\\\b\\001", b"a\\b\x01"),
    ("date", 1082, -1, "2024-02-29", date(2024, 2, 29)),
    ("date-infinity", 1082, -1, "infinity", date.max),
    ("time", 1083, -1, "13:14:15.123456", time(13, 14, 15, 123456)),
    ("time-24", 1083, -1, "24:00:00", time.max),
    (
        "timetz",
        1266,
        -1,
        "13:14:15+05:30",
        time(13, 14, 15, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    ),
    ("timestamp", 1114, -1, "2024-05-01 12:34:56.5", datetime(2024, 5, 1, 12, 34, 56, 500000)),
    ("timestamp-neg-inf", 1114, -1, "-infinity", datetime.min),
    (
        "timestamptz",
        1184,
        -1,
        "2024-05-01 12:34:56.123456+02",
        datetime(2024, 5, 1, 10, 34, 56, 123456, tzinfo=UTC),
    ),
    (
        "timestamptz-lmt",
        1184,
        -1,
        "1890-01-01 00:00:00+00:09:21",
        datetime(1889, 12, 31, 23, 50, 39, tzinfo=UTC),
    ),
    ("interval", 1186, -1, "3 days 04:05:06.5", timedelta(days=3, hours=4, minutes=5, seconds=6.5)),
    ("interval-neg", 1186, -1, "-1 days +02:00:00", timedelta(days=-1, hours=2)),
    ("interval-month", 1186, -1, "1 mon", timedelta(days=30.4375)),
    ("interval-iso", 1186, -1, "P1DT-2H", timedelta(days=1, hours=-2)),
    (
        "uuid",
        2950,
        -1,
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ),
    ("json", 114, -1, '{"a": [1, 2]}', JsonDocument('{"a": [1, 2]}')),
    ("jsonb", 3802, -1, '{"a": 1}', JsonDocument('{"a": 1}')),
    ("inet", 869, -1, "192.168.0.1/24", "192.168.0.1/24"),
    ("cidr", 650, -1, "10.0.0.0/8", "10.0.0.0/8"),
    ("macaddr", 829, -1, "08:00:2b:01:02:03", "08:00:2b:01:02:03"),
    ("xml", 142, -1, "<a>b</a>", "<a>b</a>"),
    ("int4[]", 1007, -1, "{1,NULL,3}", [1, None, 3]),
    ("int4[][]", 1007, -1, "{{1,2},{3,4}}", [[1, 2], [3, 4]]),
    ("int4[]-bounds", 1007, -1, "[0:1]={7,8}", [7, 8]),
    (
        "text[]",
        1009,
        -1,
        '{plain,"with space","q\\"uote","back\\\\slash",NULL,"NULL",""}',
        ["plain", "with space", 'q"uote', "back\\slash", None, "NULL", ""],
    ),
    ("text[]-empty", 1009, -1, "{}", []),
    ("numeric[]", 1231, NUMERIC_10_2, "{1.50,-2.25}", [Decimal("1.50"), Decimal("-2.25")]),
    ("timestamptz[]", 1185, -1, '{"2024-01-01 00:00:00+00"}', [datetime(2024, 1, 1, tzinfo=UTC)]),
    (
        "uuid[]",
        2951,
        -1,
        "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
        [uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")],
    ),
    ("bytea[]", 1001, -1, '{"\\\\x0102"}', [b"\x01\x02"]),
    ("jsonb[]", 3807, -1, '{"{\\"a\\": 1}"}', [JsonDocument('{"a": 1}')]),
    ("enum", MOOD, -1, "happy", "happy"),
    ("enum[]", MOOD_ARRAY, -1, "{sad,happy}", ["sad", "happy"]),
]


def mapper(**kw: Any) -> PgTypeMapper:
    return PgTypeMapper(
        enum_labels={MOOD: ("sad", "ok", "happy")}, array_elements={MOOD_ARRAY: MOOD}, **kw
    )


@pytest.mark.parametrize(
    ("oid", "typmod", "text", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_text_to_python(oid: int, typmod: int, text: str, expected: Any) -> None:
    """Each type's text form converts to the expected Python value."""
    value = mapper().converter(oid, typmod)(text)
    if isinstance(expected, Decimal) and expected.is_nan():
        assert isinstance(value, Decimal) and value.is_nan()
        return
    assert value == expected
    assert type(value) is type(expected)
    if isinstance(expected, datetime | time):
        assert value.tzinfo == expected.tzinfo


def test_decimal_keeps_its_digits() -> None:
    """numeric keeps trailing zeros and every digit (no float, no context rounding)."""
    value = from_text(1700, "1.10", NUMERIC_10_2)
    assert str(value) == "1.10"
    assert str(from_text(1700, "0.000000000000000000000000000000001")) == "1E-33"


@pytest.mark.parametrize(
    ("typmod", "expected"),
    [
        (-1, None),
        (NUMERIC_10_2, (10, 2)),
        ((5 << 16) + 4, (5, 0)),
        ((3 << 16 | 0x7FE) + 4, (3, -2)),
    ],
)
def test_numeric_typmod(typmod: int, expected: tuple[int, int] | None) -> None:
    """numeric(p, s) comes back from its typmod, negative scales (PG 15) included."""
    assert numeric_precision_scale(typmod) == expected


@pytest.mark.parametrize(
    ("oid", "typmod", "kind", "extra"),
    [
        (16, -1, Kind.BOOLEAN, {}),
        (21, -1, Kind.INT16, {}),
        (23, -1, Kind.INT32, {}),
        (20, -1, Kind.INT64, {}),
        (26, -1, Kind.INT64, {}),
        (700, -1, Kind.FLOAT32, {}),
        (701, -1, Kind.FLOAT64, {}),
        (1700, NUMERIC_10_2, Kind.DECIMAL, {"precision": 10, "scale": 2}),
        (1700, -1, Kind.VARIABLE_DECIMAL, {}),
        (1700, (3 << 16 | 0x7FE) + 4, Kind.VARIABLE_DECIMAL, {}),
        (790, -1, Kind.DECIMAL, {"scale": 2}),
        (25, -1, Kind.STRING, {}),
        (17, -1, Kind.BYTES, {}),
        (1082, -1, Kind.DATE, {}),
        (1083, -1, Kind.TIME_MICROS, {}),
        (1266, -1, Kind.ZONED_TIME, {}),
        (1114, -1, Kind.TIMESTAMP_MICROS, {}),
        (1184, -1, Kind.ZONED_TIMESTAMP, {}),
        (1186, -1, Kind.INTERVAL_MICROS, {}),
        (2950, -1, Kind.UUID, {}),
        (114, -1, Kind.JSON, {}),
        (3802, -1, Kind.JSON, {}),
        (869, -1, Kind.STRING, {}),
        (142, -1, Kind.STRING, {}),
        (MOOD, -1, Kind.ENUM, {"labels": ("sad", "ok", "happy")}),
    ],
)
def test_column_types(oid: int, typmod: int, kind: Kind, extra: dict[str, Any]) -> None:
    """Each type maps to the Debezium-like column type the contracts layer knows."""
    assert mapper().column_type(oid, typmod) == ColumnType(kind, **extra)


def test_array_column_type_has_the_element_type() -> None:
    """An array column is an ARRAY of its element's type (the typmod is the element's)."""
    ct = mapper().column_type(1231, NUMERIC_10_2)
    assert ct == ColumnType(Kind.ARRAY, items=ColumnType(Kind.DECIMAL, precision=10, scale=2))
    assert mapper().column_type(MOOD_ARRAY).items == ColumnType(
        Kind.ENUM, labels=("sad", "ok", "happy")
    )


def test_unknown_type_is_refused_with_table_column_and_type() -> None:
    """A type without a mapping raises UnsupportedTypeError naming table, column, type."""
    types = PgTypeMapper(type_names={600: "point"})
    with pytest.raises(UnsupportedTypeError) as info:
        types.converter(600, table="public.shapes", column="pos")
    assert (info.value.table, info.value.column, info.value.type_name) == (
        "public.shapes",
        "pos",
        "point",
    )
    assert "public.shapes.pos" in str(info.value)


def test_unknown_type_as_text_when_asked() -> None:
    """With the fallback on, an unknown type is captured as its text, an Avro string."""
    types = PgTypeMapper(unknown_as_text=True)
    assert types.converter(600)("(1,2)") == "(1,2)"
    assert types.column_type(600) == ColumnType(Kind.STRING)


def test_enum_types_from_catalog_rows() -> None:
    """Rows of ENUM_TYPES_SQL become the enum and enum-array mappings."""
    labels, arrays = enum_types_from_rows([(MOOD, MOOD_ARRAY, ["sad", "happy"])])
    assert labels == {MOOD: ("sad", "happy")}
    assert arrays == {MOOD_ARRAY: MOOD}
    types = PgTypeMapper().with_enums(labels)
    assert types.column_type(MOOD).labels == ("sad", "happy")


@pytest.mark.parametrize(
    ("oid", "text"),
    [
        (16, "yes"),
        (23, "1.5"),
        (1700, "abc"),
        (1082, "0044-03-15 BC"),
        (1082, "05/01/2024"),
        (1114, "10000-01-01 00:00:00"),
        (1184, "2024-05-01 12:00:00"),
        (1114, "2024-05-01 12:00:00+00"),
        (1186, "1 fortnight"),
        (2950, "not-a-uuid"),
        (114, "{not json"),
        (1007, "{1,2"),
        (1007, "{1,,2}"),
        (1007, "{1,}"),
        (1007, "1,2"),
        (1007, "{1}x"),
        (17, "\\q"),
        (790, "$1.2.3"),
    ],
)
def test_bad_text_raises_value_conversion_error(oid: int, text: str) -> None:
    """Text that does not convert is a ValueConversionError naming the column."""
    rel = Relation(1, "public", "t", "d", (Column(0, "c", oid, -1),))
    convert = PgTypeMapper().row_converter(rel)
    with pytest.raises(ValueConversionError) as info:
        convert((text,))
    assert info.value.table == "public.t" and info.value.column == "c"


def test_row_converter() -> None:
    """A row converter maps names to values; NULL and UNCHANGED_TOAST pass through."""
    rel = Relation(
        1,
        "public",
        "t",
        "d",
        (
            Column(1, "id", 20, -1),
            Column(0, "body", 25, -1),
            Column(0, "price", 1700, NUMERIC_10_2),
            Column(0, "mood", MOOD, -1),
        ),
    )
    convert = mapper().row_converter(rel)
    assert convert(("7", UNCHANGED_TOAST, None, "ok")) == {
        "id": 7,
        "body": UNCHANGED_TOAST,
        "price": None,
        "mood": "ok",
    }
    with pytest.raises(ValueConversionError, match="binary format"):
        convert(("7", b"\x00", None, "ok"))
    with pytest.raises(ValueConversionError, match="3 values for 4 columns"):
        convert(("7", None, None))


@given(st.lists(st.one_of(st.none(), st.text(max_size=8)), max_size=6))
def test_text_array_round_trip(items: list[str | None]) -> None:
    """Any list of strings, written the way PostgreSQL quotes arrays, parses back."""

    def quote(s: str | None) -> str:
        if s is None:
            return "NULL"
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    text = "{" + ",".join(quote(s) for s in items) + "}"
    assert parse_array(text, str) == items


def test_interval_styles_agree() -> None:
    """The postgres and iso_8601 interval styles of one value give the same timedelta."""
    assert parse_interval("1 year 2 mons -3 days +04:05:06.789") == parse_interval(
        "P1Y2M-3DT4H5M6.789S"
    )
    assert parse_interval("00:00:00") == timedelta(0) == parse_interval("PT0S")


# -- Avro fields ------------------------------------------------------------------------

ALL_COLUMNS = [
    Column(1, "id", 20, -1),
    Column(0, "small", 21, -1),
    Column(0, "flag", 16, -1),
    Column(0, "ratio", 701, -1),
    Column(0, "price", 1700, NUMERIC_10_2),
    Column(0, "free", 1700, -1),
    Column(0, "cash", 790, -1),
    Column(0, "name", 25, -1),
    Column(0, "blob", 17, -1),
    Column(0, "day", 1082, -1),
    Column(0, "clock", 1083, -1),
    Column(0, "zclock", 1266, -1),
    Column(0, "at", 1114, -1),
    Column(0, "zat", 1184, -1),
    Column(0, "span", 1186, -1),
    Column(0, "uid", 2950, -1),
    Column(0, "doc", 3802, -1),
    Column(0, "mood", MOOD, -1),
    Column(0, "tags", 1009, -1),
    Column(0, "moods", MOOD_ARRAY, -1),
]


def test_avro_field_shape() -> None:
    """Fields look like Debezium's: connect.name, parameters, nullable unions."""
    types = mapper()
    assert avro_field_for(ALL_COLUMNS[0], types=types, optional=False) == {
        "name": "id",
        "type": "long",
    }
    at = avro_field_for(Column(0, "at", 1114, -1), types=types)
    assert at == {
        "name": "at",
        "type": [
            "null",
            {
                "type": "long",
                "connect.version": 1,
                "connect.name": "io.debezium.time.MicroTimestamp",
            },
        ],
        "default": None,
    }
    mood = avro_field_for(Column(0, "mood", MOOD, -1), types=types)["type"][1]
    assert mood["connect.name"] == "io.debezium.data.Enum"
    assert mood["connect.parameters"] == {"allowed": "sad,ok,happy"}
    price = avro_field_for(Column(0, "p", 1700, NUMERIC_10_2), types=types)["type"][1]
    assert (price["logicalType"], price["precision"], price["scale"]) == ("decimal", 10, 2)


def test_avro_fields_read_back_by_contracts() -> None:
    """The contracts layer reads each Avro field back as the same column type."""
    types = mapper()
    for column in ALL_COLUMNS:
        field = avro_field_for(column, types=types)
        expected = types.column_type(column.type_oid, column.type_modifier)
        read = column_type_from_avro(field["type"])
        # Avro has no 16-bit int: an int16 column reads back as int32 (same values).
        want = Kind.INT32 if expected.kind is Kind.INT16 else expected.kind
        assert read.kind == want, column.name
        if expected.kind is Kind.DECIMAL:
            assert (read.scale, read.precision or None) == (
                expected.scale,
                expected.precision or 64,
            )


def test_values_round_trip_through_avro() -> None:
    """Captured values encode with the contracts encoders, survive Avro, decode equal."""
    types = mapper()
    rel = Relation(1, "public", "everything", "d", tuple(ALL_COLUMNS))
    texts = (
        "1", "-5", "t", "0.25", "12.30", "-0.000123", "$9.99", "héllo", "\\xdeadbeef",
        "2024-02-29", "23:59:59.999999", "01:02:03-07", "2024-05-01 12:34:56.789",
        "2024-05-01 12:34:56.789+02", "1 day 00:00:01", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        '{"a": 1}', "ok", '{x,"y z",NULL}', "{happy,sad}",
    )  # fmt: skip
    row = types.row_converter(rel)(texts)
    fields = [types.field(c, optional=not c.is_key) for c in ALL_COLUMNS]
    avro_fields = [avro_field_for(c, types=types, optional=not c.is_key) for c in ALL_COLUMNS]
    schema = {"type": "record", "name": "Value", "fields": avro_fields}
    parsed = fastavro.parse_schema(schema)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, struct_encoder(fields, "avro")(row))
    buf.seek(0)
    # The consumer's view: fields read back from the Avro schema, as the contracts do.
    read_fields = [avro_field(f) for f in avro_fields]
    back = struct_decoder(read_fields, "avro")(fastavro.schemaless_reader(buf, parsed, parsed))
    for name, value in row.items():
        got = back[name]
        if isinstance(value, datetime) and value.tzinfo is None:
            # MicroTimestamp reads back as the same wall clock, made aware in UTC.
            value = value.replace(tzinfo=UTC)
        if isinstance(value, time) and value.tzinfo is not None:
            assert got.utcoffset() is not None
            continue
        assert got == value, name


def test_fields_mark_key_columns_required() -> None:
    """fields() makes key columns non-optional and the rest optional."""
    rel = Relation(1, "public", "t", "d", (Column(1, "id", 20, -1), Column(0, "n", 25, -1)))
    assert PgTypeMapper().fields(rel) == (
        Field("id", ColumnType(Kind.INT64), False),
        Field("n", ColumnType(Kind.STRING), True),
    )
