"""``--diff orders@1`` against orders@2 reports exactly what the bug changed, publishes nothing."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest
from bizevents_store.translators import orders_v1, orders_v2

from bizevents.contracts.change import Change
from bizevents.contracts.envelope import ChangeEvent
from bizevents.devstack import Endpoints
from bizevents.replay import ReplayJob, ReplaySpec
from bizevents.settings import Settings
from tests.replay.store_story import produce_story, story

pytestmark = pytest.mark.integration


def _expected(changes: list[Any]) -> dict[str, Counter[str]]:
    """Per contract, the kinds a diff must count, from the translators called directly."""
    kinds: dict[str, Counter[str]] = {}
    for event in changes:
        if not isinstance(event, ChangeEvent):
            continue
        a, b = orders_v1(Change(event)), orders_v2(Change(event))
        assert [type(x) for x in a] == [type(y) for y in b]
        for x, y in zip(a, b, strict=True):
            name = type(x).contract_fullname()
            kind = "equal" if x == y else "changed"
            kinds.setdefault(name, Counter())[kind] += 1
    return kinds


def test_diff_reports_exactly_the_events_the_bug_changed(
    bizevents_stack: Endpoints, settings: Settings, spark: Any
) -> None:
    """Every OrderStatusChanged changed, OrderPlaced and OrderShipped equal, nothing unpaired."""
    made = story(f"diff{uuid.uuid4().hex[:8]}", orders=80, deletes=3)
    produce_story(bizevents_stack.bootstrap_servers, bizevents_stack.registry_url, made)
    spec = ReplaySpec(made.topic, "orders@2", None, diff_against="orders@1", slice_size=70)
    summary = ReplayJob(spec, settings.runtime(), spark=spark).run()

    diff = summary.diff
    assert diff is not None
    expected = _expected(made.changes)
    status = "store.orders.OrderStatusChanged"
    assert expected[status]["equal"] == 0 and expected[status]["changed"] > 0
    assert expected["store.orders.OrderPlaced"]["changed"] == 0
    for contract, kinds in expected.items():
        counts = diff.counts[contract]
        assert counts["equal"] == kinds["equal"], contract
        assert counts["changed"] == kinds["changed"], contract
        assert counts["only_a"] == counts["only_b"] == 0, contract
    assert set(diff.counts) == set(expected)
    sample = diff.samples[status]["changed"][0]
    assert sample["a"]["new_status"] != sample["b"]["new_status"]
    assert summary.events == {}  # a dry run publishes nothing
