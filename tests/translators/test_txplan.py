"""What the transaction worker's start-up resolves (:mod:`bizevents.translators.txplan`):
whether versions vary by virtual partition, and the core of a set of versions."""

from __future__ import annotations

from bizevents_store.translators import orders_v3

from bizevents.contracts.serde import BusinessSerializer
from bizevents.translators.promotion import Pins, Promotion
from tests.translators.test_txshadow import total_off
from tests.translators.txharness import make_plan


def test_versions_vary_once_another_version_is_promoted(serializer: BusinessSerializer) -> None:
    assert not make_plan([orders_v3], serializer, 4, pins=Pins({"orders": 3})).versioned()
    assert not make_plan([orders_v3], serializer, 4).versioned()  # a plan made by hand
    pins = Pins({"orders": 3})
    pins.apply(Promotion("orders", 13, 3, "2026-11-29T06:00:00Z"))
    plan = make_plan([orders_v3], serializer, 4, pins=pins, versions=[total_off])
    assert plan.versioned()
    core = plan.make_core((("orders", 13),))
    assert [t.ref for t in core.translators] == ["orders@13"]
    assert core.dead_letter_topic == plan.core.dead_letter_topic
    assert plan.read[-1] == (plan.transaction_topic, 0)
