"""The compiled and generated Avro readers give what fastavro gives: same records, same
verdicts. Each test runs with both (``reader``), where the compiled one is built."""

from __future__ import annotations

import datetime
import io
import uuid
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bizevents.contracts.avro_codegen import Reader, compile_reader
from bizevents.contracts.avro_codegen.native import AVAILABLE, compile_native_reader
from bizevents.contracts.envelope import ChangeEvent, Tombstone
from bizevents.contracts.exceptions import Coordinates, DecodeError
from bizevents.contracts.logical import ColumnType, Field, Kind
from bizevents.contracts.technical import AvroDecoder, AvroEncoder, EncodeError, TableSchema
from bizevents.contracts.technical.avro import ReaderKind
from tests.contracts.strategies import tables_and_events
from tests.hostile import within_memory

WHERE = Coordinates("shop.public.things", 3, 77)
ORDERS = TableSchema(
    "shop",
    "public",
    "orders",
    (Field("id", ColumnType(Kind.INT64), optional=False),),
    (
        Field("id", ColumnType(Kind.INT64), optional=False),
        Field("status", ColumnType(Kind.ENUM, labels=("new", "paid"))),
        Field("total", ColumnType(Kind.DECIMAL, scale=2, precision=12)),
        Field("note", ColumnType(Kind.STRING)),
        Field("at", ColumnType(Kind.TIMESTAMP_MICROS)),
        Field("tags", ColumnType(Kind.ARRAY, items=ColumnType(Kind.STRING))),
    ),
)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _registry(table: TableSchema) -> tuple[AvroEncoder, dict[int, Any]]:
    encoder = AvroEncoder(table, 1, 2)
    return encoder, {1: encoder.schemas.key, 2: encoder.schemas.value}


def _encode(encoder: AvroEncoder, record: ChangeEvent | Tombstone) -> tuple[Any, Any]:
    try:
        return encoder.encode(record)
    except EncodeError:
        assume(False)  # a value its Avro type cannot hold (fastavro refuses to write it)
        raise


def _outcome(decoder: AvroDecoder, key: bytes | None, value: bytes | None) -> object:
    """The decoded record, or the DecodeError's message (anything else fails the test)."""
    try:
        return decoder.decode(key, value, WHERE)
    except DecodeError as exc:
        return ("DecodeError", str(exc))


READERS = pytest.mark.parametrize("reader", ["compiled", "generated"])


def _decoders(schemas: dict[int, Any], reader: ReaderKind) -> tuple[AvroDecoder, AvroDecoder]:
    return (
        AvroDecoder(schemas.__getitem__, reader=reader),
        AvroDecoder(schemas.__getitem__, reader="fastavro"),
    )


@READERS
@SETTINGS
@given(te=tables_and_events())
def test_generated_reader_equals_fastavro(
    reader: ReaderKind, te: tuple[TableSchema, ChangeEvent | Tombstone]
) -> None:
    """Any envelope decodes to the same ChangeEvent with and without the readers."""
    table, record = te
    encoder, schemas = _registry(table)
    key, value = _encode(encoder, record)
    fast, reference = _decoders(schemas, reader)
    got = fast.decode(key, value, WHERE)
    assert got == reference.decode(key, value, WHERE)
    assert got == replace(record, coordinates=WHERE)
    if value is not None:
        plan = fast._value_plan(2, None)
        assert plan.read is not None  # the generated reader did read it
        # the compiled reader built the event's parts (source, transaction) from the bytes
        assert plan.built == (reader == "compiled")
    if key is not None:
        assert fast._key_plan(1).read is not None


@READERS
@SETTINGS
@given(te=tables_and_events(), data=st.data())
def test_damaged_envelopes_give_the_same_verdict(
    reader: ReaderKind, te: tuple[TableSchema, ChangeEvent | Tombstone], data: st.DataObject
) -> None:
    """Truncated, flipped or extended bytes: the same record or the same DecodeError."""
    table, record = te
    encoder, schemas = _registry(table)
    key, value = _encode(encoder, record)
    fast, reference = _decoders(schemas, reader)
    target = data.draw(st.sampled_from(["key", "value"] if key is not None else ["value"]))
    raw = value if target == "value" else key
    if raw is None:
        return
    how = data.draw(st.sampled_from(["truncate", "flip", "extend", "replace"]))
    if how == "truncate":
        damaged = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif how == "flip":
        at = data.draw(st.integers(5, len(raw) - 1)) if len(raw) > 5 else 0
        damaged = raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255))]) + raw[at + 1 :]
    elif how == "extend":
        damaged = raw + data.draw(st.binary(min_size=1, max_size=8))
    else:
        damaged = raw[:5] + data.draw(st.binary(max_size=64))
    key, value = (key, damaged) if target == "value" else (damaged, value)
    assert _outcome(fast, key, value) == _outcome(reference, key, value)


@READERS
@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=80))
def test_random_bytes_are_decode_errors_only(reader: ReaderKind, body: bytes) -> None:
    """Random bodies behind a valid frame: a DecodeError (or a record), as fastavro says."""
    _, schemas = _registry(ORDERS)
    fast, reference = _decoders(schemas, reader)
    value = b"\x00\x00\x00\x00\x02" + body
    assert _outcome(fast, None, value) == _outcome(reference, None, value)


# -- the reader alone, on every Avro shape it covers ----------------------------------------

SHAPES = fastavro.parse_schema(
    {
        "type": "record",
        "name": "Shapes",
        "namespace": "t",
        "fields": [
            {"name": "b", "type": "boolean"},
            {"name": "i", "type": "int"},
            {"name": "f", "type": "float"},
            {"name": "d", "type": "double"},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
            {"name": "x", "type": {"type": "fixed", "name": "F", "size": 3}},
            {"name": "m", "type": {"type": "map", "values": ["null", "long"]}},
            {"name": "a", "type": {"type": "array", "items": "string"}},
            {"name": "u", "type": ["null", "string", "long", "E"]},
            {"name": "dt", "type": {"type": "int", "logicalType": "date"}},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "tm", "type": {"type": "long", "logicalType": "time-micros"}},
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {
                "name": "dec",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2},
            },
            {"name": "bs", "type": "bytes"},
        ],
    }
)
#: A datum of SHAPES with every covered type.
EVERY_TYPE: dict[str, Any] = {
    "b": True,
    "i": -70000,
    "f": 1.5,
    "d": -2.25e300,
    "e": "C",
    "x": b"abc",
    "m": {"k": 5, "n": None, "é": -(2**63)},
    "a": ["x", "", "ü" * 70],
    "u": "B",
    "dt": datetime.date(2024, 2, 29),
    "ts": datetime.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=datetime.UTC),
    "tm": datetime.time(23, 59, 59, 999999),
    "id": uuid.UUID("7e57d004-2b97-4e7a-b45f-5087b0cd0f00"),
    "dec": Decimal("-1234.56"),
    "bs": bytes(range(200)),
}

COMPILERS = pytest.mark.parametrize(
    "compile", [compile_native_reader, compile_reader], ids=["compiled", "generated"]
)


def test_the_compiled_reader_is_built() -> None:
    """scripts/setup builds the C extension; without it the decoders run the generated
    reader and the compiled-reader tests here would not test it."""
    assert AVAILABLE, "contracts/avro_codegen/_native.c is not built: run scripts/setup"


def _fastavro(body: bytes) -> tuple[Any, int]:
    buffer = io.BytesIO(body)
    with within_memory():
        datum = fastavro.schemaless_reader(buffer, SHAPES, None)
    return datum, buffer.tell()


@COMPILERS
@settings(max_examples=500, deadline=None)
@given(body=st.binary(max_size=120))
def test_reader_never_accepts_what_fastavro_refuses(
    compile: Callable[[Any], Reader], body: bytes
) -> None:
    """Where a reader reads a whole body, fastavro reads the same datum."""
    try:
        got, end = compile(SHAPES)(body, 0)
    except Exception:
        return  # fastavro decides then
    if end != len(body):
        return
    expected, expected_end = _fastavro(body)
    assert expected_end == end
    assert repr(got) == repr(expected)  # repr: NaN floats compare equal as text


@COMPILERS
def test_reader_reads_every_shape_like_fastavro(compile: Callable[[Any], Reader]) -> None:
    """A datum with every covered type reads back as fastavro reads it."""
    datum = EVERY_TYPE
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, SHAPES, datum)
    body = buffer.getvalue()
    got, end = compile(SHAPES)(body, 0)
    assert end == len(body)
    assert got == _fastavro(body)[0] == datum


@pytest.mark.parametrize(
    "varint",
    [b"\xff" * 9 + b"\x01", b"\xff" * 9 + b"\x7f", b"\xfe" * 9 + b"\x7f", b"\x80" * 9 + b"\x01"],
    ids=["max", "overlong-top", "pattern", "min-top"],
)
@COMPILERS
def test_ten_byte_varints_wrap_like_fastavro(
    compile: Callable[[Any], Reader], varint: bytes
) -> None:
    """Ten-byte varints wrap around at 64 bits exactly as fastavro's reader does."""
    schema = fastavro.parse_schema("long")
    assert compile(schema)(varint, 0) == (
        fastavro.schemaless_reader(io.BytesIO(varint), schema, None),
        len(varint),
    )


@COMPILERS
def test_eleven_byte_varints_are_left_to_fastavro(compile: Callable[[Any], Reader]) -> None:
    """A varint longer than ten bytes is not read by the readers."""
    with pytest.raises(ValueError, match="longer than 10 bytes"):
        compile(fastavro.parse_schema("long"))(b"\xff" * 10 + b"\x01", 0)
