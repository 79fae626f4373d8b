"""A test plugin for parking in the transaction worker
(tests/integration/test_transaction_parking.py): ``parktx@1`` is the store's
``orders@3`` with a planted bug, it raises on a transaction holding an order item of
quantity :data:`POISON` (so the order is never placed); ``parktx@2`` is the fix,
``@3`` the fix made slow (a re-drive that can be killed mid-way). One name, so their
events from one change have one id. Installed for the workers by an entry point the
test writes (a ``.dist-info`` folder on their ``PYTHONPATH``)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from bizevents_store.translators import ORDER_EVENTS, orders_v3

from bizevents.transactions import Attributed, TransactionChanges, transaction_translator

#: The quantity of an order item that parktx@1 cannot take.
POISON = 13
#: How long parktx@3 takes per transaction.
SLOW_S = 0.3

COMMON = dict(
    sources=["store.orders", "store.order_items"],
    emits=ORDER_EVENTS,
    keys={"store.orders": "id", "store.order_items": "order_id"},
)


def _fixed(tx: TransactionChanges) -> Iterator[Attributed]:
    assert orders_v3.tx_func is not None
    return iter(orders_v3.tx_func(tx) or ())  # type: ignore[arg-type]


@transaction_translator(name="parktx", version=1, **COMMON)  # type: ignore[arg-type]
def parktx_v1(tx: TransactionChanges) -> Iterator[Attributed]:
    for item in tx.of("store.order_items"):
        if item.is_create and item.new("quantity") == POISON:
            raise ValueError(f"order {item.new('order_id')} has a poisoned item")
    return _fixed(tx)


@transaction_translator(name="parktx", version=2, **COMMON)  # type: ignore[arg-type]
def parktx_v2(tx: TransactionChanges) -> Iterator[Attributed]:
    return _fixed(tx)


@transaction_translator(name="parktx", version=3, **COMMON)  # type: ignore[arg-type]
def parktx_v3(tx: TransactionChanges) -> Iterator[Attributed]:
    """The fix, slow (a test's stand-in for a long re-drive)."""
    time.sleep(SLOW_S)
    return _fixed(tx)


PARKTX = [parktx_v1, parktx_v2, parktx_v3]
