"""A translator's declared columns held against its table's registered layouts."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest
from bizevents_store.translators import orders_v2

from bizevents.contracts.technical import AvroEncoder
from bizevents.translators.columns import Layout, column_problems, row_columns
from tests.store_technical import orders_table

SERVER = "shop"


def orders_schema() -> dict[str, Any]:
    return copy.deepcopy(AvroEncoder(orders_table(SERVER), 0, 0).schemas.value)


def value_fields(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The row record's fields (defined in ``before``, referenced by name in ``after``)."""
    before = next(f for f in schema["fields"] if f["name"] == "before")
    record: dict[str, Any] = before["type"][1]
    fields: list[dict[str, Any]] = record["fields"]
    return fields


def layouts(*schemas: dict[str, Any]) -> list[Layout]:
    return [Layout(f"version {n}", json.dumps(s)) for n, s in enumerate(schemas, 1)]


def test_the_row_columns_are_read_through_a_named_reference() -> None:
    """``after`` names the record ``before`` defines; the columns are the same."""
    columns = row_columns(json.dumps(orders_schema()))
    assert {"id", "status", "total", "placed_at"} <= set(columns)


def test_an_unchanged_layout_breaks_nothing() -> None:
    schema = orders_schema()
    assert column_problems(orders_v2, "store.orders", layouts(schema, schema)) == []


def test_a_dropped_column_is_named() -> None:
    old, new = orders_schema(), orders_schema()
    value_fields(new)[:] = [f for f in value_fields(new) if f["name"] != "status"]
    (problem,) = column_problems(orders_v2, "store.orders", layouts(old, new))
    assert problem.column == "status"
    assert str(problem) == (
        "orders@2 reads store.orders.status: the table's latest layout (version 2) has no such "
        "column (it had it in version 1)"
    )


def test_the_changes_of_a_translator_declaring_no_columns_are_held() -> None:
    """``changes`` names columns too: a dropped one is reported when ``columns`` is not
    declared (when it is, ``changes`` is among it)."""
    old, new = orders_schema(), orders_schema()
    value_fields(new)[:] = [f for f in value_fields(new) if f["name"] != "status"]
    only_changes = dataclasses.replace(orders_v2, columns=None)
    assert only_changes.changes == frozenset({"status"})
    (problem,) = column_problems(only_changes, "store.orders", layouts(old, new))
    assert problem.column == "status"
    undeclared = dataclasses.replace(orders_v2, columns=None, changes=None)
    assert column_problems(undeclared, "store.orders", layouts(old, new)) == []


@pytest.mark.parametrize(
    ("column", "new_type", "shown"),
    [
        ("total", "double", '"double"'),
        ("customer_id", ["null", "long"], '["null", "long"]'),  # now nullable
    ],
    ids=["retyped", "made-nullable"],
)
def test_a_retyped_column_is_named(column: str, new_type: Any, shown: str) -> None:
    old, new = orders_schema(), orders_schema()
    next(f for f in value_fields(new) if f["name"] == column)["type"] = new_type
    (problem,) = column_problems(orders_v2, "store.orders", layouts(old, new))
    assert problem.column == column
    assert problem.message.startswith("its type changed in version 2, from ")
    assert problem.message.endswith(f"to {shown}")


def test_a_new_enum_label_or_an_unread_column_is_no_problem() -> None:
    """An enum's allowed labels grow; a column nobody reads may come and go."""
    old, new = orders_schema(), orders_schema()
    status = next(f for f in value_fields(new) if f["name"] == "status")
    status["type"]["connect.parameters"]["allowed"] += ",refunded"
    value_fields(new).append({"name": "note", "type": ["null", "string"], "default": None})
    assert column_problems(orders_v2, "store.orders", layouts(old, new)) == []


def test_a_translator_that_declares_nothing_is_not_held() -> None:
    """Without ``columns=`` (or ``changes=``) it reads whatever comes: nothing to check."""
    undeclared = dataclasses.replace(orders_v2, columns=None, changes=None)
    new = orders_schema()
    value_fields(new)[:] = [f for f in value_fields(new) if f["name"] == "id"]
    assert column_problems(undeclared, "store.orders", layouts(orders_schema(), new)) == []
    assert column_problems(orders_v2, "store.orders", layouts(orders_schema(), new))
