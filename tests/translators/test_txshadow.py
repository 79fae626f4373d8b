"""A transaction translator's version in the shadow of the live one (docs/shadow.md):
the transaction core runs both on the same assembled transaction, compares their
events by id, and never lets the shadow reach a live or dead-letter topic."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from bizevents_store.contracts import OrderPlaced
from bizevents_store.translators import ORDER_EVENTS, orders_v2, orders_v3
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.contracts.serde import BusinessSerializer
from bizevents.devstack.registry import run_in_thread
from bizevents.plumbing.errors import ConfigError
from bizevents.transactions import TransactionChanges, transaction_translator
from bizevents.translators.records import Result
from bizevents.translators.routing import owner, partitions_of
from bizevents.translators.shadow import PromotionGate, ShadowComparison, check_shadows
from bizevents.translators.txcore import TransactionCore
from tests.translators.test_routing import _placing, _ready

KEYS = {"store.orders": "id", "store.order_items": "order_id"}
SOURCES = ["store.orders", "store.order_items"]


@transaction_translator(name="orders", version=13, sources=SOURCES, emits=ORDER_EVENTS, keys=KEYS)
def total_off(tx: TransactionChanges) -> Iterable[object]:
    """orders@3 with every order's total a cent more (a wrong fix)."""
    for item in orders_v3.attributed(tx):
        if isinstance(item.event, OrderPlaced):
            event = item.event.model_copy(update={"total": item.event.total + Decimal("0.01")})
            item = type(item)(event, item.change)
        yield item


@transaction_translator(name="orders", version=14, sources=SOURCES, emits=ORDER_EVENTS, keys=KEYS)
def broken(tx: TransactionChanges) -> Iterable[object]:
    raise ValueError("no")


@pytest.fixture(scope="module")
def serializer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BusinessSerializer]:
    with run_in_thread(Path(tmp_path_factory.mktemp("registry"))) as running:
        yield BusinessSerializer(SchemaRegistryClient({"url": running.url}))


def test_the_shadow_compares_by_id_and_reaches_only_the_shadow_topics(
    serializer: BusinessSerializer,
) -> None:
    core = TransactionCore([orders_v3], serializer, shadows=[total_off], shadow_output=True)
    ready = _ready("9:100", [*_placing(1, 2), *_placing(2, 3)])
    result = Result()
    records = core.translate(ready, result)
    live = [r for r in records if not r.topic.endswith(".shadow")]
    shadow = [r for r in records if r.topic.endswith(".shadow")]
    assert {r.translator for r in live} == {"orders@3"} and len(live) == 2
    assert {r.translator for r in shadow} == {"orders@13"}
    assert {r.topic for r in shadow} == {live[0].topic + ".shadow"}
    assert sorted(r.event_id for r in shadow) == sorted(r.event_id for r in live)
    comparison = result.shadows["orders@13"]
    assert (comparison.live, comparison.shadow) == ("orders@3", "orders@13")
    assert comparison.changes == len(ready.parts) == 9  # the changes, not the transaction
    (placed,) = [f for name, f in comparison.contracts.items() if name.endswith("OrderPlaced")]
    assert (placed.identical, placed.differing, placed.fields) == (0, 2, {"total": 2})
    gate = PromotionGate(min_changes=9, expect_fields=frozenset({"status"}))
    assert gate.failures(comparison) == [
        "2 of 2 events (100.00%) differ where not expected, more than the 0.00% allowed: "
        "fields OrderPlaced.total (2); 0 made by one version only"
    ]
    assert (
        PromotionGate(min_changes=9, expect_fields=frozenset({"total"})).failures(comparison) == []
    )


def test_the_members_compare_each_event_once_between_them(
    serializer: BusinessSerializer,
) -> None:
    """Each member compares the events of its own keys: together, the whole's figures."""
    core = TransactionCore([orders_v3], serializer, shadows=[total_off])
    ready = _ready("9:200", [c for order in (5, 6, 7, 8) for c in _placing(order, 1)])
    whole = Result()
    assert not [r for r in core.translate(ready, whole) if r.topic.endswith(".shadow")]
    together = ShadowComparison("orders@3", "orders@13")
    for mine in partitions_of(ready, [orders_v3], 3):
        part = Result()
        core.translate(ready, part, lambda t, p, mine=mine: owner(t, p, 3) == mine)
        together.merge(part.shadows["orders@13"])
    # the figures (the samples kept are whichever came first)
    expected = {k: v for k, v in whole.shadows["orders@13"].as_dict().items() if k != "samples"}
    assert {k: v for k, v in together.as_dict().items() if k != "samples"} == expected
    assert together.changes == 12 and together.contracts  # nothing compared twice


def test_a_shadow_that_fails_is_counted_and_dead_letters_nothing(
    serializer: BusinessSerializer,
) -> None:
    core = TransactionCore([orders_v3], serializer, shadows=[broken], shadow_output=True)
    ready = _ready("9:300", _placing(3, 1))
    result = Result()
    records = core.translate(ready, result)
    assert [r.translator for r in records] == ["orders@3"]
    assert not any(r.dead_letter for r in records)
    comparison = result.shadows["orders@14"]
    assert (comparison.changes, comparison.shadow_failures, comparison.events) == (3, 1, 0)
    assert "orders@14 dead-lettered 1 changes" in " ".join(
        PromotionGate(min_changes=0).failures(comparison)
    )


def test_a_shadow_of_another_kind_or_other_keys_is_refused() -> None:
    check_shadows([total_off], [orders_v3])  # same kind, sources and keys
    with pytest.raises(ConfigError, match="is a transaction translator and the live orders@2"):
        check_shadows([total_off], [orders_v2])
    with pytest.raises(ConfigError, match="is a row translator and the live orders@3"):
        check_shadows([orders_v2], [orders_v3])
    other = transaction_translator(
        name="orders", version=15, sources=SOURCES, emits=ORDER_EVENTS, keys={"store.orders": "id"}
    )(orders_v3.tx_func)
    with pytest.raises(ConfigError, match="declares other business keys"):
        check_shadows([other], [orders_v3])
