"""Reading only the columns a translator reads: the same values, the others skipped."""

from __future__ import annotations

import io
from typing import Any

import fastavro
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bizevents.contracts.avro_codegen import compile_reader
from bizevents.contracts.envelope import ChangeEvent, Tombstone
from bizevents.contracts.exceptions import Coordinates, DecodeError
from bizevents.contracts.technical import AvroDecoder, AvroEncoder, EncodeError, TableSchema
from tests.contracts.strategies import tables_and_events
from tests.contracts.test_fast_decode import EVERY_TYPE, SHAPES

WHERE = Coordinates("shop.public.things", 0, 1)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _project(row: Any, columns: frozenset[str]) -> Any:
    return None if row is None else {k: v for k, v in row.items() if k in columns}


@SETTINGS
def _encoded(
    table: TableSchema, record: ChangeEvent | Tombstone
) -> tuple[AvroEncoder, bytes | None, bytes | None]:
    """A change event of the draw, encoded (a tombstone or what does not encode is
    assumed away)."""
    assume(isinstance(record, ChangeEvent))
    encoder = AvroEncoder(table, 1, 2)
    try:
        key, value = encoder.encode(record)
    except EncodeError:
        assume(False)
    return encoder, key, value


@given(tables_and_events(), st.data())
def test_a_projected_decode_is_the_full_one_restricted(
    te: tuple[TableSchema, ChangeEvent | Tombstone], data: st.DataObject
) -> None:
    table, record = te
    encoder, key, value = _encoded(table, record)
    schemas = {1: encoder.schemas.key, 2: encoder.schemas.value}
    names = [f.name for f in table.value_fields]
    columns = frozenset(data.draw(st.lists(st.sampled_from(names), unique=True)) if names else [])
    full = AvroDecoder(schemas.__getitem__).decode(key, value, WHERE)
    fast = AvroDecoder(schemas.__getitem__)
    projected = fast.decode(key, value, WHERE, columns=columns)
    generated = AvroDecoder(schemas.__getitem__, reader="generated").decode(
        key, value, WHERE, columns=columns
    )
    reference = AvroDecoder(schemas.__getitem__, reader="fastavro").decode(
        key, value, WHERE, columns=columns
    )
    assert isinstance(full, ChangeEvent) and isinstance(projected, ChangeEvent)
    for got in (projected, generated, reference):
        assert isinstance(got, ChangeEvent)
        assert got.before == _project(full.before, columns)
        assert got.after == _project(full.after, columns)
        assert (got.op, got.source, got.key, got.ts_ms) == (
            full.op,
            full.source,
            full.key,
            full.ts_ms,
        )
    if set(names) - columns:
        assert fast._value_plan(2, columns).read is not None  # the generated reader skipped


@SETTINGS
@given(tables_and_events(), st.integers(1, 40))
def test_a_truncated_projected_record_is_still_refused(
    te: tuple[TableSchema, ChangeEvent | Tombstone], cut: int
) -> None:
    """Skipping a column's bytes does not skip checking that they are there."""
    table, record = te
    encoder, key, value = _encoded(table, record)
    assert value is not None
    assume(cut < len(value) - 5)
    schemas = {1: encoder.schemas.key, 2: encoder.schemas.value}
    try:
        AvroDecoder(schemas.__getitem__).decode(key, value[:-cut], WHERE, columns=frozenset())
    except DecodeError:
        return
    raise AssertionError("a truncated envelope decoded")


def test_skipping_every_shape_lands_where_fastavro_ends() -> None:
    """Each covered type skipped alone: the reader ends where fastavro's read ends."""
    datum = EVERY_TYPE
    wrapper = {"type": "record", "name": "W", "fields": [{"name": "r", "type": SHAPES}]}
    parsed = fastavro.parse_schema(wrapper)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, {"r": datum})
    body = buffer.getvalue()
    for name in datum:
        read = compile_reader(parsed, keep={"r": {name}})
        got, end = read(body, 0)
        assert end == len(body)
        assert got == {"r": {name: datum[name]}}
    read = compile_reader(parsed, keep={"r": set()})
    assert read(body, 0) == ({"r": {}}, len(body))


def test_blocks_that_say_their_size_are_jumped_over() -> None:
    """An array written in blocks with byte sizes (negative counts) is skipped whole."""
    schema = fastavro.parse_schema(
        {
            "type": "record",
            "name": "R",
            "fields": [
                {"name": "a", "type": {"type": "array", "items": "long"}},
                {"name": "z", "type": "long"},
            ],
        }
    )
    # count -2 (zigzag 3), byte size 2, items 1 and 2, end of blocks, then z = 7
    body = bytes([3, 4, 2, 4, 0, 14])
    assert fastavro.schemaless_reader(io.BytesIO(body), schema) == {"a": [1, 2], "z": 7}
    read = compile_reader(
        {"type": "record", "name": "W", "fields": [{"name": "w", "type": schema}]},
        keep={"w": {"z"}},
    )
    assert read(body, 0) == ({"w": {"z": 7}}, len(body))
