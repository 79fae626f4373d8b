"""Routing transactions over the assembly log's partitions by business key: every
event published by exactly one member, an order and its items on one partition."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from bizevents_store.contracts import OrderPlaced
from bizevents_store.translators import orders_v3
from confluent_kafka.schema_registry import SchemaRegistryClient
from hypothesis import given, settings
from hypothesis import strategies as st

from bizevents.contracts.serde import BusinessSerializer
from bizevents.devstack.registry import run_in_thread
from bizevents.testing import change
from bizevents.transactions import transaction_translator
from bizevents.translators.assembly import Part, Ready
from bizevents.translators.records import SourceRecord
from bizevents.translators.routing import business_key, owner, partitions_of
from bizevents.translators.txcore import TransactionCore
from tests.envelopes import in_transaction, store_order


def _placing(order: int, lines: int) -> list[object]:
    row = store_order(order)
    items = [
        change(
            "store.order_items",
            "c",
            after={
                "order_id": order,
                "line_no": n,
                "product_id": 10 + n,
                "quantity": n,
                "unit_price": Decimal("2.50"),
            },
            key={"order_id": order, "line_no": n},
        )
        for n in range(1, lines + 1)
    ]
    total = {**row, "total": Decimal(lines) * Decimal("2.50")}
    return [
        change("store.orders", "c", after=row),
        *items,
        change("store.orders", "u", before=row, after=total),
    ]


def _ready(tx_id: str, changes: list[object]) -> Ready:
    parts = []
    for n, c in enumerate(changes, start=1):
        event = c.event  # type: ignore[attr-defined]
        stamped = in_transaction(event, tx_id, n)
        key = repr(sorted((event.key or {}).items())).encode()
        origin = SourceRecord(f"shop.{event.source.qualified_table}", 0, 40 + n, key, b"raw")
        parts.append(Part(n, origin, change=stamped))
    return Ready(tx_id, tuple(parts))


def test_an_order_and_its_items_share_one_key() -> None:
    """orders@3 keys orders by id and items by order_id: one order, one partition."""
    ready = _ready("9:100", _placing(42, 5))
    assert {business_key(orders_v3, p) for p in ready.parts} == {b"42"}
    assert len(partitions_of(ready, [orders_v3], 8)) == 1


def test_undeclared_tables_key_by_the_row_key() -> None:
    """Without keys=, items of one order spread by their own primary keys."""
    plain = transaction_translator(
        name="plain",
        version=1,
        sources=["store.orders", "store.order_items"],
        emits=[OrderPlaced],
    )(lambda tx: None)
    ready = _ready("9:100", _placing(42, 6))
    assert len({business_key(plain, p) for p in ready.parts}) == 7  # the order, six items


def test_bad_keys_declaration_is_refused() -> None:
    with pytest.raises(Exception, match="keys"):
        transaction_translator(
            name="bad",
            version=1,
            sources=["store.orders"],
            emits=[OrderPlaced],
            keys={"orders": "id"},
        )(lambda tx: None)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistryClient]:
    with run_in_thread(Path(tmp_path_factory.mktemp("registry"))) as running:
        yield SchemaRegistryClient({"url": running.url})


@settings(max_examples=25, deadline=None)
@given(
    orders=st.lists(st.integers(1, 10_000), min_size=1, max_size=4, unique=True),
    partitions=st.integers(1, 6),
)
def test_each_event_published_once_over_the_partitions(
    registry: SchemaRegistryClient, orders: list[int], partitions: int
) -> None:
    """A transaction placing several orders goes to each of their partitions; the
    members together publish exactly the events of the whole transaction, each once."""
    core = TransactionCore([orders_v3], BusinessSerializer(registry))
    changes = [c for order in orders for c in _placing(order, 2)]
    ready = _ready("9:100", changes)
    whole = sorted(r.event_id for r in core.translate(ready))
    assert len(whole) == len(orders)
    published: list[str] = []
    targets = partitions_of(ready, [orders_v3], partitions)
    for mine in targets:
        records = core.translate(
            ready, owns=lambda t, p, mine=mine: owner(t, p, partitions) == mine
        )
        assert records, f"partition {mine} was sent the transaction for nothing"
        published += [r.event_id for r in records]
    assert sorted(published) == whole
    assert len(targets) == len({owner(orders_v3, p, partitions) for p in ready.parts})
