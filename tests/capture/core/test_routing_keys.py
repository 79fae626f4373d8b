"""The same business key on both sides: for every column type a table may be routed by,
the partition capture gives a record (:class:`bizevents.capture.core.routing.Router`,
from the key it wrote) is the partition of the key the transaction worker computes
(:func:`bizevents.translators.routing.business_key`, from the value it decodes). Pure:
each source's table codec writes the records, no database, no broker
(tests/capture/core/test_routing.py has the same on the real databases)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from bizevents_store.contracts import OrderPlaced
from hypothesis import given
from hypothesis import strategies as st

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.routing import Router, _integer_skip
from bizevents.capture.mariadb import types as my
from bizevents.capture.mariadb.codec import MyTable, MyTableCodec
from bizevents.capture.mariadb.types import MyColumn
from bizevents.capture.postgres.codec import TableCodec
from bizevents.capture.postgres.messages import Column, Relation
from bizevents.capture.postgres.types import PgTypeMapper
from bizevents.contracts.envelope import ChangeEvent
from bizevents.contracts.technical.detect import AutoDecoder
from bizevents.contracts.technical.routing import partition_for
from bizevents.transactions import transaction_translator
from bizevents.translators.assembly import Part
from bizevents.translators.records import SourceRecord
from bizevents.translators.routing import business_key

#: Nearly one partition per hash: two keys that differ land apart but by chance.
_PARTITIONS = 2**31 - 1

_UNICODE = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
_DAYS = st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))


def _ints(bits: int, unsigned: bool = False) -> st.SearchStrategy[int]:
    low, high = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return st.sampled_from([low, high, 0, -1 if low else 1]) | st.integers(low, high)


def _decimals(precision: int, scale: int) -> st.SearchStrategy[Decimal]:
    bound = Decimal(10) ** (precision - scale) - Decimal(1).scaleb(-scale)
    return st.decimals(-bound, bound, places=scale)


def _pg_timestamp(t: dt.datetime) -> str:
    return t.isoformat(sep=" ", timespec="microseconds")


#: PostgreSQL: (type oid, type modifier, its values as pgoutput's text).
_PG: dict[str, tuple[int, int, st.SearchStrategy[str]]] = {
    "smallint": (21, -1, _ints(16).map(str)),
    "integer": (23, -1, _ints(32).map(str)),
    "bigint": (20, -1, _ints(64).map(str)),
    "oid": (26, -1, _ints(32, unsigned=True).map(str)),
    "text": (25, -1, _UNICODE),
    "varchar": (1043, -1, _UNICODE),
    "char(4)": (1042, 8, _UNICODE.map(lambda s: s[:4].ljust(4))),
    "numeric": (
        1700,
        -1,
        st.decimals(allow_nan=False, allow_infinity=False).map(lambda d: f"{d:f}"),
    ),
    "numeric(12,3)": (1700, (12 << 16 | 3) + 4, _decimals(12, 3).map(str)),
    "date": (1082, -1, _DAYS.map(dt.date.isoformat)),
    "time": (1083, -1, st.times().map(lambda t: t.isoformat(timespec="microseconds"))),
    "timestamp": (1114, -1, st.datetimes(max_value=dt.datetime(9999, 12, 31)).map(_pg_timestamp)),
    "timestamptz": (
        1184,
        -1,
        st.datetimes(min_value=dt.datetime(1, 1, 2)).map(lambda t: _pg_timestamp(t) + "+00"),
    ),
    "uuid": (2950, -1, st.uuids().map(str)),
    "bytea": (17, -1, st.binary(max_size=12).map(lambda b: "\\x" + b.hex())),
    "boolean": (16, -1, st.sampled_from(["t", "f"])),
}

#: MariaDB: (the column as the binlog's table map describes it, its values as the binlog
#: library gives them).
_MY: dict[str, tuple[MyColumn, st.SearchStrategy[Any]]] = {
    "tinyint": (MyColumn("k", my.TINY), _ints(8)),
    "tinyint unsigned": (MyColumn("k", my.TINY, unsigned=True), _ints(8, unsigned=True)),
    "smallint": (MyColumn("k", my.SHORT), _ints(16)),
    "smallint unsigned": (MyColumn("k", my.SHORT, unsigned=True), _ints(16, unsigned=True)),
    "mediumint": (MyColumn("k", my.INT24), _ints(24)),
    "int": (MyColumn("k", my.LONG), _ints(32)),
    "int unsigned": (MyColumn("k", my.LONG, unsigned=True), _ints(32, unsigned=True)),
    "bigint": (MyColumn("k", my.LONGLONG), _ints(64)),
    "bigint unsigned": (MyColumn("k", my.LONGLONG, unsigned=True), _ints(64, unsigned=True)),
    "varchar": (MyColumn("k", my.VARCHAR), _UNICODE),
    "char": (MyColumn("k", my.STRING), _UNICODE),
    "decimal(12,3)": (MyColumn("k", my.NEWDECIMAL, precision=12, scale=3), _decimals(12, 3)),
    "decimal(30,0)": (MyColumn("k", my.NEWDECIMAL, precision=30, scale=0), _decimals(30, 0)),
    "date": (MyColumn("k", my.DATE), _DAYS),
    "time(6)": (
        MyColumn("k", my.TIME2, fsp=6),
        st.timedeltas(-dt.timedelta(hours=838), dt.timedelta(hours=838)),
    ),
    "datetime": (
        MyColumn("k", my.DATETIME2),
        st.datetimes().map(lambda t: t.replace(microsecond=0)),
    ),
    "datetime(6)": (MyColumn("k", my.DATETIME2, fsp=6), st.datetimes()),
    "timestamp(6)": (
        MyColumn("k", my.TIMESTAMP2, fsp=6),
        st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 1)),
    ),
    "year": (MyColumn("k", my.YEAR), st.integers(1901, 2155)),
    "varbinary": (MyColumn("k", my.VARCHAR, binary=True), st.binary(max_size=12)),
}


def _translator(table: str, columns: tuple[str, ...]) -> Any:
    return transaction_translator(
        name="keys",
        version=1,
        sources=[table],
        emits=[OrderPlaced],
        keys={table: list(columns)},
    )(lambda tx: None)


def _agree(codec: Any, table: str, columns: tuple[str, ...], key: bytes, value: bytes) -> None:
    """Capture's partition of the record is the worker's partition of its business key."""
    config = CaptureConfig(
        server="srv", tables=(table,), partitions=_PARTITIONS, routing={table: columns}
    )
    router = Router(config)
    router.learn(codec, table)
    schemas = {7: codec.schemas.key, 8: codec.schemas.value}
    event = AutoDecoder(schemas.get).decode(key, value)
    assert isinstance(event, ChangeEvent)
    part = Part(1, SourceRecord(codec.topic, 0, 1, key, value), change=event)
    worker = business_key(_translator(table, columns), part)
    assert router.partition(codec.topic, key) == partition_for(worker, _PARTITIONS), worker


_ROUTED_BY = pytest.mark.parametrize(
    "columns", [("k",), ("n", "k"), ("k", "n")], ids=["k", "n,k", "k,n"]
)


def _pg_codec(kind: str) -> TableCodec:
    oid, modifier, _ = _PG[kind]
    relation = Relation(
        1, "public", "t", "d", (Column(1, "n", 23, -1), Column(1, "k", oid, modifier))
    )
    codec = TableCodec(
        server="srv",
        database="db",
        topic="srv.public.t",
        relation=relation,
        key_names=["n", "k"],
        types=PgTypeMapper(),
    )
    codec.set_schema_ids(7, 8)
    return codec


def _pg_case(kind: str, columns: tuple[str, ...]) -> Callable[[str, int], None]:
    codec = _pg_codec(kind)

    def check(text: str, n: int) -> None:
        values = (str(n), text)
        source = codec.source(1, None, "false", None).with_long(5)
        value = codec.envelope("c", None, codec.row(values), source, 2)
        _agree(codec, "public.t", columns, codec.key(values), value)

    return check


@_ROUTED_BY
@pytest.mark.parametrize("kind", sorted(_PG))
@given(data=st.data())
def test_postgres_capture_and_worker_agree(kind: str, columns: tuple[str, ...], data: Any) -> None:
    check = _pg_case(kind, columns)
    check(data.draw(_PG[kind][2], label=kind), data.draw(_ints(32), label="n"))


def _my_codec(kind: str) -> MyTableCodec:
    column = _MY[kind][0]
    table = MyTable("shop", "t", (MyColumn("n", my.LONG, nullable=False), column), ("n", "k"))
    codec = MyTableCodec(server="srv", topic="srv.shop.t", table=table, key_names=("n", "k"))
    codec.set_schema_ids(7, 8)
    return codec


def _my_case(kind: str, columns: tuple[str, ...]) -> Callable[[Any, int], None]:
    codec = _my_codec(kind)

    def check(k: Any, n: int) -> None:
        row = {"n": n, "k": k}
        source = codec.source(
            ts_ms=5, snapshot="false", server_id=1, file="b.000001", pos=4, gtid=None
        )
        value = codec.envelope("c", None, codec.row(row), source(0), 2)
        _agree(codec, "shop.t", columns, codec.key(row), value)

    return check


@_ROUTED_BY
@pytest.mark.parametrize("kind", sorted(_MY))
@given(data=st.data())
def test_mariadb_capture_and_worker_agree(kind: str, columns: tuple[str, ...], data: Any) -> None:
    check = _my_case(kind, columns)
    check(data.draw(_MY[kind][1], label=kind), data.draw(_ints(32), label="n"))


def test_integer_keys_are_read_in_place() -> None:
    """A table routed by one plain integer column takes the compiled path (its varint
    read from the key, the cost routing adds to a record); any other type is decoded."""
    pg = {kind for kind in _PG if _integer_skip(_pg_codec(kind).key_schema_json(), ("k",)) >= 0}
    assert pg == {"smallint", "integer", "bigint", "oid"}
    mariadb = {
        kind for kind in _MY if _integer_skip(_my_codec(kind).key_schema_json(), ("k",)) >= 0
    }
    assert mariadb == {
        "tinyint",
        "tinyint unsigned",
        "smallint",
        "smallint unsigned",
        "mediumint",
        "int",
        "int unsigned",
        "bigint",
        "year",  # a plain int in Avro too
    }
