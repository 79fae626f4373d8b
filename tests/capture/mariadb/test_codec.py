"""A MySQL table's layout and its writer (pure): the key's columns, the binlog's values
put right, the columns not captured, the ``source`` bytes and the checked path's
sentences. The column writers' bytes: tests/capture/mariadb/test_types.py."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import fastavro
import pytest
from pymysqlreplication.constants import NONE_SOURCE

from bizevents.capture.exceptions import CaptureError, ValueConversionError
from bizevents.capture.mariadb import types as t
from bizevents.capture.mariadb.codec import (
    MyTable,
    MyTableCodec,
    binlog_values,
    fractional_times,
    key_columns,
)
from bizevents.capture.mariadb.types import MyColumn
from bizevents.contracts.binary import zigzag

_TABLE = MyTable(
    "shop",
    "orders",
    (
        MyColumn("id", t.LONG, nullable=False),
        MyColumn("note", t.VARCHAR),
        MyColumn("secret", t.VARCHAR),
        MyColumn("took", t.TIME2, fsp=3),
        MyColumn("whole", t.TIME2),
        MyColumn("tags", t.SET, labels=("a", "b")),
    ),
    ("id",),
)


def _codec(**kwargs: Any) -> MyTableCodec:
    codec = MyTableCodec(server="srv", topic="srv.shop.orders", table=_TABLE, **kwargs)
    codec.set_schema_ids(1, 2)
    return codec


def test_the_key_is_the_configured_columns_else_the_primary_key() -> None:
    assert key_columns(_TABLE, None) == ("id",)
    assert key_columns(_TABLE, ["note", "id"]) == ("note", "id")


def test_a_configured_key_column_the_table_lacks_is_named() -> None:
    with pytest.raises(CaptureError, match=r"\['nope'\] configured for shop\.orders"):
        key_columns(_TABLE, ["id", "nope"])


def test_fractional_times_are_the_time_columns_with_a_fraction() -> None:
    assert fractional_times(_TABLE) == ("took",)


def test_binlog_values_unchanged_when_nothing_is_to_put_right() -> None:
    """No empty SET and no fractional TIME: the library's dict itself, not a copy."""
    values = {"id": 1, "tags": None}
    row = {"values": values, "none_sources": {"tags": NONE_SOURCE.NULL}}
    assert binlog_values(row, ()) is values


def test_binlog_values_an_empty_set_is_empty_text_and_a_null_stays_null() -> None:
    row = {
        "values": {"id": 1, "tags": None, "note": None},
        "none_sources": {"tags": NONE_SOURCE.EMPTY_SET, "note": NONE_SOURCE.NULL},
    }
    assert binlog_values(row, ()) == {"id": 1, "tags": "", "note": None}
    assert row["values"]["tags"] is None  # the library's row is left as it was


def test_binlog_values_a_negative_fractional_time_is_put_right_by_prefix() -> None:
    """-00:00:01.250 comes from the library as -00:00:01.750; the before and after
    images of an update are read by their prefix."""
    wrong = -timedelta(seconds=1, microseconds=750_000)
    row = {
        "before_values": {"took": wrong, "whole": -timedelta(seconds=3)},
        "before_none_sources": {},
        "after_values": {"took": timedelta(seconds=2)},
        "after_none_sources": {},
    }
    before = binlog_values(row, ("took",), "before_")
    assert before["took"] == -timedelta(seconds=1, microseconds=250_000)
    assert before["whole"] == -timedelta(seconds=3)
    assert binlog_values(row, ("took",), "after_") == {"took": timedelta(seconds=2)}


def test_columns_not_captured_are_dropped_but_a_key_column_never_is() -> None:
    codec = _codec(key_names=("id",), keep=lambda name: name in ("note", "took"))
    assert codec.dropped == frozenset({"secret", "whole", "tags"})
    fields = [f["name"] for f in codec.schemas.value["fields"][0]["type"][1]["fields"]]
    assert fields == ["id", "note", "took"]


def test_a_row_reads_back_without_the_dropped_columns() -> None:
    codec = _codec(key_names=("id",), keep=lambda name: name != "secret")
    row = {"id": 7, "note": "n", "secret": "s", "took": None, "whole": None, "tags": None}
    src = codec.source(ts_ms=5, snapshot="false", server_id=1, file="b.000001", pos=4, gtid=None)
    value = codec.envelope("c", None, codec.row(row), src(0), 5)
    got = fastavro.schemaless_reader(
        io.BytesIO(value[5:]), fastavro.parse_schema(codec.schemas.value)
    )
    assert got["after"]["id"] == 7 and got["after"]["note"] == "n"
    assert "secret" not in got["after"]


def test_source_is_its_parts_around_the_row_index() -> None:
    """``source(fields)(i)`` is ``source_parts(fields)`` joined by the row's varint, for
    the short indexes the hot loop takes from a table and the long ones it encodes."""
    codec = _codec(key_names=("id",))
    fields: dict[str, Any] = {
        "ts_ms": 1_700_000_000_000,
        "snapshot": "false",
        "server_id": 9,
        "file": "mysql-bin.000003",
        "pos": 1234,
        "gtid": "0-9-77",
    }
    head, tail = codec.source_parts(**fields)
    for i in (0, 1, 16_383, 16_384, 10**6):
        assert codec.source(**fields)(i) == head + zigzag(i) + tail


def test_a_null_key_names_the_table_and_column() -> None:
    codec = _codec(key_names=("id",))
    with pytest.raises(ValueConversionError, match=r"shop\.orders.*id.*not nullable"):
        codec.key({"id": None})


def test_a_value_that_does_not_write_names_its_column() -> None:
    codec = _codec(key_names=("id",))
    row = {"id": 1, "note": object(), "secret": None, "took": None, "whole": None, "tags": None}
    with pytest.raises(ValueConversionError, match=r"shop\.orders.*note"):
        codec.row(row)
