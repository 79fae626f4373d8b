"""Decoders refuse what the schema forbids, naming the column: property tests.

Each encoding can carry only some of the forbidden cases:

* JSON with its embedded schema can carry all of them: a non-optional column missing
  or null, a column the schema does not declare, an integer outside its Connect type,
  a value of the wrong type;
* Avro binary's layout is fixed by the writer schema, so a column cannot be missing,
  extra, null where the type has no null branch, or of another type; but an Avro
  ``int`` is a varint that can hold more than 32 bits (fastavro reads it);
* plain JSON has no schema: its rows can only disagree with each other or with the
  key, or hold an integer no Connect type holds (beyond int64).

Every violation must give a DecodeError (nothing else) whose reason names the column
and the row or key it is in; the same envelopes without the violation still decode.
"""

from __future__ import annotations

import io
import json
import struct
from copy import deepcopy
from dataclasses import replace
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bizevents.contracts.envelope import ChangeEvent
from bizevents.contracts.exceptions import Coordinates, DecodeError
from bizevents.contracts.logical import ColumnType, Field, Kind
from bizevents.contracts.technical import (
    AutoDecoder,
    AvroDecoder,
    AvroEncoder,
    JsonEncoder,
    JsonSchemaDecoder,
    PlainJsonDecoder,
    TableSchema,
)
from bizevents.contracts.technical.avro import ReaderKind
from tests.contracts.strategies import rows, sources, table_schemas
from tests.envelopes import mysql_source

WHERE = Coordinates("pg.public.t", 0, 9)
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
# Upper case: the strategies' identifiers are lower case, so these never clash.
COLUMN = "Qty"
EXTRA = "Zz"
_RANGES = {Kind.INT16: 16, Kind.INT32: 32, Kind.INT64: 64, Kind.DATE: 32}


@st.composite
def tables(draw: st.DrawFn, kinds: tuple[Kind, ...]) -> TableSchema:
    """A drawn table plus a non-optional integer column ``Qty``, sometimes in the key."""
    table = draw(table_schemas())
    qty = Field(COLUMN, ColumnType(draw(st.sampled_from(kinds))), optional=False)
    others = table.value_fields[len(table.key_fields) :]
    if draw(st.booleans()):
        keys = (qty, *table.key_fields)
        return replace(table, key_fields=keys, value_fields=(*keys, *others))
    return replace(table, value_fields=(*table.value_fields, qty))


@st.composite
def events(draw: st.DrawFn, table: TableSchema) -> tuple[ChangeEvent, str]:
    """An event of ``table`` with one row, and which row it is (``before``/``after``)."""
    row = draw(rows(table))
    op = draw(st.sampled_from(["c", "r", "u", "d"]))
    which = "before" if op == "d" else "after"
    key = {f.name: row[f.name] for f in table.key_fields} or None
    event = ChangeEvent(
        op=op,  # type: ignore[arg-type]
        source=draw(sources(table, snapshot=op == "r")),
        before=row if which == "before" else None,
        after=row if which == "after" else None,
        key=key,
        ts_ms=1,
    )
    return event, which


def out_of_range(kind: Kind) -> st.SearchStrategy[int]:
    bits = _RANGES[kind]
    limit = 2 ** (bits - 1)
    top = 2**63 - 1 if bits < 64 else 2**80
    return st.integers(limit, top) | st.integers(-top, -limit - 1)


def _refused(decoder: Any, key: bytes | None, value: bytes | None) -> str:
    with pytest.raises(DecodeError) as info:
        decoder.decode(key, value, WHERE)
    assert info.value.where == WHERE
    return info.value.reason


def _place(which: str) -> str:
    return "the key" if which == "key" else which


# -- JSON with its embedded schema ---------------------------------------------------------

JSON_SCHEMA_DECODERS = [JsonSchemaDecoder(), AutoDecoder()]
JSON_IDS = ["json_schema", "auto"]


@pytest.mark.parametrize("decoder", JSON_SCHEMA_DECODERS, ids=JSON_IDS)
@PROPERTY
@given(data=st.data())
def test_json_with_schema_refuses_every_violation(decoder: Any, data: st.DataObject) -> None:
    """Missing, null, undeclared, out-of-range or mistyped: a DecodeError naming it."""
    table = data.draw(tables((Kind.INT16, Kind.INT32, Kind.INT64, Kind.DATE)))
    event, which = data.draw(events(table))
    key, value = JsonEncoder(table, with_schema=True).encode(event)
    assert decoder.decode(key, value, WHERE) == replace(event, coordinates=WHERE)

    in_key = key is not None and COLUMN in json.loads(key)["payload"]
    target = data.draw(st.sampled_from(["key", which] if in_key else [which]))
    doc = json.loads(key if target == "key" else value)  # type: ignore[arg-type]
    row = doc["payload"] if target == "key" else doc["payload"][which]
    kind = next(f.type.kind for f in table.value_fields if f.name == COLUMN)
    violation = data.draw(st.sampled_from(["missing", "null", "extra", "range", "type"]))
    column = COLUMN
    if violation == "missing":
        del row[COLUMN]
    elif violation == "null":
        row[COLUMN] = None
    elif violation == "extra":
        row[EXTRA] = data.draw(st.integers() | st.text(max_size=3) | st.none())
        column = EXTRA
    elif violation == "range":
        row[COLUMN] = data.draw(out_of_range(kind))
    else:
        row[COLUMN] = data.draw(st.sampled_from(["7", 1.5, True, [1], {"a": 1}]))
    bad = json.dumps(doc).encode()
    reason = _refused(decoder, bad, value) if target == "key" else _refused(decoder, key, bad)
    assert f"column {column!r} of {_place(target)}" in reason
    expected = {
        "missing": "no value, and the column is not optional",
        "null": "null, and the column is not optional",
        "extra": "not in the schema",
        "range": f"{row.get(COLUMN)} does not fit int{_RANGES[kind]}",
        "type": "",
    }[violation]
    assert expected in reason


# -- Avro ----------------------------------------------------------------------------------------


def _framed(schema_id: int, schema: Any, record: Any) -> bytes:
    buffer = io.BytesIO()
    buffer.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), record)
    return buffer.getvalue()


def _record(schema: Any, framed: bytes) -> Any:
    return fastavro.schemaless_reader(io.BytesIO(framed[5:]), fastavro.parse_schema(schema), None)


def _widened(schema: Any) -> Any:
    """The schema with the column ``Qty`` written as an Avro long: same layout, any
    64-bit value (how a faulty producer gets a big number into an int)."""
    wide = deepcopy(schema)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            for f in node.get("fields", ()):
                if f.get("name") == COLUMN:
                    f["type"] = "long"
            for v in node.values():
                visit(v)
        elif isinstance(node, list):
            for v in node:
                visit(v)

    visit(wide)
    return wide


def _avro_decoders() -> list[Any]:
    return [
        lambda lookup: AvroDecoder(lookup),
        lambda lookup: AvroDecoder(lookup, reader="generated"),
        lambda lookup: AvroDecoder(lookup, reader="fastavro"),
        lambda lookup: AutoDecoder(lookup),
    ]


@pytest.mark.parametrize(
    "make", _avro_decoders(), ids=["avro", "avro-generated", "avro-fastavro", "auto"]
)
@PROPERTY
@given(data=st.data())
def test_avro_refuses_an_int_beyond_32_bits(make: Any, data: st.DataObject) -> None:
    """An Avro int column (or key column) holding more than 32 bits: a DecodeError
    naming the column, from the generated reader and from fastavro alike."""
    table = data.draw(tables((Kind.INT32, Kind.DATE)))
    event, which = data.draw(events(table))
    encoder = AvroEncoder(table, 1, 2)
    schemas = {1: encoder.schemas.key, 2: encoder.schemas.value}
    decoder = make(schemas.__getitem__)
    key, value = encoder.encode(event)
    assert value is not None
    assert decoder.decode(key, value, WHERE) == replace(event, coordinates=WHERE)

    kind = next(f.type.kind for f in table.value_fields if f.name == COLUMN)
    number = data.draw(out_of_range(kind))
    in_key = any(f.name == COLUMN for f in table.key_fields)
    target = data.draw(st.sampled_from(["key", which] if in_key else [which]))
    if target == "key":
        assert key is not None
        record = _record(schemas[1], key)
        record[COLUMN] = number
        key = _framed(1, _widened(schemas[1]), record)
    else:
        record = _record(schemas[2], value)
        record[which][COLUMN] = number
        value = _framed(2, _widened(schemas[2]), record)
    reason = _refused(decoder, key, value)
    assert f"column {COLUMN!r} of {_place(target)}: {number} does not fit int32" in reason


def test_avro_refuses_a_mysql_source_row_beyond_32_bits() -> None:
    """The one int of a MySQL source block is held to 32 bits too."""
    table = TableSchema("m", "shop", "t", (), (Field("id", ColumnType(Kind.INT64)),), "mysql")
    encoder = AvroEncoder(table, 1, 2)
    _, good = encoder.encode(ChangeEvent(op="c", source=_mysql_source(), after={"id": 1}))
    assert good is not None
    payload = _record(encoder.schemas.value, good)
    payload["source"]["row"] = 2**40
    wide = deepcopy(encoder.schemas.value)
    for f in wide["fields"][2]["type"]["fields"]:
        if f["name"] == "row":
            f["type"] = "long"
    value = _framed(2, wide, payload)
    readers: tuple[ReaderKind, ...] = ("compiled", "generated", "fastavro")
    for reader in readers:
        decoder = AvroDecoder({2: encoder.schemas.value}.__getitem__, reader=reader)
        assert "source.row: 1099511627776 does not fit int32" in _refused(decoder, None, value)


def _mysql_source() -> Any:
    return mysql_source("t")


# -- plain JSON ----------------------------------------------------------------------------------

NONE: dict[int, Any] = {}
PLAIN_DECODERS = [PlainJsonDecoder(), AutoDecoder()]
PLAIN_IDS = ["json", "auto"]


@st.composite
def updates(draw: st.DrawFn) -> tuple[TableSchema, ChangeEvent]:
    """An update with both rows (REPLICA IDENTITY FULL) of a table with a key."""
    table = draw(tables((Kind.INT32, Kind.INT64)))
    after = draw(rows(table))
    before = draw(rows(table))
    for f in table.key_fields:
        before[f.name] = after[f.name]
    event = ChangeEvent(
        op="u",
        source=draw(sources(table)),
        before=before,
        after=after,
        key={f.name: after[f.name] for f in table.key_fields} or None,
        ts_ms=1,
    )
    return table, event


@pytest.mark.parametrize("decoder", PLAIN_DECODERS, ids=PLAIN_IDS)
@PROPERTY
@given(te=updates(), data=st.data())
def test_plain_json_refuses_rows_that_disagree(
    decoder: Any, te: tuple[TableSchema, ChangeEvent], data: st.DataObject
) -> None:
    """Without a schema: a key column missing from a row, a column in one row only, or
    an integer beyond int64 is refused, naming the column."""
    table, event = te
    key, value = JsonEncoder(table, with_schema=False).encode(event)
    assert isinstance(decoder.decode(key, value, WHERE), ChangeEvent)

    doc = json.loads(value)  # type: ignore[arg-type]
    which = data.draw(st.sampled_from(["before", "after"]))
    other = "after" if which == "before" else "before"
    choices = ["extra", "missing", "range"] + (["key"] if event.key else [])
    violation = data.draw(st.sampled_from(choices))
    if violation == "extra":
        doc[which][EXTRA] = data.draw(st.integers(-5, 5) | st.none())
        expected = f"column {EXTRA!r} of {which} is missing from {other}"
    elif violation == "missing":
        name = data.draw(st.sampled_from(sorted(doc[which])))
        del doc[which][name]
        expected = f"column {name!r} of {other} is missing from {which}"
    elif violation == "range":
        number = data.draw(st.integers(2**63, 2**80) | st.integers(-(2**80), -(2**63) - 1))
        doc[which][COLUMN] = number
        expected = f"column {COLUMN!r} of {which}: {number} does not fit int64"
    else:
        assert event.key is not None
        name = data.draw(st.sampled_from(sorted(event.key)))
        doc["before"].pop(name)
        doc["after"].pop(name)
        expected = f"column {name!r} of the key is missing from before"
    reason = _refused(decoder, key, json.dumps(doc).encode())
    assert expected in reason


# -- the key's reasons say it is the key --------------------------------------------------------


@pytest.mark.parametrize(
    ("decoder", "key", "says"),
    [
        (AutoDecoder(), b"\x07abc", "the key is neither Confluent Avro (magic byte 0) nor a "),
        (AutoDecoder(), b"\x07abc", "its first byte is 0x07"),
        (AutoDecoder(), b"", "the key is empty"),
        (AutoDecoder(), b"{nope", "the key is not valid JSON"),
        (PlainJsonDecoder(), b"{nope", "the key is not valid JSON"),
        (JsonSchemaDecoder(), b"{nope", "the key is not valid JSON"),
        (AutoDecoder(), b"\x00\x00\x00\x00\x01\x02", "the key is Confluent Avro, but no schema"),
        (AvroDecoder(NONE.__getitem__), b"\x00\x00\x00\x00\x09\x02", "schema id 9 of the key"),
        (AvroDecoder(NONE.__getitem__), b"\x07\x00\x00\x00\x09\x02", "the key starts with"),
    ],
)
def test_a_bad_key_is_named_as_the_key(decoder: Any, key: bytes, says: str) -> None:
    """A key that does not decode gives a reason that says it is the key."""
    value = json.dumps({"op": "t", "source": {"connector": "x", "name": "n", "db": "d"}})
    assert says in _refused(decoder, key, value.encode())


def test_a_bad_value_is_named_as_the_value() -> None:
    """A value that does not decode is called the value, and its own first byte given."""
    reason = _refused(AutoDecoder(), b'{"id": 1}', b"\x05abc")
    assert "the value is neither Confluent Avro" in reason and "0x05" in reason
    assert "key" not in reason
