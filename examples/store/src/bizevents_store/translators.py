"""Translators of the store: technical row changes in, business events out.

Changes nobody cares about (an ``updated_at`` touched, the internal
``loyalty_score`` recomputed, stock counts) give no event and are dropped.

``orders@1`` ships a real-world bug: it maps the database's enum to the contract's
by *position*, off by one, the way a connector once shipped enum indexes instead of
labels; every PAID comes out as PENDING, every SHIPPED as PAID. ``orders@2`` maps by
label. Replaying the orders topic through ``orders@2`` repairs what v1 emitted.

``orders@1`` and ``@2`` read one row change at a time, so the ``OrderPlaced`` they emit
from the order's INSERT says ``total = 0.00``: the store sets the total later in the same
transaction. ``orders@3`` is a transaction translator: it reads ``orders`` and
``order_items`` together and places the order with its items and its true total. Each
of its events says which change it stems from (the order's INSERT for an OrderPlaced,
the UPDATE for a status change), so it carries the id ``orders@1`` and ``@2`` gave their
event from that change: replaying the orders history through ``orders@3`` supersedes
their OrderPlaced with total 0.00 by the one with the true total.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Final

from bizevents import BusinessEvent, Change, translator
from bizevents.transactions import (
    Attributed,
    TransactionChanges,
    stems_from,
    transaction_translator,
)
from bizevents_store.contracts import (
    CustomerAddressChanged,
    CustomerRegistered,
    OrderCancelled,
    OrderLine,
    OrderPlaced,
    OrderShipped,
    OrderStatus,
    OrderStatusChanged,
    ProductPriceChanged,
)

#: The labels of ``store.order_status`` in the order the database declares them.
DB_ORDER_STATUSES: Final = ("pending", "paid", "shipped", "delivered", "cancelled")
ADDRESS: Final = ("street", "city", "postal_code", "country")


@translator(
    name="customers",
    version=1,
    sources=["store.customers"],
    emits=[CustomerRegistered, CustomerAddressChanged],
    deletes="skip",
    columns=["id", "email", "full_name", "country", "created_at", *ADDRESS],
    ops=["c", "r", "u"],
)
def customers(change: Change) -> Iterator[BusinessEvent]:
    if change.is_create:
        yield CustomerRegistered(
            customer_id=change.new("id"),
            email=change.new("email"),
            full_name=change.new("full_name"),
            country=change.new("country"),
            registered_at=change.new("created_at"),
        )
    elif change.is_update and change.changed(*ADDRESS):
        yield CustomerAddressChanged(
            customer_id=change.new("id"), **{column: change.new(column) for column in ADDRESS}
        )


@translator(
    name="products",
    version=1,
    sources=["store.products"],
    emits=[ProductPriceChanged],
    snapshots="skip",
    deletes="skip",
    columns=["id", "sku", "price", "currency"],
    ops=["u"],
)
def products(change: Change) -> Iterator[BusinessEvent]:
    if change.is_update and change.changed("price"):
        yield ProductPriceChanged(
            product_id=change.new("id"),
            sku=change.new("sku"),
            old_price=change.old("price"),
            new_price=change.new("price"),
            currency=change.new("currency"),
        )


def _status_by_position(label: str | None) -> OrderStatus | None:
    """orders@1's bug: the contract's enum looked up by the database enum's index - 1."""
    if label is None:
        return None
    return list(OrderStatus)[DB_ORDER_STATUSES.index(label) - 1]


def _status_by_label(label: str | None) -> OrderStatus | None:
    return None if label is None else OrderStatus[label.upper()]


def _orders(
    change: Change, status_of: Callable[[str | None], OrderStatus | None]
) -> Iterator[BusinessEvent]:
    if change.is_create:
        yield OrderPlaced(
            order_id=change.new("id"),
            customer_id=change.new("customer_id"),
            total=change.new("total"),
            currency=change.new("currency"),
            placed_at=change.new("placed_at"),
        )
        return
    if not change.is_update or not change.changed("status"):
        return
    old, new = status_of(change.old("status")), status_of(change.new("status"))
    assert new is not None  # status is NOT NULL in the table
    yield OrderStatusChanged(order_id=change.new("id"), old_status=old, new_status=new)
    if change.new("status") == "shipped":
        yield OrderShipped(
            order_id=change.new("id"),
            tracking_number=change.new("tracking_number"),
            shipped_at=change.new("shipped_at") or change.new("updated_at"),
        )
    elif change.new("status") == "cancelled":
        yield OrderCancelled(order_id=change.new("id"), previous_status=old)


ORDER_EVENTS: Final[list[type[BusinessEvent]]] = [
    OrderPlaced,
    OrderStatusChanged,
    OrderShipped,
    OrderCancelled,
]
#: What ``_orders`` reads, and the ops that can give it an event (inserts, updates).
ORDER_COLUMNS: Final = (
    "id",
    "customer_id",
    "total",
    "currency",
    "placed_at",
    "status",
    "tracking_number",
    "shipped_at",
    "updated_at",
)
ORDER_OPS: Final = ("c", "u")
#: An update gives ``_orders`` an event only when the status changed.
ORDER_CHANGES: Final = ("status",)


#: orders@1 and @2 declare the same: the orders table, one row change at a time.
_row_orders: Final = partial(
    translator,
    name="orders",
    sources=["store.orders"],
    emits=ORDER_EVENTS,
    snapshots="skip",
    deletes="skip",
    columns=ORDER_COLUMNS,
    ops=ORDER_OPS,
    changes=ORDER_CHANGES,
)


@_row_orders(version=1)
def orders_v1(change: Change) -> Iterator[BusinessEvent]:
    return _orders(change, _status_by_position)


@_row_orders(version=2)
def orders_v2(change: Change) -> Iterator[BusinessEvent]:
    return _orders(change, _status_by_label)


@transaction_translator(
    name="orders",
    version=3,
    sources=["store.orders", "store.order_items"],
    emits=ORDER_EVENTS,
    # an order and its items are one business key: a worker of a group assembles all
    # of an order's transactions, in commit order
    keys={"store.orders": "id", "store.order_items": "order_id"},
)
def orders_v3(tx: TransactionChanges) -> Iterator[Attributed]:
    """Orders from the transaction that changed them: an order is placed with its items
    and its total as the transaction left them (the store inserts the order with total
    0, then its items, then sets the total). Status changes as in orders@2. Each event
    stems from the change orders@1 and @2 translate into it, so it has their id."""
    orders = tx.of("store.orders")
    final = {c.new("id"): c for c in orders if c.after is not None}
    lines: dict[int, list[OrderLine]] = {}
    for item in tx.of("store.order_items"):
        if item.is_create:
            lines.setdefault(item.new("order_id"), []).append(
                OrderLine(
                    line_no=item.new("line_no"),
                    product_id=item.new("product_id"),
                    quantity=item.new("quantity"),
                    unit_price=item.new("unit_price"),
                )
            )
    for change in orders:
        if change.is_create:
            order = final[change.new("id")]
            placed = OrderPlaced(
                order_id=order.new("id"),
                customer_id=order.new("customer_id"),
                total=order.new("total"),
                currency=order.new("currency"),
                placed_at=order.new("placed_at"),
                items=sorted(lines.get(order.new("id"), []), key=lambda line: line.line_no),
            )
            yield stems_from(change, placed)
        elif change.is_update:
            for event in _orders(change, _status_by_label):
                yield stems_from(change, event)


# One entry point per translator name, holding its versions (see pyproject.toml).
CUSTOMERS = [customers]
PRODUCTS = [products]
ORDERS = [orders_v1, orders_v2, orders_v3]
ALL = [*CUSTOMERS, *PRODUCTS, *ORDERS]
