"""Debezium / Kafka Connect logical types to Python values and back."""

from __future__ import annotations

import pickle
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bizevents.contracts.logical import (
    UNAVAILABLE,
    UNAVAILABLE_MARKER,
    ColumnType,
    JsonDocument,
    Kind,
    Unavailable,
    column_type_from_avro,
    column_type_from_connect,
    decoder_for,
    encoder_for,
)
from tests.contracts.strategies import column_types, values_of


def decode_json(schema: dict[str, Any], wire: Any) -> Any:
    conv = decoder_for(column_type_from_connect(schema), "json")
    return wire if conv is None else conv(wire)


def decode_avro(schema: Any, wire: Any) -> Any:
    conv = decoder_for(column_type_from_avro(schema), "avro")
    return wire if conv is None else conv(wire)


def _s(literal: str, name: str | None = None, **params: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": literal, "optional": True}
    if name:
        schema["name"] = name
    if params:
        schema["parameters"] = params
    return schema


DECIMAL = "org.apache.kafka.connect.data.Decimal"
DBZ = "io.debezium."

# (id, Connect schema as Debezium embeds it, JSON wire value, expected Python value).
# Wire values follow the encodings in Debezium's data type documentation: epoch counts
# for temporal types, ISO-8601 strings for zoned ones, base64 for bytes and decimals.
JSON_CASES = [
    ("decimal", _s("bytes", DECIMAL, scale="2"), "AN4=", Decimal("2.22")),
    ("decimal-negative", _s("bytes", DECIMAL, scale="1"), "8Q==", Decimal("-1.5")),
    ("decimal-zero-scale", _s("bytes", DECIMAL, scale="0"), "AQA=", Decimal(256)),
    ("decimal-as-number", _s("bytes", DECIMAL, scale="2"), Decimal("2.22"), Decimal("2.22")),
    (
        "variable-scale-decimal",
        {
            "type": "struct",
            "name": DBZ + "data.VariableScaleDecimal",
            "fields": [
                {"type": "int32", "optional": False, "field": "scale"},
                {"type": "bytes", "optional": False, "field": "value"},
            ],
        },
        {"scale": 3, "value": "AeJA"},
        Decimal("123.456"),
    ),
    (
        "timestamp-ms",
        _s("int64", DBZ + "time.Timestamp"),
        1529507596945,
        datetime(2018, 6, 20, 15, 13, 16, 945000, tzinfo=UTC),
    ),
    (
        "connect-timestamp",
        _s("int64", "org.apache.kafka.connect.data.Timestamp"),
        1529507596945,
        datetime(2018, 6, 20, 15, 13, 16, 945000, tzinfo=UTC),
    ),
    (
        "micro-timestamp",
        _s("int64", DBZ + "time.MicroTimestamp"),
        1529507596945104,
        datetime(2018, 6, 20, 15, 13, 16, 945104, tzinfo=UTC),
    ),
    (
        "nano-timestamp-floors-to-micros",
        _s("int64", DBZ + "time.NanoTimestamp"),
        1529507596945104999,
        datetime(2018, 6, 20, 15, 13, 16, 945104, tzinfo=UTC),
    ),
    (
        "micro-timestamp-before-epoch",
        _s("int64", DBZ + "time.MicroTimestamp"),
        -1,
        datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ),
    (
        "zoned-timestamp",
        _s("string", DBZ + "time.ZonedTimestamp"),
        "2018-06-20T13:13:16.945104Z",
        datetime(2018, 6, 20, 13, 13, 16, 945104, tzinfo=UTC),
    ),
    (
        "zoned-timestamp-offset",
        _s("string", DBZ + "time.ZonedTimestamp"),
        "2018-06-20T15:13:16+02:00",
        datetime(2018, 6, 20, 13, 13, 16, tzinfo=UTC),
    ),
    ("date", _s("int32", DBZ + "time.Date"), 17702, date(2018, 6, 20)),
    ("connect-date", _s("int32", "org.apache.kafka.connect.data.Date"), 0, date(1970, 1, 1)),
    ("time-ms", _s("int32", DBZ + "time.Time"), 55996945, time(15, 33, 16, 945000)),
    ("micro-time", _s("int64", DBZ + "time.MicroTime"), 55996945104, time(15, 33, 16, 945104)),
    ("nano-time", _s("int64", DBZ + "time.NanoTime"), 55996945104999, time(15, 33, 16, 945104)),
    (
        "zoned-time",
        _s("string", DBZ + "time.ZonedTime"),
        "15:33:16.945104Z",
        time(15, 33, 16, 945104, tzinfo=UTC),
    ),
    (
        "micro-duration",
        _s("int64", DBZ + "time.MicroDuration"),
        90061000001,
        timedelta(days=1, hours=1, minutes=1, seconds=1, microseconds=1),
    ),
    (
        "uuid",
        _s("string", DBZ + "data.Uuid"),
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ),
    (
        "json",
        _s("string", DBZ + "data.Json"),
        '{"a": [1, 2.5, null]}',
        JsonDocument('{"a": [1, 2.5, null]}'),
    ),
    (
        "enum-label",
        _s("string", DBZ + "data.Enum", allowed="pending,shipped,delivered"),
        "shipped",
        "shipped",
    ),
    ("bytes", _s("bytes"), "AQID", b"\x01\x02\x03"),
    ("int64", _s("int64"), 2**62, 2**62),
    ("float64-from-decimal-text", _s("float64"), Decimal("0.1"), 0.1),
    # the literals and non-finite values Connect's JsonConverter (so Debezium) writes
    ("connect-float", _s("float"), Decimal("1.5"), 1.5),
    ("connect-double-minus-infinity", _s("double"), "-Infinity", float("-inf")),
    ("connect-float-infinity", _s("float"), "Infinity", float("inf")),
    ("boolean", _s("boolean"), True, True),
    (
        "array-of-ints",
        {"type": "array", "items": _s("int32")},
        [1, None, 3],
        [1, None, 3],
    ),
    (
        "array-of-uuids",
        {"type": "array", "items": _s("string", DBZ + "data.Uuid")},
        ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"],
        [uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")],
    ),
    ("toast-text", _s("string"), UNAVAILABLE_MARKER, UNAVAILABLE),
    ("toast-json", _s("string", DBZ + "data.Json"), UNAVAILABLE_MARKER, UNAVAILABLE),
    ("toast-bytes", _s("bytes"), "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==", UNAVAILABLE),
    (
        "toast-array",
        {"type": "array", "items": _s("string")},
        [UNAVAILABLE_MARKER],
        UNAVAILABLE,
    ),
]


@pytest.mark.parametrize(
    ("schema", "wire", "expected"), [c[1:] for c in JSON_CASES], ids=[c[0] for c in JSON_CASES]
)
def test_json_wire_value_decodes_to_python(
    schema: dict[str, Any], wire: Any, expected: Any
) -> None:
    """Each documented Debezium JSON encoding decodes to the expected Python value."""
    got = decode_json(schema, wire)
    assert got == expected
    assert type(got) is type(expected)


def test_json_document_keeps_text_and_value() -> None:
    """A Json column gives both its original text and its parsed value."""
    doc = decode_json(_s("string", DBZ + "data.Json"), '{"b": 1,  "a": [true]}')
    assert doc.text == '{"b": 1,  "a": [true]}'
    assert doc.value == {"b": 1, "a": [True]}


def _a(avro_type: Any, **attrs: Any) -> dict[str, Any]:
    return {"type": avro_type, **attrs}


# (id, Avro writer type, value as fastavro returns it, expected Python value)
AVRO_CASES = [
    (
        "decimal-logical-already-converted",
        _a("bytes", logicalType="decimal", precision=10, scale=2, **{"connect.name": DECIMAL}),
        Decimal("2.22"),
        Decimal("2.22"),
    ),
    (
        "connect-decimal-without-logical-type",
        _a("bytes", **{"connect.name": DECIMAL, "connect.parameters": {"scale": "2"}}),
        b"\x00\xde",
        Decimal("2.22"),
    ),
    (
        "variable-scale-decimal",
        {
            "type": "record",
            "name": "VariableScaleDecimal",
            "namespace": "io.debezium.data",
            "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
            "connect.name": DBZ + "data.VariableScaleDecimal",
        },
        {"scale": 3, "value": b"\x01\xe2\x40"},
        Decimal("123.456"),
    ),
    (
        "micro-timestamp",
        _a("long", **{"connect.name": DBZ + "time.MicroTimestamp"}),
        1529507596945104,
        datetime(2018, 6, 20, 15, 13, 16, 945104, tzinfo=UTC),
    ),
    (
        "avro-timestamp-millis",
        _a("long", logicalType="timestamp-millis"),
        datetime(2018, 6, 20, 15, 13, 16, 945000, tzinfo=UTC),
        datetime(2018, 6, 20, 15, 13, 16, 945000, tzinfo=UTC),
    ),
    (
        "avro-local-timestamp-micros-made-aware",
        _a("long", logicalType="local-timestamp-micros"),
        datetime(2018, 6, 20, 15, 13, 16, 945104),
        datetime(2018, 6, 20, 15, 13, 16, 945104, tzinfo=UTC),
    ),
    (
        "date",
        _a("int", **{"connect.name": DBZ + "time.Date"}),
        17702,
        date(2018, 6, 20),
    ),
    ("avro-date", _a("int", logicalType="date"), date(2018, 6, 20), date(2018, 6, 20)),
    (
        "avro-uuid",
        _a("string", logicalType="uuid"),
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ),
    (
        "debezium-uuid",
        _a("string", **{"connect.name": DBZ + "data.Uuid"}),
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ),
    ("avro-enum-symbol", {"type": "enum", "name": "E", "symbols": ["A", "B"]}, "B", "B"),
    ("bytes", "bytes", b"\x00", b"\x00"),
    ("toast-bytes", "bytes", UNAVAILABLE_MARKER.encode(), UNAVAILABLE),
    ("toast-string", ["null", "string"], UNAVAILABLE_MARKER, UNAVAILABLE),
    # MySQL's TIME runs past a day and below zero; Debezium writes it as MicroTime
    (
        "time-24h",
        _a("long", **{"connect.name": DBZ + "time.MicroTime"}),
        86_400_000_000,
        timedelta(hours=24),
    ),
    (
        "time-negative",
        _a("long", **{"connect.name": DBZ + "time.MicroTime"}),
        -3_020_399_999_999,
        -timedelta(hours=838, minutes=59, seconds=59, microseconds=999_999),
    ),
]


@pytest.mark.parametrize(
    ("schema", "wire", "expected"), [c[1:] for c in AVRO_CASES], ids=[c[0] for c in AVRO_CASES]
)
def test_avro_value_decodes_to_python(schema: Any, wire: Any, expected: Any) -> None:
    """Values as fastavro reads them convert by their connect.name or logicalType."""
    got = decode_avro(schema, wire)
    assert got == expected
    assert type(got) is type(expected)


BAD_JSON = [
    ("time-not-a-number", _s("int64", DBZ + "time.MicroTime"), "12:00"),
    ("bad-base64", _s("bytes"), "not base64!"),
    ("int-as-string", _s("int64"), "12"),
    ("bool-as-int", _s("int32"), True),
    ("int-as-bool", _s("boolean"), 1),
    ("naive-zoned-timestamp", _s("string", DBZ + "time.ZonedTimestamp"), "2018-06-20T13:13:16"),
    ("bad-uuid", _s("string", DBZ + "data.Uuid"), "nope"),
    ("bad-json", _s("string", DBZ + "data.Json"), "{"),
    ("unknown-enum-label", _s("string", DBZ + "data.Enum", allowed="a,b"), "c"),
    ("date-out-of-range", _s("int32", DBZ + "time.Date"), 10**9),
    ("array-not-list", {"type": "array", "items": _s("int32")}, 3),
]


@pytest.mark.parametrize(
    ("schema", "wire"), [c[1:] for c in BAD_JSON], ids=[c[0] for c in BAD_JSON]
)
def test_bad_wire_values_raise_value_or_type_error(schema: dict[str, Any], wire: Any) -> None:
    """A value that does not fit its type fails with an ordinary error (the decoders
    turn it into DecodeError)."""
    with pytest.raises((ValueError, TypeError, OverflowError)):
        decode_json(schema, wire)


@given(st.data(), column_types)
def test_every_type_round_trips_through_both_wires(data: st.DataObject, ct: ColumnType) -> None:
    """encoder_for then decoder_for gives the value back, for Avro and JSON wires."""
    value = data.draw(values_of(ct, toast=True))
    for wire in ("avro", "json"):
        encoded = encoder_for(ct, wire)(value)
        if wire == "avro" and ct.kind is Kind.DECIMAL:
            ct_read = ColumnType(Kind.DECIMAL, scale=ct.scale, logical="decimal")
        else:
            ct_read = ct
        conv = decoder_for(ct_read, wire)
        assert (encoded if conv is None else conv(encoded)) == value


def test_encoders_refuse_wrong_python_types() -> None:
    """An encoder given a value of another type raises TypeError."""
    cases = [
        (ColumnType(Kind.INT32), "1"),
        (ColumnType(Kind.INT32), True),
        (ColumnType(Kind.DECIMAL, scale=2), 1.5),
        (ColumnType(Kind.TIMESTAMP_MICROS), date(2020, 1, 1)),
        (ColumnType(Kind.DATE), datetime(2020, 1, 1)),
        (ColumnType(Kind.UUID), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        (ColumnType(Kind.JSON), {"a": 1}),
    ]
    for ct, value in cases:
        with pytest.raises(TypeError):
            encoder_for(ct, "json")(value)


def test_unavailable_placeholders_of_every_toastable_type() -> None:
    """UNAVAILABLE is the marker in strings, its bytes in bytes and decimals, Debezium's
    number list in arrays of numbers; fixed-size scalars (never TOASTed) have none."""
    assert encoder_for(ColumnType(Kind.STRING), "json")(UNAVAILABLE) == UNAVAILABLE_MARKER
    assert encoder_for(ColumnType(Kind.BYTES), "avro")(UNAVAILABLE) == UNAVAILABLE_MARKER.encode()
    text_array = ColumnType(Kind.ARRAY, items=ColumnType(Kind.STRING))
    assert encoder_for(text_array, "json")(UNAVAILABLE) == [UNAVAILABLE_MARKER]
    int_array = ColumnType(Kind.ARRAY, items=ColumnType(Kind.INT32))
    assert encoder_for(int_array, "json")(UNAVAILABLE) == list(UNAVAILABLE_MARKER.encode())
    decimal = ColumnType(Kind.DECIMAL, scale=2)
    assert encoder_for(decimal, "avro")(UNAVAILABLE) == UNAVAILABLE_MARKER.encode()
    for ct in (int_array, decimal, ColumnType(Kind.VARIABLE_DECIMAL), text_array):
        for wire in ("json", "avro"):
            decode = decoder_for(ct, wire)  # type: ignore[arg-type]
            assert decode is not None
            if not (wire == "avro" and ct.kind is Kind.DECIMAL):  # fastavro's job there
                assert decode(encoder_for(ct, wire)(UNAVAILABLE)) is UNAVAILABLE  # type: ignore[arg-type]
    for ct in (ColumnType(Kind.INT64), ColumnType(Kind.DATE)):
        with pytest.raises(TypeError):
            encoder_for(ct, "json")(UNAVAILABLE)


def test_unavailable_is_a_singleton_that_survives_pickling() -> None:
    """UNAVAILABLE stays itself across pickling (Spark executors), and is not None."""
    assert Unavailable() is UNAVAILABLE
    assert pickle.loads(pickle.dumps(UNAVAILABLE)) is UNAVAILABLE
    assert UNAVAILABLE is not None
    assert repr(UNAVAILABLE) == "UNAVAILABLE"


def test_zoned_timestamp_encodes_in_utc_with_z() -> None:
    """Zoned timestamps are written in UTC with a Z, as Debezium does."""
    enc = encoder_for(ColumnType(Kind.ZONED_TIMESTAMP), "json")
    value = datetime(2018, 6, 20, 15, 13, 16, 945104, tzinfo=timezone(timedelta(hours=2)))
    assert enc(value) == "2018-06-20T13:13:16.945104Z"
    with pytest.raises(ValueError):
        enc(datetime(2018, 6, 20))


def test_connect_schema_names_parameters() -> None:
    """Column types produce the Connect schema Debezium embeds (names, parameters)."""
    schema = ColumnType(Kind.DECIMAL, scale=2, precision=10).connect_schema(True, "price")
    assert schema == {
        "type": "bytes",
        "optional": True,
        "name": DECIMAL,
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "field": "price",
    }
    assert ColumnType(Kind.FLOAT32).connect_schema(False)["type"] == "float"  # as Connect
    assert ColumnType(Kind.FLOAT64).connect_schema(False)["type"] == "double"
    enum = ColumnType(Kind.ENUM, labels=("a", "b")).connect_schema(False)
    assert enum["name"] == DBZ + "data.Enum"
    assert enum["parameters"] == {"allowed": "a,b"}


def test_avro_schema_carries_connect_names() -> None:
    """Avro types keep Debezium's semantic name so other consumers can read them."""
    assert ColumnType(Kind.TIMESTAMP_MICROS).avro_schema() == {
        "type": "long",
        "connect.version": 1,
        "connect.name": DBZ + "time.MicroTimestamp",
    }
    dec = ColumnType(Kind.DECIMAL, scale=3, precision=12).avro_schema()
    assert dec["logicalType"] == "decimal"
    assert (dec["scale"], dec["precision"]) == (3, 12)
    assert ColumnType(Kind.INT32).avro_schema() == "int"


@pytest.mark.parametrize("ct", [ColumnType(Kind.DATE), ColumnType(Kind.ENUM, labels=("x", "y"))])
def test_column_types_survive_both_schema_forms(ct: ColumnType) -> None:
    """A column type read back from its own Connect or Avro schema is the same type."""
    assert column_type_from_connect(ct.connect_schema()) == ct
    assert column_type_from_avro(ct.avro_schema()) == ct


def test_json_document_equality_is_on_text() -> None:
    """Two JSON documents are equal when their text is; hashing agrees."""
    assert JsonDocument('{"a":1}') == JsonDocument('{"a":1}')
    assert JsonDocument('{"a":1}') != JsonDocument('{"a": 1}')
    assert hash(JsonDocument("[1]")) == hash(JsonDocument("[1]"))
    assert JsonDocument.from_value({"a": [1]}).text == '{"a":[1]}'
