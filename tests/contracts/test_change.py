"""The change a translator reads: what happened, old and new values, the newest known
value past an unchanged TOASTed one, which columns changed, and the columns it declared."""

from __future__ import annotations

import pytest

from bizevents.contracts.change import Change
from bizevents.contracts.exceptions import Coordinates
from bizevents.contracts.logical import UNAVAILABLE
from tests.envelopes import Row, keyed_event, pg_source

AT = Coordinates("shop.public.orders", 0, 7)


def change(op: str, before: Row, after: Row, snapshot: str = "false") -> Change:
    return Change(keyed_event(op, before, after, pg_source(snapshot=snapshot), AT))


BEFORE = {"id": 1, "status": "new", "note": "x", "total": 5}
AFTER = {"id": 1, "status": "paid", "note": UNAVAILABLE, "total": 5}


def test_what_happened() -> None:
    read = change("r", None, BEFORE, snapshot="true")
    assert read.is_create and read.is_snapshot and not read.is_insert
    insert = change("c", None, BEFORE)
    assert insert.is_create and insert.is_insert and not insert.is_snapshot
    assert change("d", BEFORE, None).is_delete and change("u", BEFORE, AFTER).is_update
    assert (
        insert.table == "public.orders" and repr(insert) == "Change(c public.orders key={'id': 1})"
    )


def test_old_new_and_the_newest_known_value() -> None:
    update = change("u", BEFORE, AFTER)
    assert (update.old("status"), update.new("status")) == ("new", "paid")
    assert update.new("note") is UNAVAILABLE and update.current("note") == "x"
    deleted = change("d", BEFORE, None)
    assert deleted.new("status") is None and deleted.current("status") == "new"
    with pytest.raises(KeyError, match=r"public\.orders has no column 'colour' in its after row"):
        update.new("colour")


def test_changed_columns_leave_out_the_unchanged_and_the_unavailable() -> None:
    update = change("u", BEFORE, AFTER)
    assert update.changed_columns() == {"status"}
    assert update.changed("status") and not update.changed("note", "total")
    # no before row (PostgreSQL's default replica identity): every known after column
    assert change("u", None, AFTER).changed_columns() == {"id", "status", "total"}
    assert change("d", BEFORE, None).changed_columns() == set(BEFORE)
    assert change("d", BEFORE, None).changed("total")


def test_a_column_it_did_not_declare_is_refused_by_name() -> None:
    seen = change("u", BEFORE, AFTER).reading(frozenset({"id", "total"}), "orders@2")
    assert seen.new("total") == 5
    with pytest.raises(KeyError, match=r"orders@2 reads column 'status' of public.orders"):
        seen.old("status")
    assert seen.changed_columns() == frozenset() and not seen.changed("status")
