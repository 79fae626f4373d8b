"""The transaction worker's check of capture's routing against its translators' keys
(translators/routingcheck.py), on the declared routing as data."""

from __future__ import annotations

from bizevents_store.translators import orders_v3

from bizevents.contracts.technical.routing import TableRouting
from bizevents.translators.routingcheck import disagreement, routing_topic_of

_TOPIC = "shop.routing"


def _routings(*routings: TableRouting) -> dict[str, TableRouting]:
    return {r.table: r for r in routings}


def test_nothing_declared_is_the_old_path() -> None:
    """A capture that routes nothing: nothing to check."""
    assert disagreement({}, [orders_v3], _TOPIC) is None


def test_the_same_keys_agree() -> None:
    routings = _routings(
        TableRouting("store.orders", ("id",), 4),
        TableRouting("store.order_items", ("order_id",), 4),
        TableRouting("store.customers", ("id",), 4),  # not read by orders@3
    )
    assert disagreement(routings, [orders_v3], _TOPIC) is None


def test_other_columns_are_named() -> None:
    routings = _routings(
        TableRouting("store.orders", ("id",), 4),
        TableRouting("store.order_items", ("order_id", "line_no"), 4),
    )
    assert disagreement(routings, [orders_v3], _TOPIC) == (
        "translator orders@3 keys store.order_items by order_id, but capture routes it by "
        "order_id, line_no over 4 partitions (declared on shop.routing): declare the same "
        "keys, or route capture anew (a new topic generation, docs/transactions.md)"
    )


def test_a_keyed_table_left_unrouted_is_named() -> None:
    """Capture routes orders but partitions items by their Kafka key."""
    said = disagreement(_routings(TableRouting("store.orders", ("id",), 4)), [orders_v3], _TOPIC)
    assert said is not None
    assert said.startswith(
        "translator orders@3 keys store.order_items by order_id, but capture routes it by "
        "its Kafka key"
    )


def test_the_routing_topic_sits_beside_the_transaction_topic() -> None:
    assert routing_topic_of("shop.transaction", None) == "shop.routing"
    assert routing_topic_of("shop.transaction", "other") == "shop.routing"
    assert routing_topic_of("tx-of-shop", "shop") == "shop.routing"
