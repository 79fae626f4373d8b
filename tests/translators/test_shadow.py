"""The shadow comparison (pure): events paired by id, verdicts and fields, the gate of a
promotion with its figures, and the diff report's format."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bizevents.diffreport import render
from bizevents.translators.shadow import (
    PromotionGate,
    ShadowBook,
    ShadowComparison,
    differing_fields,
    parse_fraction,
)

PLACED = "shop.orders.OrderPlaced"
SHIPPED = "shop.orders.OrderShipped"


def placed(order: int, *, status: str = "SUCCESS", total: str = "10.00") -> dict[str, Any]:
    return {"order_id": order, "status": status, "total": total, "address": {"city": "Oslo"}}


def test_fields_are_named_dotted_and_sorted() -> None:
    a = {"x": 1, "nested": {"a": 1, "b": [1, 2]}, "gone": 1}
    b = {"x": 2, "nested": {"a": 1, "b": [1, 3]}, "new": None}
    assert differing_fields(a, b) == ["gone", "nested.b", "new", "x"]
    assert differing_fields(a, a) == []


def test_nan_equals_nan_and_lineage_is_left_out() -> None:
    assert differing_fields({"n": float("nan")}, {"n": float("nan")}) == []
    assert differing_fields({"n": 1, "lineage": "v3"}, {"n": 1, "lineage": "v4"}) == []
    assert differing_fields({"n": 1, "lineage": "v3"}, {"n": 2, "lineage": "v4"}) == ["n"]


def test_models_compare_by_their_fields_at_any_depth() -> None:
    from pydantic import BaseModel

    class Address(BaseModel):
        city: str
        zip: str

    a = {"id": 1, "address": Address(city="Oslo", zip="0150")}
    b = {"id": 1, "address": Address(city="Oslo", zip="0151")}
    assert differing_fields(a, b) == ["address.zip"]
    c = ShadowComparison("orders@3", "orders@4")
    c.add_change([("e1", PLACED, a)], [("e1", PLACED, b)])
    assert c.samples[PLACED]["differing"][0]["shadow"]["address"] == {
        "city": "Oslo",
        "zip": "0151",
    }


def test_verdicts_per_event_by_id() -> None:
    c = ShadowComparison("orders@3", "orders@4")
    c.add_change([("e1", PLACED, placed(1))], [("e1", PLACED, placed(1))])
    c.add_change([("e2", PLACED, placed(2))], [("e2", PLACED, placed(2, status="FAILURE"))])
    c.add_change([("e3", SHIPPED, {"order_id": 3})], [])
    c.add_change([], [("e4", SHIPPED, {"order_id": 4})])
    c.add_change([], [])  # a change neither version emits for
    assert c.changes == 5
    figures = c.contracts[PLACED]
    assert (figures.identical, figures.differing, figures.only_live, figures.only_shadow) == (
        1,
        1,
        0,
        0,
    )
    assert figures.fields == {"status": 1}
    assert c.contracts[SHIPPED].only_live == 1 and c.contracts[SHIPPED].only_shadow == 1
    assert c.samples[PLACED]["differing"][0]["fields"] == ["status"]
    assert c.events == 4


def test_gate_passes_a_version_that_differs_only_where_expected() -> None:
    c = ShadowComparison("orders@3", "orders@4")
    for order in range(100):
        status = "FAILURE" if order % 2 else "SUCCESS"
        c.add_change(
            [(f"e{order}", PLACED, placed(order))],
            [(f"e{order}", PLACED, placed(order, status=status))],
        )
    assert PromotionGate(min_changes=100, expect_fields=frozenset({"status"})).failures(c) == []
    # the same figures without the expectation: refused, naming the field and the figures
    (sentence,) = PromotionGate(min_changes=100).failures(c)
    assert "50 of 100 events (50.00%)" in sentence and "OrderPlaced.status (50)" in sentence


def test_gate_refuses_an_unexpected_field_with_its_figures() -> None:
    c = ShadowComparison("orders@3", "orders@4")
    for order in range(200):
        total = "0.00" if order < 3 else "10.00"
        c.add_change(
            [(f"e{order}", PLACED, placed(order))],
            [(f"e{order}", PLACED, placed(order, total=total))],
        )
    gate = PromotionGate(min_changes=100, expect_fields=frozenset({"status"}))
    (sentence,) = gate.failures(c)
    assert "3 of 200 events (1.50%)" in sentence
    assert "OrderPlaced.total (3)" in sentence
    # tolerated under a looser gate
    loose = PromotionGate(max_differ=0.02, min_changes=100, expect_fields=frozenset({"status"}))
    assert loose.failures(c) == []


def test_gate_counts_changes_and_failures() -> None:
    c = ShadowComparison("orders@3", "orders@4")
    c.add_change([("e1", PLACED, placed(1))], [("e1", PLACED, placed(1))])
    c.failed(live=False)
    failures = PromotionGate(min_changes=10).failures(c)
    assert len(failures) == 2
    assert "over 1 changes, fewer than the 10" in failures[0]
    assert "orders@4 dead-lettered 1 changes, orders@3 0" in failures[1]


def test_expected_names_contract_qualified_and_nested() -> None:
    c = ShadowComparison("orders@3", "orders@4")
    moved = placed(1)
    moved["address"] = {"city": "Bergen"}
    c.add_change([("e1", PLACED, placed(1))], [("e1", PLACED, moved)])
    assert c.unexpected(frozenset({"address"})) == 0
    assert c.unexpected(frozenset({"city"})) == 0
    assert c.unexpected(frozenset({"OrderPlaced.address.city"})) == 0
    assert c.unexpected(frozenset({"OrderShipped.address"})) == 1
    assert c.unexpected(frozenset()) == 1


@pytest.mark.parametrize(
    ("text", "value"), [("0.5%", 0.005), ("0", 0.0), ("0.02", 0.02), (" 100% ", 1.0)]
)
def test_fractions(text: str, value: float) -> None:
    assert parse_fraction(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["half", "-1%", "150%", "2"])
def test_fractions_refused_with_a_sentence(text: str) -> None:
    with pytest.raises(ValueError, match=r"fraction|more than 100%"):
        parse_fraction(text)


_contents = st.fixed_dictionaries(
    {"order_id": st.integers(0, 3), "status": st.sampled_from(["SUCCESS", "FAILURE"])}
)
_events = st.lists(st.tuples(st.sampled_from(["e1", "e2", "e3"]), _contents), max_size=3).map(
    lambda items: [(eid, PLACED, content) for eid, content in dict(items).items()]
)


@given(st.lists(st.tuples(_events, _events), max_size=12), st.integers(0, 12))
def test_merged_parts_equal_the_whole_and_survive_json(
    changes: list[tuple[list[Any], list[Any]]], cut: int
) -> None:
    whole = ShadowComparison("orders@3", "orders@4")
    first = ShadowComparison("orders@3", "orders@4")
    second = ShadowComparison("orders@3", "orders@4")
    for i, (live, shadow) in enumerate(changes):
        whole.add_change(live, shadow)
        (first if i < cut else second).add_change(live, shadow)
    first.merge(ShadowComparison.from_dict(second.as_dict()))
    assert first.as_dict()["contracts"] == whole.as_dict()["contracts"]
    assert first.changes == whole.changes
    for expected in (frozenset(), frozenset({"status"})):
        assert first.unexpected(expected) == whole.unexpected(expected)
    # every event is counted once, in exactly one verdict
    live_ids = sum(len(live) for live, _ in changes)
    shadow_only = sum(f.only_shadow for f in whole.contracts.values())
    assert whole.events == live_ids + shadow_only


def test_the_diff_report_renders_the_comparison() -> None:
    c = ShadowComparison("orders@3", "orders@4")
    c.add_change([("e1", PLACED, placed(1))], [("e1", PLACED, placed(1, status="FAILURE"))])
    page = render(c.as_diff(), "orders@3", "orders@4", "shadow of orders@4")
    assert "OrderPlaced" in page and "FAILURE" in page


def test_the_book_keeps_a_partitions_figures_and_reads_them_back() -> None:
    part = ShadowComparison("orders@3", "orders@4")
    part.add_change([("e1", PLACED, placed(1))], [("e1", PLACED, placed(1, status="FAILURE"))])
    book = ShadowBook()
    book.add("store.orders", 0, {"orders@4": part})
    book.add("store.orders", 1, {"orders@4": part})
    book.add("store.orders", 1, {"orders@4": part})
    records = book.dirty()
    assert [key for key, _ in records] == [b"orders@4|store.orders|0", b"orders@4|store.orders|1"]
    assert book.dirty() == []  # nothing changed since
    # a member that takes the partitions over reads the topic in order
    other = ShadowBook()
    other.load(b"garbage", b"{}")  # skipped: counts again from zero
    for key, value in records:
        other.load(key, value)
    whole = other.total("orders@4")
    assert whole is not None and whole.changes == 3
    assert whole.contracts[PLACED].fields == {"status": 3}
    other.load(b"orders@4|store.orders|1", None)  # a tombstone forgets the partition
    assert other.total("orders@4").changes == 1  # type: ignore[union-attr]
    assert other.total("orders@9") is None and other.shadows() == ["orders@4"]
