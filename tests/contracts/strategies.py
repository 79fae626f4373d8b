"""Hypothesis strategies for technical events: column types, rows, whole envelopes.

Reusable by any test that needs realistic change events: ``table_schemas()`` gives a
table (server, schema, key and value columns, connector), ``rows(table)`` a row of it,
``change_events(table)`` a consistent envelope (c/u/d/r/t with the right before/after,
a PostgreSQL or MySQL source), ``tombstones(table)`` a tombstone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone, tzinfo
from decimal import Decimal
from typing import Any, cast

from hypothesis import strategies as st

from bizevents.contracts.envelope import (
    OP_CREATE,
    OP_DELETE,
    OP_READ,
    OP_TRUNCATE,
    OP_UPDATE,
    ChangeEvent,
    MySqlPosition,
    Op,
    PgPosition,
    Source,
    Tombstone,
    Transaction,
)
from bizevents.contracts.logical import UNAVAILABLE, ColumnType, Field, JsonDocument, Kind
from bizevents.contracts.technical import TableSchema

__all__ = [
    "change_events",
    "column_types",
    "identifiers",
    "json_values",
    "rows",
    "sources",
    "table_schemas",
    "tables_and_events",
    "tombstones",
    "values_of",
]

identifiers = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)

_LABELS = st.lists(identifiers, min_size=1, max_size=5, unique=True).map(tuple)

# Debezium's NanoTimestamp is an int64 of nanoseconds: about 1678 to 2261.
_NANO_MIN, _NANO_MAX = datetime(1678, 1, 1), datetime(2261, 12, 31)
_UTC: st.SearchStrategy[tzinfo | None] = st.just(UTC)
_OFFSETS: st.SearchStrategy[tzinfo | None] = st.sampled_from(
    [UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5, minutes=-30))]
)


@st.composite
def _decimal_type(draw: st.DrawFn) -> ColumnType:
    precision = draw(st.integers(1, 38))
    scale = draw(st.integers(0, precision))
    return ColumnType(Kind.DECIMAL, scale=scale, precision=precision)


_SCALAR_TYPES = st.one_of(
    st.sampled_from(
        [
            ColumnType(k)
            for k in (
                Kind.BOOLEAN,
                Kind.INT16,
                Kind.INT32,
                Kind.INT64,
                Kind.FLOAT32,
                Kind.FLOAT64,
                Kind.STRING,
                Kind.BYTES,
                Kind.VARIABLE_DECIMAL,
                Kind.DATE,
                Kind.TIME_MILLIS,
                Kind.TIME_MICROS,
                Kind.TIME_NANOS,
                Kind.ZONED_TIME,
                Kind.TIMESTAMP_MILLIS,
                Kind.TIMESTAMP_MICROS,
                Kind.TIMESTAMP_NANOS,
                Kind.ZONED_TIMESTAMP,
                Kind.INTERVAL_MICROS,
                Kind.UUID,
                Kind.JSON,
            )
        ]
    ),
    _decimal_type(),
    _LABELS.map(lambda labels: ColumnType(Kind.ENUM, labels=labels)),
)

#: Any column type the codecs support, arrays of scalars included.
column_types = st.one_of(
    _SCALAR_TYPES,
    st.sampled_from([Kind.INT32, Kind.STRING, Kind.UUID]).map(
        lambda k: ColumnType(Kind.ARRAY, items=ColumnType(k))
    ),
)

_KEY_TYPES = st.sampled_from(
    [ColumnType(Kind.INT32), ColumnType(Kind.INT64), ColumnType(Kind.STRING), ColumnType(Kind.UUID)]
)

# Kinds whose wire form is text or bytes: where Debezium can put its TOAST marker.
_TOASTABLE = {Kind.STRING, Kind.BYTES, Kind.JSON}


def values_of(ct: ColumnType, toast: bool = False) -> st.SearchStrategy[Any]:
    """Non-null Python values of a column type (``toast`` adds UNAVAILABLE where it
    can occur)."""
    base = _values(ct)
    text_array = ct.kind is Kind.ARRAY and ct.items is not None and ct.items.kind is Kind.STRING
    if toast and (ct.kind in _TOASTABLE or text_array):
        return st.one_of(base, st.just(UNAVAILABLE))
    return base


def _values(ct: ColumnType) -> st.SearchStrategy[Any]:
    k = ct.kind
    if k is Kind.BOOLEAN:
        return st.booleans()
    if k is Kind.INT16:
        return st.integers(-(2**15), 2**15 - 1)
    if k is Kind.INT32:
        return st.integers(-(2**31), 2**31 - 1)
    if k is Kind.INT64:
        return st.integers(-(2**63), 2**63 - 1)
    if k is Kind.FLOAT32:
        return st.floats(width=32, allow_nan=False, allow_infinity=False)
    if k is Kind.FLOAT64:
        return st.floats(allow_nan=False, allow_infinity=False)
    if k is Kind.STRING:
        return st.text(max_size=20)
    if k is Kind.BYTES:
        return st.binary(max_size=20)
    if k is Kind.DECIMAL:
        scale = ct.scale or 0
        # Integers made into Decimals from text: Decimal arithmetic (hypothesis's
        # st.decimals too) rounds to 28 digits, which turned 10**31 - 1 into 10**31,
        # one digit more than a precision-31 column holds.
        top = 10 ** (ct.precision or 38) - 1
        return st.integers(-top, top).map(lambda n: Decimal(f"{n}e-{scale}"))
    if k is Kind.VARIABLE_DECIMAL:
        return st.decimals(allow_nan=False, allow_infinity=False)
    if k is Kind.DATE:
        return st.dates()
    if k is Kind.TIME_MILLIS:
        return st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000))
    if k in (Kind.TIME_MICROS, Kind.TIME_NANOS):
        return st.times()
    if k is Kind.ZONED_TIME:
        return st.times().map(lambda t: t.replace(tzinfo=UTC))
    if k is Kind.TIMESTAMP_MILLIS:
        return st.datetimes(timezones=_UTC).map(
            lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)
        )
    if k is Kind.TIMESTAMP_MICROS:
        return st.datetimes(timezones=_UTC)
    if k is Kind.TIMESTAMP_NANOS:
        return st.datetimes(_NANO_MIN, _NANO_MAX, timezones=cast(Any, _UTC))
    if k is Kind.ZONED_TIMESTAMP:
        return st.datetimes(
            datetime(1, 1, 2), datetime(9999, 12, 30), timezones=cast(Any, _OFFSETS)
        )
    if k is Kind.INTERVAL_MICROS:
        return st.timedeltas(min_value=timedelta(days=-(10**6)), max_value=timedelta(days=10**6))
    if k is Kind.UUID:
        return st.uuids()
    if k is Kind.JSON:
        return json_values.map(JsonDocument.from_value)
    if k is Kind.ENUM:
        return st.sampled_from(ct.labels or ("a",))
    if k is Kind.ARRAY:
        item = _values(ct.items or ColumnType(Kind.INT32))
        return st.lists(st.one_of(st.none(), item), max_size=4)
    raise AssertionError(f"no strategy for {ct}")


@st.composite
def table_schemas(draw: st.DrawFn, connector: str | None = None) -> TableSchema:
    """A table: 0-2 key columns (non-null) and 0-6 further nullable columns."""
    names = draw(st.lists(identifiers, min_size=1, max_size=8, unique=True))
    n_keys = draw(st.integers(0, min(2, len(names))))
    keys = tuple(Field(n, draw(_KEY_TYPES), optional=False) for n in names[:n_keys])
    others = tuple(Field(n, draw(column_types), optional=True) for n in names[n_keys:])
    return TableSchema(
        server=draw(identifiers),
        schema=draw(identifiers),
        table=draw(identifiers),
        key_fields=keys,
        value_fields=keys + others,
        connector=connector or draw(st.sampled_from(["postgresql", "mysql"])),  # type: ignore[arg-type]
    )


@st.composite
def rows(draw: st.DrawFn, table: TableSchema, toast: bool = False) -> dict[str, Any]:
    """A row of ``table``: every value column, nullable ones sometimes ``None``."""
    row: dict[str, Any] = {}
    for f in table.value_fields:
        values = values_of(f.type, toast)
        row[f.name] = draw(st.one_of(st.none(), values) if f.optional else values)
    return row


@st.composite
def sources(draw: st.DrawFn, table: TableSchema, snapshot: bool = False) -> Source:
    """A source block for ``table``: PostgreSQL (LSN) or MySQL (binlog) by its connector."""
    raw = draw(st.sampled_from(["true", "last", "first", "incremental"])) if snapshot else "false"
    ts_ms = draw(st.integers(0, 2**42))
    extra = draw(st.sampled_from([{}, {"ts_us": ts_ms * 1000 + 7}]))
    if table.connector == "mysql":
        return Source(
            connector="mysql",
            name=table.server,
            db=table.schema,
            schema=None,
            table=table.table,
            ts_ms=ts_ms,
            snapshot_raw=raw,
            position=MySqlPosition(
                file=f"mysql-bin.{draw(st.integers(1, 999999)):06d}",
                pos=draw(st.integers(4, 2**40)),
                row=draw(st.integers(0, 100)),
                server_id=draw(st.integers(1, 2**32)),
                gtid=draw(st.none() | st.just("3e11fa47-71ca-11e1-9e33-c80aa9429562:23")),
                thread=draw(st.none() | st.integers(0, 2**20)),
            ),
            version="2.7.0.Final",
            extra=extra,
        )
    return Source(
        connector="postgresql",
        name=table.server,
        db=draw(identifiers),
        schema=table.schema,
        table=table.table,
        ts_ms=ts_ms,
        snapshot_raw=raw,
        position=PgPosition(
            lsn=draw(st.integers(0, 2**63 - 1)),
            tx_id=draw(st.none() | st.integers(0, 2**32)),
            xmin=draw(st.none() | st.integers(0, 2**32)),
        ),
        version=draw(st.none() | st.just("2.7.0.Final")),
        sequence=draw(st.none() | st.just('["24023928","24023928"]')),
        extra=extra,
    )


def _key_of(table: TableSchema, row: dict[str, Any]) -> dict[str, Any] | None:
    if not table.key_fields:
        return None
    return {f.name: row[f.name] for f in table.key_fields}


@st.composite
def change_events(draw: st.DrawFn, table: TableSchema | None = None) -> ChangeEvent:
    """A consistent envelope for ``table`` (drawn when not given)."""
    if table is None:
        table = draw(table_schemas())
    op: Op = draw(st.sampled_from([OP_CREATE, OP_UPDATE, OP_DELETE, OP_READ, OP_TRUNCATE]))
    before = after = key = None
    if op in (OP_CREATE, OP_READ):
        after = draw(rows(table))
        key = _key_of(table, after)
    elif op == OP_UPDATE:
        after = draw(rows(table, toast=True))
        before = draw(st.none() | rows(table))
        if before is not None:
            for f in table.key_fields:
                before[f.name] = after[f.name]
        key = _key_of(table, after)
    elif op == OP_DELETE:
        before = draw(rows(table))
        key = _key_of(table, before)
    transaction = draw(
        st.none()
        | st.builds(
            Transaction,
            st.from_regex(r"[0-9]{3,8}:[0-9]{6,9}", fullmatch=True),
            st.integers(1, 2**31),
            st.integers(1, 2**31),
        )
    )
    return ChangeEvent(
        op=op,
        source=draw(sources(table, snapshot=op == OP_READ)),
        before=before,
        after=after,
        key=key,
        ts_ms=draw(st.none() | st.integers(0, 2**42)),
        transaction=transaction,
    )


@st.composite
def tombstones(draw: st.DrawFn, table: TableSchema) -> Tombstone:
    """A tombstone for a table with key columns."""
    assert table.key_fields, "a tombstone needs a key"
    row = draw(rows(table))
    key = _key_of(table, row)
    assert key is not None
    return Tombstone(key)


@st.composite
def tables_and_events(
    draw: st.DrawFn, connector: str | None = None
) -> tuple[TableSchema, ChangeEvent | Tombstone]:
    """A table and one record of it: mostly change events, sometimes a tombstone."""
    table = draw(table_schemas(connector))
    if table.key_fields and draw(st.integers(0, 9)) == 0:
        return table, draw(tombstones(table))
    return table, draw(change_events(table))
