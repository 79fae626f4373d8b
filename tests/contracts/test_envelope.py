"""The technical envelope model and the translator's Change view."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bizevents.contracts.change import Change
from bizevents.contracts.envelope import (
    OPS,
    ChangeEvent,
    MySqlPosition,
    Op,
    PgPosition,
    Source,
    Tombstone,
    headers_tuple,
)
from bizevents.contracts.logical import UNAVAILABLE
from tests.contracts.strategies import change_events
from tests.envelopes import mysql_source, pg_source

PG = pg_source()
MYSQL = mysql_source(
    position=MySqlPosition("mysql-bin.000003", 154, 1, 223344, gtid="abc:23"), snapshot="last"
)


def event(
    op: Op,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    source: Source = PG,
) -> ChangeEvent:
    return ChangeEvent(op=op, source=source, before=before, after=after, key={"id": 1})


def test_ops_are_debeziums_five() -> None:
    """The op codes are defined once: c, u, d, r, t."""
    assert frozenset({"c", "u", "d", "r", "t"}) == OPS


def test_events_are_frozen_and_slotted() -> None:
    """Events cannot be changed after construction and carry no per-instance dict."""
    e = event("c", after={"id": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.op = "d"  # type: ignore[misc]
    assert not hasattr(e, "__dict__")
    assert not hasattr(PG, "__dict__")


@pytest.mark.parametrize(
    ("raw", "flag"),
    [("true", True), ("last", True), ("first", True), ("incremental", True), ("false", False)],
)
def test_snapshot_flag_is_a_bool_beside_the_raw_value(raw: str, flag: bool) -> None:
    """Any Debezium snapshot marker but 'false' means a snapshot read."""
    source = dataclasses.replace(PG, snapshot_raw=raw)
    assert source.snapshot is flag
    assert source.snapshot_raw == raw


def test_positions_print_as_their_databases_do() -> None:
    """An LSN prints as PostgreSQL's X/X; a binlog position as file:pos:row."""
    assert str(PgPosition(lsn=0x16B3748)) == "0/16B3748"
    assert str(PgPosition(lsn=(5 << 32) | 0xA)) == "5/A"
    assert str(MYSQL.position) == "mysql-bin.000003:154:1"


def test_source_names_and_transaction_ids() -> None:
    """qualified_table uses the schema, or MySQL's database; tx_id per database."""
    assert PG.qualified_table == "public.orders"
    assert MYSQL.qualified_table == "shop.orders"
    assert PG.tx_id == 556
    assert MYSQL.tx_id == "abc:23"
    assert dataclasses.replace(PG, position=None).tx_id is None


def test_tombstone_is_its_own_type() -> None:
    """A tombstone is not a change event, and says so."""
    t = Tombstone({"id": 1})
    assert t.is_tombstone
    assert not event("d", before={"id": 1}).is_tombstone
    assert not isinstance(t, ChangeEvent)


def test_headers_become_an_immutable_tuple() -> None:
    """Kafka headers (list or None, bytes or str) become a tuple of (str, bytes)."""
    assert headers_tuple(None) == ()
    assert headers_tuple([("a", b"1"), ("b", None), ("c", "x")]) == (
        ("a", b"1"),
        ("b", None),
        ("c", b"x"),
    )


# -- the Change view -------------------------------------------------------------------------


def test_insert_changes_every_column() -> None:
    """An insert's changed columns are all its after columns."""
    c = Change(event("c", after={"id": 1, "total": Decimal("2.50"), "note": None}))
    assert c.changed_columns() == {"id", "total", "note"}
    assert c.is_create and c.is_insert and not c.is_update and not c.is_delete
    assert c.old("total") is None
    assert c.new("total") == Decimal("2.50")


def test_update_changes_only_differing_columns() -> None:
    """An update lists the columns whose value differs between before and after."""
    c = Change(
        event(
            "u",
            before={"id": 1, "total": Decimal("2.5"), "status": "new"},
            after={"id": 1, "total": Decimal("2.50"), "status": "paid"},
        )
    )
    assert c.changed_columns() == {"status"}
    assert c.changed("status", "note")
    assert not c.changed("total")
    assert (c.old("status"), c.new("status")) == ("new", "paid")
    assert c.is_update


def test_update_without_before_changes_every_known_column() -> None:
    """Without a before row (default replica identity) every after column counts."""
    c = Change(event("u", after={"id": 1, "status": "paid", "doc": UNAVAILABLE}))
    assert c.changed_columns() == {"id", "status"}
    assert c.old("status") is None


def test_unavailable_toast_value_is_unchanged_and_current_falls_back() -> None:
    """An UNAVAILABLE after value is not a change; current() gives the known value."""
    c = Change(event("u", before={"id": 1, "doc": "big text"}, after={"id": 1, "doc": UNAVAILABLE}))
    assert c.changed_columns() == frozenset()
    assert c.new("doc") is UNAVAILABLE
    assert c.current("doc") == "big text"


def test_delete_and_truncate() -> None:
    """A delete changes its before columns; a truncate changes none."""
    d = Change(event("d", before={"id": 1, "status": "paid"}))
    assert d.is_delete and d.changed_columns() == {"id", "status"}
    assert d.new("status") is None
    assert d.current("status") == "paid"
    t = Change(ChangeEvent(op="t", source=PG))
    assert t.is_truncate and t.changed_columns() == frozenset()


def test_snapshot_read_is_a_create_but_not_an_insert() -> None:
    """op 'r' is a create from a snapshot, not an insert from the log."""
    c = Change(event("r", after={"id": 1}, source=dataclasses.replace(PG, snapshot_raw="true")))
    assert c.is_create and not c.is_insert and c.is_snapshot


def test_position_and_table() -> None:
    """The view names the table as schema.table and gives the log position."""
    assert Change(event("c", after={"id": 1})).table == "public.orders"
    assert Change(event("c", after={"id": 1})).position == PgPosition(0x16B3748, 556)
    mysql = Change(event("c", after={"id": 1}, source=MYSQL))
    assert mysql.table == "shop.orders"
    assert mysql.position == MYSQL.position
    assert mysql.is_snapshot


def test_unknown_column_names_table_and_row() -> None:
    """Asking for a column the row lacks raises KeyError naming it."""
    c = Change(event("u", before={"id": 1}, after={"id": 1}))
    with pytest.raises(KeyError, match=r"public\.orders has no column 'nope' in its after row"):
        c.new("nope")


@settings(max_examples=200, suppress_health_check=list(HealthCheck))
@given(change_events())
def test_changed_columns_are_after_columns_or_before_ones(e: ChangeEvent) -> None:
    """changed_columns is a subset of the row's columns, and empty only when it must be."""
    c = Change(e)
    changed = c.changed_columns()
    row = e.after if e.after is not None else e.before
    assert changed <= set(row or ())
    if e.op in ("c", "r"):
        assert changed == {k for k, v in (e.after or {}).items() if v is not UNAVAILABLE}


_NAMES = st.sampled_from(["id", "status", "total", "note"])
_VALUES = st.one_of(st.integers(0, 2), st.none(), st.just(UNAVAILABLE))
_ROWS = st.one_of(st.none(), st.dictionaries(_NAMES, _VALUES, max_size=4))


@given(
    op=st.sampled_from(["c", "u", "d", "t"]),
    before=_ROWS,
    after=_ROWS,
    reads=st.one_of(st.none(), st.frozensets(_NAMES)),
    asked=st.lists(_NAMES, max_size=3),
)
def test_changed_is_changed_columns_for_the_named_columns(
    op: str,
    before: dict[str, object] | None,
    after: dict[str, object] | None,
    reads: frozenset[str] | None,
    asked: list[str],
) -> None:
    """``changed(*columns)`` compares only the named columns, with the very answer of
    ``changed_columns()``."""
    source = Source(connector="postgresql", name="s", db="d", schema="p", table="t", ts_ms=1)
    event = ChangeEvent(op=op, source=source, before=before, after=after)  # type: ignore[arg-type]
    change = Change(event, reads, "t@1")
    assert change.changed(*asked) == any(c in change.changed_columns() for c in asked)
