"""MySQL capture quarantine's pure parts: the typed JSON of a binlog row, the binlog
position as one growing number, the table layout's round trip and the converter seam
(no broker, no database)."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bizevents.capture.exceptions import CaptureError
from bizevents.capture.mariadb import types as t
from bizevents.capture.mariadb.codec import MyTable, MyTableCodec
from bizevents.capture.mariadb.quarantine import (
    describe_position,
    dump_row,
    load_row,
    position_number,
    table_of,
    table_record,
)
from bizevents.capture.mariadb.types import MyColumn, register_converter

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.text(max_size=8),
    st.floats(allow_nan=False),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.datetimes(),
    st.dates(),
    st.times(),
    st.timedeltas(),
    st.binary(max_size=8),
    st.sets(st.text(max_size=3), max_size=3),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@given(st.dictionaries(st.text(max_size=6), _values, max_size=5))
def test_a_binlog_row_round_trips_through_typed_json(values: dict[str, Any]) -> None:
    row = {"values": values, "none_sources": {}}
    back = load_row(dump_row(row))
    assert back == row
    assert [type(v) for v in back["values"].values()] == [type(v) for v in values.values()]


def test_typed_json_keeps_what_plain_json_loses() -> None:
    row = {"values": {"d": Decimal("1.10"), "b": b"\x00", "j": ["o", 1], "t": timedelta(-1)}}
    assert load_row(dump_row(row)) == row
    assert load_row(dump_row(row))["values"]["d"].as_tuple().exponent == -2
    with pytest.raises(TypeError, match="no typed JSON form"):
        dump_row({"values": {"x": object()}})
    with pytest.raises(ValueError):
        load_row(json.dumps(["?", 1]).encode())


@given(
    st.lists(
        st.tuples(st.integers(1, 999_999), st.integers(4, 2**32 - 1), st.integers(0, 2**20 - 1)),
        min_size=2,
        max_size=6,
    )
)
def test_the_position_number_grows_with_the_binlog(places: list[tuple[int, int, int]]) -> None:
    numbers = {p: position_number(f"mysql-bin.{p[0]:06d}", p[1], p[2]) for p in places}
    assert sorted(places) == sorted(places, key=numbers.__getitem__)
    seq, pos, row = places[0]
    described = describe_position(numbers[places[0]])
    assert described == f"binlog file .{seq:06d} position {pos} row {row}"


_TABLE = MyTable(
    "shop",
    "t",
    (
        MyColumn("id", t.LONG, nullable=False),
        MyColumn("e", t.ENUM, labels=("a", "b")),
        MyColumn("d", t.NEWDECIMAL, precision=10, scale=2),
        MyColumn("bn", t.STRING, binary=True, pad=4),
    ),
    ("id",),
)


def test_a_table_layout_round_trips_through_json() -> None:
    assert table_of(json.loads(json.dumps(table_record(_TABLE)))) == _TABLE
    with pytest.raises(ValueError, match="not a table layout"):
        table_of({"database": "shop"})


def _codec() -> MyTableCodec:
    return MyTableCodec(server="srv", topic="srv.shop.t", table=_TABLE, key_names=("id",))


def test_a_registered_converter_fixes_a_value_until_unregistered() -> None:
    row = {"id": 1, "e": "", "d": Decimal("1.00"), "bn": b"\x00"}
    with pytest.raises(CaptureError, match="not one of the enum's labels"):
        _codec().row(row)
    try:
        register_converter("enum", lambda v: v or None)
        fixed = _codec()
        assert fixed.row(row) == fixed.row({**row, "e": None})
        register_converter("enum", lambda v: 1 / 0)  # a converter that raises names the value
        with pytest.raises(CaptureError, match=r"t\.e"):
            _codec().row(row)
    finally:
        register_converter("enum", None)
    with pytest.raises(CaptureError):
        _codec().row(row)
    with pytest.raises(ValueError, match="not a type capture maps"):
        register_converter("no such type", None)
    assert [t.type_name(c) for c in _TABLE.columns] == ["int", "enum", "decimal", "binary"]


def test_a_codec_knows_when_a_converter_was_registered_since() -> None:
    codec = _codec()
    try:
        register_converter("decimal", Decimal)
        assert codec.generation != t.converters_generation()
    finally:
        register_converter("decimal", None)
