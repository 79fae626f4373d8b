"""The source block's one description: schemas, reader, wire dict and byte writer agree."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bizevents.contracts.binary import zigzag
from bizevents.contracts.envelope import NO_EXTRA, MySqlPosition, PgPosition, Source
from bizevents.contracts.exceptions import InvalidRecord
from bizevents.contracts.technical.source import (
    FIELDS,
    LAYOUT,
    AvroSourceWriter,
    EncodedSource,
    read_source,
    source_avro_schema,
    source_connect_schema,
    source_wire,
    trusts_source,
)

longs = st.integers(min_value=0, max_value=2**63 - 1)
names = st.text(min_size=1, max_size=12)
maybe = st.none() | names
snapshots = st.sampled_from(["true", "false", "last", "first", "incremental"])


@st.composite
def pg_sources(draw: st.DrawFn) -> Source:
    return Source(
        "postgresql",
        draw(names),
        draw(names),
        draw(names),
        draw(names),
        draw(longs),
        draw(snapshots),
        PgPosition(draw(st.none() | longs), draw(st.none() | longs), draw(st.none() | longs)),
        draw(maybe),
        draw(maybe),
        NO_EXTRA,
    )


@st.composite
def mysql_sources(draw: st.DrawFn) -> Source:
    return Source(
        "mysql",
        draw(names),
        draw(names),
        None,
        draw(maybe),
        draw(longs),
        draw(snapshots),
        MySqlPosition(
            draw(names),
            draw(longs),
            draw(st.integers(0, 2**31 - 1)),
            draw(longs),
            draw(maybe),
            draw(st.none() | longs),
        ),
        draw(maybe),
        draw(maybe),
        NO_EXTRA,
    )


def avro_round_trip(schema: Any, datum: Any) -> tuple[bytes, Any]:
    parsed = fastavro.parse_schema(schema)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, datum)
    raw = out.getvalue()
    return raw, fastavro.schemaless_reader(io.BytesIO(raw), parsed)


@given(pg_sources() | mysql_sources())
def test_a_source_survives_avro_and_json_through_the_derived_schema(source: Source) -> None:
    connector = source.connector
    wire = source_wire(source, connector)  # type: ignore[arg-type]
    _, back = avro_round_trip(source_avro_schema(connector), wire)  # type: ignore[arg-type]
    assert read_source(back) == source
    assert read_source(back, checked=False) == source
    assert read_source(json.loads(json.dumps(wire))) == source


@given(pg_sources())
def test_capture_writer_equals_fastavro_on_the_derived_schema(source: Source) -> None:
    pos = source.position
    assert isinstance(pos, PgPosition)
    fixed = {"version": source.version, "connector": "postgresql", "name": source.name}
    fixed |= {"db": source.db, "schema": source.schema, "table": source.table}
    per_tx = {"ts_ms": source.ts_ms, "snapshot": source.snapshot_raw, "txId": pos.tx_id}
    per_tx |= {"sequence": source.sequence, "xmin": pos.xmin}
    encoded = AvroSourceWriter("postgresql", fixed).around("lsn", per_tx)
    raw, _ = avro_round_trip(source_avro_schema("postgresql"), source_wire(source, "postgresql"))
    if pos.lsn is not None:
        assert encoded.with_long(pos.lsn) == raw


@given(
    st.binary(max_size=8),
    st.binary(max_size=8),
    st.sampled_from([-(2**63), -1, 0, 63, 64, 8191, 8192, 2**62, 2**63 - 1])
    | st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
def test_with_long_writes_the_plain_zigzag_bytes(head: bytes, tail: bytes, value: int) -> None:
    """Any long the open field takes, the same bytes as the plain writing of it."""
    assert EncodedSource(head, tail).with_long(value) == head + b"\x02" + zigzag(value) + tail


@pytest.mark.parametrize("connector", ["postgresql", "mysql"])
def test_both_schemas_list_the_layout_in_order(connector: Any) -> None:
    layout = [name for name, _ in LAYOUT[connector]]
    assert [f["name"] for f in source_avro_schema(connector)["fields"]] == layout
    assert [f["field"] for f in source_connect_schema(connector)["fields"]] == layout
    assert set(layout) <= FIELDS.keys()


@pytest.mark.parametrize("connector", ["postgresql", "mysql"])
def test_the_derived_avro_schema_is_trusted(connector: Any) -> None:
    assert trusts_source(source_avro_schema(connector), lambda t: t)


def test_a_retyped_field_is_not_trusted() -> None:
    schema = source_avro_schema("postgresql")
    for f in schema["fields"]:
        if f["name"] == "lsn":
            f["type"] = ["null", "string"]
    assert not trusts_source(schema, lambda t: t)


@pytest.mark.parametrize(
    ("block", "reason"),
    [
        (None, "no source block"),
        ({"connector": "postgresql", "name": "s", "db": "d"}, "source.ts_ms is missing"),
        ({"connector": "mysql", "name": "s", "db": "d", "ts_ms": 1, "file": "f"}, "pos is missing"),
        (
            {"connector": "postgresql", "name": "s", "db": "d", "ts_ms": True},
            "must be int, not bool",
        ),
        (
            {
                "connector": "mysql",
                "name": "s",
                "db": "d",
                "ts_ms": 1,
                "file": "f",
                "pos": 1,
                "row": 2**31,
            },
            "does not fit int32",
        ),
        (
            {"connector": "postgresql", "name": "s", "db": "d", "ts_ms": 1, "snapshot": 1},
            "snapshot must be a string",
        ),
    ],
)
def test_read_source_names_what_is_wrong(block: Any, reason: str) -> None:
    with pytest.raises(InvalidRecord, match=reason):
        read_source(block)


def test_extra_fields_are_kept_and_written_back() -> None:
    block = {"connector": "postgresql", "name": "s", "db": "d", "ts_ms": 1, "ts_us": 1000}
    source = read_source(block)
    assert source.extra == {"ts_us": 1000}
    assert source_wire(source, "postgresql")["ts_us"] == 1000
