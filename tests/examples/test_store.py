"""The reference store domain: contracts in sync, translators right (and v1 wrong), load runs."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from bizevents_store.contracts import (
    CONTRACTS,
    CustomerAddressChanged,
    CustomerRegistered,
    OrderCancelled,
    OrderPlaced,
    OrderShipped,
    OrderStatus,
    OrderStatusChanged,
    ProductPriceChanged,
)
from bizevents_store.translators import customers, orders_v1, orders_v2, products

from bizevents import BusinessEvent, Change
from bizevents.contracts.business import schema_drift
from bizevents.devstack import Endpoints
from bizevents.plugins import Translator, discover
from bizevents.testing import assert_matches_golden, change, run

CATALOGUE = Path(__file__).parents[2] / "examples" / "store" / "contracts"
GOLDEN = Path(__file__).parent / "golden"
NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda c: c.contract_name())
def test_catalogue_has_no_drift(contract: type[BusinessEvent]) -> None:
    """Each committed .avsc is exactly the model's generated schema."""
    assert schema_drift(contract, CATALOGUE / f"{contract.contract_fullname()}.avsc") == []


def test_plugin_is_discovered_through_its_entry_point() -> None:
    registry = discover()
    assert {t.ref for t in registry} >= {"customers@1", "orders@1", "orders@2", "products@1"}


def test_each_translator_has_an_entry_point_of_its_name() -> None:
    """Asking for orders imports the orders entry point alone: all its versions."""
    assert [t.ref for t in discover(names=["orders"])] == ["orders@1", "orders@2", "orders@3"]


CUSTOMER = {
    "id": 5,
    "email": "a@b.c",
    "full_name": "Ada",
    "street": "1 Main St",
    "city": "Berlin",
    "postal_code": "10115",
    "country": "DE",
    "loyalty_score": 0,
    "created_at": NOW,
    "updated_at": NOW,
}


def test_customer_registered_and_moved() -> None:
    assert run(customers, change("store.customers", "c", after=CUSTOMER)).payloads == [
        CustomerRegistered(
            customer_id=5, email="a@b.c", full_name="Ada", country="DE", registered_at=NOW
        ),
    ]
    moved = {**CUSTOMER, "city": "Paris", "country": "FR"}
    assert run(
        customers, change("store.customers", "u", before=CUSTOMER, after=moved)
    ).payloads == [
        CustomerAddressChanged(
            customer_id=5, street="1 Main St", city="Paris", postal_code="10115", country="FR"
        ),
    ]


def test_technical_only_changes_are_dropped() -> None:
    """loyalty_score, stock and updated_at are internal: no event."""
    touched = {**CUSTOMER, "loyalty_score": 3, "updated_at": NOW.replace(hour=11)}
    assert (
        run(customers, change("store.customers", "u", before=CUSTOMER, after=touched)).payloads
        == []
    )
    product = PRODUCT
    assert (
        run(
            products, change("store.products", "u", before=product, after={**product, "stock": 6})
        ).payloads
        == []
    )


def test_price_change() -> None:
    product = PRODUCT
    assert run(
        products,
        change("store.products", "u", before=product, after={**product, "price": Decimal("10.99")}),
    ).payloads == [
        ProductPriceChanged(
            product_id=1,
            sku="S1",
            old_price=Decimal("9.99"),
            new_price=Decimal("10.99"),
            currency="EUR",
        ),
    ]


ORDER = {
    "id": 9,
    "customer_id": 5,
    "status": "pending",
    "total": Decimal("30.00"),
    "currency": "EUR",
    "placed_at": NOW,
    "shipped_at": None,
    "tracking_number": None,
    "updated_at": NOW,
}


def test_order_placed_is_the_same_in_both_versions() -> None:
    placed = OrderPlaced(
        order_id=9, customer_id=5, total=Decimal("30.00"), currency="EUR", placed_at=NOW
    )
    for version in (orders_v1, orders_v2):
        assert run(version, change("store.orders", "c", after=ORDER)).payloads == [placed]


@pytest.mark.parametrize(
    ("old", "new", "v2_old", "v2_new", "v1_old", "v1_new"),
    [
        (
            "pending",
            "paid",
            OrderStatus.PENDING,
            OrderStatus.PAID,
            OrderStatus.CANCELLED,
            OrderStatus.PENDING,
        ),
        (
            "paid",
            "shipped",
            OrderStatus.PAID,
            OrderStatus.SHIPPED,
            OrderStatus.PENDING,
            OrderStatus.PAID,
        ),
        (
            "shipped",
            "delivered",
            OrderStatus.SHIPPED,
            OrderStatus.DELIVERED,
            OrderStatus.PAID,
            OrderStatus.SHIPPED,
        ),
    ],
    ids=["paid", "shipped", "delivered"],
)
def test_v1_shifts_every_status_and_v2_does_not(
    old: str,
    new: str,
    v2_old: OrderStatus,
    v2_new: OrderStatus,
    v1_old: OrderStatus,
    v1_new: OrderStatus,
) -> None:
    """orders@1 maps the enum by position, off by one; orders@2 by label."""
    extra = {"shipped_at": NOW, "tracking_number": "T1"} if new == "shipped" else {}
    update = change(
        "store.orders",
        "u",
        before={**ORDER, "status": old},
        after={**ORDER, "status": new, **extra},
    )
    v2 = [e for e in run(orders_v2, update).payloads if isinstance(e, OrderStatusChanged)]
    v1 = [e for e in run(orders_v1, update).payloads if isinstance(e, OrderStatusChanged)]
    assert v2 == [OrderStatusChanged(order_id=9, old_status=v2_old, new_status=v2_new)]
    assert v1 == [OrderStatusChanged(order_id=9, old_status=v1_old, new_status=v1_new)]


def test_shipped_and_cancelled() -> None:
    shipped = {**ORDER, "status": "shipped", "shipped_at": NOW, "tracking_number": "T1"}
    events = run(
        orders_v2, change("store.orders", "u", before={**ORDER, "status": "paid"}, after=shipped)
    ).payloads
    assert OrderShipped(order_id=9, tracking_number="T1", shipped_at=NOW) in events
    cancelled = run(
        orders_v2, change("store.orders", "u", before=ORDER, after={**ORDER, "status": "cancelled"})
    ).payloads
    assert OrderCancelled(order_id=9, previous_status=OrderStatus.PENDING) in cancelled


CUSTOMER_STORY = [
    change("store.customers", "r", after={**CUSTOMER, "id": 4}),  # a snapshot read
    change("store.customers", "c", after=CUSTOMER),
    change("store.customers", "u", before=CUSTOMER, after={**CUSTOMER, "loyalty_score": 2}),
    change("store.customers", "u", before=CUSTOMER, after={**CUSTOMER, "city": "Paris"}),
    change("store.customers", "d", before=CUSTOMER),  # deletes="skip"
]
PRODUCT = {
    "id": 1,
    "sku": "S1",
    "name": "x",
    "price": Decimal("9.99"),
    "currency": "EUR",
    "stock": 1,
    "updated_at": NOW,
}
PRODUCT_STORY = [
    change("store.products", "r", after=PRODUCT),  # snapshots="skip"
    change("store.products", "u", before=PRODUCT, after={**PRODUCT, "stock": 0}),
    change("store.products", "u", before=PRODUCT, after={**PRODUCT, "price": Decimal("12.50")}),
]
SHIPPED = {**ORDER, "status": "shipped", "shipped_at": NOW, "tracking_number": "T1"}
ORDER_STORY = [
    change("store.orders", "r", after={**ORDER, "id": 8}),  # snapshots="skip"
    change("store.orders", "c", after=ORDER),
    change("store.orders", "u", before=ORDER, after={**ORDER, "status": "paid"}),
    change("store.orders", "u", before={**ORDER, "status": "paid"}, after=SHIPPED),
    change("store.orders", "u", before=SHIPPED, after={**SHIPPED, "status": "delivered"}),
    change("store.orders", "u", before=ORDER, after={**ORDER, "status": "cancelled"}),
    change("store.orders", "d", before=ORDER),  # deletes="skip"
]


@pytest.mark.parametrize(
    ("translator", "story"),
    [
        (customers, CUSTOMER_STORY),
        (products, PRODUCT_STORY),
        (orders_v1, ORDER_STORY),
        (orders_v2, ORDER_STORY),
    ],
    ids=lambda v: v.ref if hasattr(v, "ref") else "",
)
def test_golden(translator: Translator, story: list[Change]) -> None:
    """Each version's events, ids, lineage and Avro bytes stay as committed."""
    name = f"{translator.name}@{translator.version}.json"
    assert_matches_golden(translator, story, GOLDEN / name)


def test_load_generator_writes_the_store(bizevents_stack: Endpoints) -> None:
    """The load runs against the real PostgreSQL and produces every kind of change."""
    import psycopg2
    from bizevents_store.load import StoreLoad, create_schema

    conn = psycopg2.connect(bizevents_stack.postgres_dsn)
    try:
        create_schema(conn)
        create_schema(conn)  # idempotent
        load = StoreLoad(conn, seed=11)
        actions = {load.step() for _ in range(300)}
        assert actions >= {"register_customer", "place_order", "advance_order", "touch"}
        with conn.cursor() as cur:
            cur.execute(
                "SELECT count(*), count(*) FILTER (WHERE status <> 'pending') FROM store.orders"
            )
            total, progressed = cur.fetchone()
        assert total > 0 and progressed > 0
    finally:
        conn.close()


def test_load_generator_places_two_orders_per_transaction(bizevents_stack: Endpoints) -> None:
    """``orders_per_transaction=2``: each placing transaction inserts two orders with
    their items (the items' ``xmin`` names it: the load never updates an item)."""
    import psycopg2
    from bizevents_store.load import StoreLoad, create_schema

    conn = psycopg2.connect(bizevents_stack.postgres_dsn)
    try:
        create_schema(conn)
        load = StoreLoad(conn, seed=11, orders_per_transaction=2)
        actions = [load.step() for _ in range(200)]
        assert actions.count("place_order") > 5
        with conn.cursor() as cur:
            cur.execute(
                "SELECT count(DISTINCT i.order_id) FROM store.order_items i"
                " JOIN store.orders o ON o.id = i.order_id"
                " WHERE o.customer_id = ANY(%s) GROUP BY i.xmin::text",
                (load.customers,),
            )
            per_transaction = [n for (n,) in cur.fetchall()]
        assert len(per_transaction) == actions.count("place_order")
        assert set(per_transaction) == {2}
    finally:
        conn.close()


@pytest.mark.mysql
def test_load_generator_writes_the_store_on_mariadb(bizevents_mysql: str) -> None:
    """The same load runs against the real MariaDB with the MySQL schema."""
    from bizevents_store.load import StoreLoad, create_schema

    from bizevents.capture.mariadb import queries as my

    conn = my.connect(bizevents_mysql, autocommit=False)
    try:
        create_schema(conn, "mysql")
        create_schema(conn, "mysql")  # idempotent
        load = StoreLoad(conn, seed=11)
        actions = {load.step() for _ in range(300)}
        assert actions >= {"register_customer", "place_order", "advance_order", "touch"}
        with conn.cursor() as cur:
            cur.execute("SELECT count(*), sum(status <> 'pending') FROM store.orders")
            total, progressed = cur.fetchone()
        assert total > 0 and progressed > 0
    finally:
        conn.close()
