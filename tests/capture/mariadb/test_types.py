"""The MySQL column codecs, pure: property tests against independent references."""

from __future__ import annotations

import io
import struct
from datetime import UTC, datetime, timedelta
from decimal import Decimal, localcontext
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import RowsEvent

from bizevents.capture.exceptions import CaptureError
from bizevents.capture.mariadb import types as t
from bizevents.capture.mariadb.codec import MyTable, MyTableCodec, key_columns
from bizevents.capture.mariadb.types import MyColumn, binlog_time2
from bizevents.capture.postgres.codec import encoded_ts

_MAX_TIME = timedelta(hours=838, minutes=59, seconds=59, microseconds=999_999)


def _time2_bytes(value: timedelta) -> bytes:
    """MySQL's TIME(6) storage (my_time_packed_to_binary): one signed 48-bit number."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    sign = -1 if micros < 0 else 1
    seconds, frac = divmod(abs(micros), 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    packed = sign * ((((hours << 12) | (minutes << 6) | secs) << 24) | frac)
    return (packed + 0x800000000000).to_bytes(6, "big")


class _Packet:
    """The library's own integer readers over given bytes."""

    read_int_be_by_size = BinLogPacketWrapper.read_int_be_by_size
    read_int24_be = BinLogPacketWrapper.read_int24_be

    def __init__(self, raw: bytes) -> None:
        self._raw = io.BytesIO(raw)

    def read(self, n: int) -> bytes:
        return self._raw.read(n)


class _Col:
    fsp = 6


def _library_time2(raw: bytes) -> timedelta:
    event = object.__new__(RowsEvent)
    event.packet = _Packet(raw)  # type: ignore[attr-defined]
    return event._RowsEvent__read_time2(_Col())  # type: ignore[attr-defined, no-any-return]


@given(st.timedeltas(min_value=-_MAX_TIME, max_value=_MAX_TIME))
def test_binlog_time2_inverts_the_library_on_mysqls_own_bytes(value: timedelta) -> None:
    """TIME(6) packed as the server packs it, decoded by the library, put right: exact."""
    assert binlog_time2(_library_time2(_time2_bytes(value))) == value


def test_the_library_still_needs_the_correction() -> None:
    """The day the library decodes negative fractions right, binlog_time2 must go."""
    value = -timedelta(seconds=1, microseconds=250_000)
    assert _library_time2(_time2_bytes(value)) != value


_COLUMNS = (
    MyColumn("id", t.LONGLONG, unsigned=True, nullable=False),
    MyColumn("i8", t.TINY),
    MyColumn("u32", t.LONG, unsigned=True),
    MyColumn("money", t.NEWDECIMAL, precision=65, scale=30),
    MyColumn("dt", t.DATETIME2, fsp=6),
    MyColumn("dt3", t.DATETIME2, fsp=3),
    MyColumn("ts", t.TIMESTAMP2, fsp=6),
    MyColumn("tm", t.TIME2, fsp=6),
    MyColumn("bits", t.BIT, bits=12),
    MyColumn("flag", t.BIT, bits=1),
    MyColumn("e", t.ENUM, labels=("SUCCESS", "FAILURE")),
    MyColumn("s", t.SET, labels=("a", "b", "c")),
    MyColumn("txt", t.VARCHAR),
    MyColumn("bin", t.STRING, binary=True, pad=4),
    MyColumn("doc", t.BLOB, json=True),
)
_TABLE = MyTable("db", "t", _COLUMNS, ("id",))
_DT = st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59))
_ROWS = st.fixed_dictionaries(
    {
        "id": st.integers(0, 2**64 - 1),
        "i8": st.none() | st.integers(-128, 127),
        "u32": st.none() | st.integers(0, 2**32 - 1),
        "money": st.none()
        | st.decimals(min_value=Decimal("-1e35") + 1, max_value=Decimal("1e35") - 1, places=30),
        "dt": st.none() | _DT,
        "dt3": st.none() | _DT.map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
        "ts": st.none()
        | st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2038, 1, 1)),
        "tm": st.none() | st.timedeltas(min_value=-_MAX_TIME, max_value=_MAX_TIME),
        "bits": st.none() | st.integers(0, 2**12 - 1).map(lambda n: format(n, "b")),
        "flag": st.none() | st.sampled_from(["0", "1"]),
        "e": st.none() | st.sampled_from(["SUCCESS", "FAILURE"]),
        "s": st.none() | st.sets(st.sampled_from(["a", "b", "c"])),
        "txt": st.none() | st.text(),
        "bin": st.none() | st.binary(max_size=4),
        "doc": st.none() | st.sampled_from(['{"a": [1, 2.5]}', "[]", '"é😀"', "null"]),
    }
)


def _expected(row: dict[str, Any]) -> dict[str, Any]:
    """What fastavro reads back: the Debezium wire values, computed independently."""
    out = dict(row)
    if row["dt"] is not None:
        out["dt"] = (row["dt"] - datetime(1970, 1, 1)) // timedelta(microseconds=1)
    if row["dt3"] is not None:
        out["dt3"] = (row["dt3"] - datetime(1970, 1, 1)) // timedelta(milliseconds=1)
    if row["ts"] is not None:
        out["ts"] = row["ts"].replace(tzinfo=UTC)
    if row["tm"] is not None:
        out["tm"] = row["tm"] // timedelta(microseconds=1)
    if row["bits"] is not None:
        out["bits"] = int(row["bits"], 2).to_bytes(2, "little")
    if row["flag"] is not None:
        out["flag"] = row["flag"] == "1"
    if row["s"] is not None:
        out["s"] = ",".join(x for x in ("a", "b", "c") if x in row["s"])
    if row["bin"] is not None:
        out["bin"] = row["bin"].ljust(4, b"\0")
    if row["money"] is not None:
        with localcontext(prec=100):
            out["money"] = row["money"].quantize(Decimal(1).scaleb(-30))
    return out


@settings(max_examples=300, deadline=None)
@given(_ROWS)
def test_row_bytes_read_back_by_fastavro_with_the_registered_schema(row: dict[str, Any]) -> None:
    """Every row the compiled writer makes is valid Avro of the value schema, and reads
    back as the Debezium value of each column."""
    codec = MyTableCodec(server="srv", topic="srv.db.t", table=_TABLE, key_names=("id",))
    codec.set_schema_ids(1, 2)
    src = codec.source(ts_ms=1, snapshot="false", server_id=1, file="f", pos=4, gtid="0-1-1")
    value = codec.envelope("c", None, codec.row(row), src(0), encoded_ts(0))
    schema = fastavro.parse_schema(codec.schemas.value)
    got = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema)
    after = got["after"]
    if after["ts"] is not None:
        after["ts"] = datetime.fromisoformat(after["ts"].replace("Z", "+00:00"))
    assert after == _expected(row)
    key = fastavro.schemaless_reader(
        io.BytesIO(codec.key(row)[5:]), fastavro.parse_schema(codec.schemas.key)
    )
    assert key == {"id": Decimal(row["id"])}
    assert got["source"]["gtid"] == "0-1-1" and got["source"]["row"] == 0


def test_an_unknown_enum_label_names_the_column() -> None:
    codec = MyTableCodec(server="srv", topic="srv.db.t", table=_TABLE, key_names=("id",))
    row = dict.fromkeys((c.name for c in _COLUMNS), None) | {"id": 1, "e": "PENDING"}
    with pytest.raises(CaptureError, match=r"db\.t\.e .*PENDING"):
        codec.row(row)


def test_a_table_without_key_is_refused_by_name() -> None:
    table = MyTable("db", "log", (MyColumn("a", t.LONG),), ())
    with pytest.raises(CaptureError, match=r"table db\.log has no primary key"):
        key_columns(table, None)
    assert key_columns(table, ["a"]) == ("a",)


def test_a_spatial_column_is_refused_by_name() -> None:
    with pytest.raises(CaptureError, match=r"column g of db\.t .* exclude"):
        t.column_type(MyColumn("g", t.GEOMETRY), "db.t")


def test_float_writes_ieee_single() -> None:
    write = t.value_writer(MyColumn("f", t.FLOAT), t.column_type(MyColumn("f", t.FLOAT), "x"))
    assert write(1.5) == struct.pack("<f", 1.5)


_ODD = st.fixed_dictionaries(
    {
        "id": st.integers(0, 2**64 - 1),
        "i8": st.none() | st.integers(-(2**70), 2**70) | st.booleans() | st.text(max_size=2),
        "u32": st.none() | st.integers(0, 2**32 - 1) | st.floats(allow_nan=True),
        "money": st.none()
        | st.decimals(allow_nan=True, allow_infinity=True, places=None)
        | st.decimals(min_value=-1, max_value=1, places=34)
        | st.integers(-(10**40), 10**40),
        "dt": st.none()
        | _DT
        | st.datetimes(timezones=st.just(UTC))
        | st.dates().filter(lambda d: not isinstance(d, datetime)),
        "dt3": st.none() | _DT,
        "ts": st.none() | st.datetimes(min_value=datetime(1970, 1, 2)),
        "tm": st.none() | st.timedeltas(min_value=-_MAX_TIME, max_value=_MAX_TIME),
        "bits": st.none() | st.just("101"),
        "flag": st.none() | st.sampled_from(["0", "1"]),
        "e": st.none() | st.sampled_from(["SUCCESS", "FAILURE", "PENDING"]),
        "s": st.none() | st.just("a,c"),
        "txt": st.none() | st.text() | st.binary(max_size=8) | st.integers(),
        "bin": st.none() | st.binary(max_size=4),
        "doc": st.none() | st.just("[]"),
    }
)


@settings(max_examples=400, deadline=None)
@given(_ODD)
def test_the_compiled_writer_writes_what_the_checked_writer_writes(row: dict[str, Any]) -> None:
    """The in-line forms of the compiled record writer (ints, text, decimals, datetimes)
    give the bytes of the per-column writers, and refuse what they refuse: any value
    the fast path does not write the same goes to the checked path."""
    codec = MyTableCodec(server="srv", topic="srv.db.t", table=_TABLE, key_names=("id",))
    codec.set_schema_ids(1, 2)
    try:
        checked: bytes | None = codec._record(codec._value, row)
    except CaptureError:
        checked = None
    try:
        fast: bytes | None = codec._fast_value(row)
    except Exception:
        fast = None
    if checked is None:
        assert fast is None
    elif fast is not None:
        assert fast == checked
    if checked is None:
        with pytest.raises(CaptureError):
            codec.row(row)
    else:
        assert codec.row(row) == checked


def test_a_decimal_is_written_exactly_at_the_columns_scale() -> None:
    """Trailing zeros past the scale are no digits; a real digit past it is refused."""
    column = MyColumn("m", t.NEWDECIMAL, precision=10, scale=2)
    write = t.value_writer(column, t.column_type(column, "db.t"))
    assert write(Decimal("1.500")) == write(Decimal("1.50")) == write(Decimal("1.5"))
    assert write(Decimal("-0.00")) == write(0)
    with pytest.raises(ValueError, match="more than 2 fractional digits"):
        write(Decimal("1.505"))
