"""Business events of the store, as the microservices that consume them know them."""

from __future__ import annotations

from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING

from pydantic import Field

from bizevents import BusinessEvent, Int32, Record, Timestamp, condecimal

#: numeric(12, 2) in the database; condecimal keeps precision and scale also inside
#: an optional (``Money | None``), where a plain ``Annotated`` loses them.
if TYPE_CHECKING:
    Money = Decimal
else:
    Money = condecimal(max_digits=12, decimal_places=2)


class OrderStatus(Enum):
    """The order's lifecycle, in the business's words (not the database's enum)."""

    PENDING = "PENDING"
    PAID = "PAID"
    SHIPPED = "SHIPPED"
    DELIVERED = "DELIVERED"
    CANCELLED = "CANCELLED"


class CustomerRegistered(BusinessEvent):
    customer_id: int
    email: str
    full_name: str
    country: str | None = None
    registered_at: Timestamp

    class Meta:
        namespace = "store.customers"


class CustomerAddressChanged(BusinessEvent):
    customer_id: int
    street: str | None = None
    city: str | None = None
    postal_code: str | None = None
    country: str | None = None

    class Meta:
        namespace = "store.customers"


class OrderLine(Record):
    """One line of an order, as it was placed."""

    line_no: Int32
    product_id: int
    quantity: Int32
    unit_price: Money

    class Meta:
        namespace = "store.orders"
        schema_doc = False


class OrderPlaced(BusinessEvent):
    order_id: int
    customer_id: int
    total: Money
    currency: str
    placed_at: Timestamp
    #: The order's lines (orders@3, from the transaction that placed the order;
    #: empty from orders@1 and @2, which see the orders row alone).
    items: list[OrderLine] = Field(default_factory=list)

    class Meta:
        namespace = "store.orders"


class OrderStatusChanged(BusinessEvent):
    order_id: int
    old_status: OrderStatus | None = None
    new_status: OrderStatus

    class Meta:
        namespace = "store.orders"


class OrderShipped(BusinessEvent):
    order_id: int
    tracking_number: str | None = None
    shipped_at: Timestamp

    class Meta:
        namespace = "store.orders"


class OrderCancelled(BusinessEvent):
    order_id: int
    previous_status: OrderStatus | None = None

    class Meta:
        namespace = "store.orders"


class ProductPriceChanged(BusinessEvent):
    product_id: int
    sku: str
    old_price: Money | None = None
    new_price: Money
    currency: str

    class Meta:
        namespace = "store.products"


CONTRACTS: list[type[BusinessEvent]] = [
    CustomerRegistered,
    CustomerAddressChanged,
    OrderPlaced,
    OrderStatusChanged,
    OrderShipped,
    OrderCancelled,
    ProductPriceChanged,
]
