"""A load generator for the store: customers register, order, pay, get shipped, move.

The sequence of actions is deterministic for a seed, so a test can replay the same
story; unique values (SKUs, e-mails) also carry a tag of the instance, so several
loads can share one database. Each step is one short transaction, as an application
would write it (``orders_per_transaction`` orders placed or moved on in it).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

COUNTRIES = ("DE", "FR", "NL", "IT", "ES", "PL", "SE")
CITIES = ("Berlin", "Paris", "Utrecht", "Milano", "Sevilla", "Gdansk", "Malmo")
NEXT_STATUS = {"pending": "paid", "paid": "shipped", "shipped": "delivered"}


def schema_sql(dialect: str = "postgresql") -> str:
    """The store's DDL for ``postgresql`` or ``mysql`` (MySQL/MariaDB)."""
    name = "schema_mysql.sql" if dialect == "mysql" else "schema.sql"
    return files("bizevents_store").joinpath(name).read_text()


def create_schema(conn: Any, dialect: str = "postgresql") -> None:
    """Create the store's schema (idempotent) on a psycopg2 or PyMySQL connection."""
    with conn.cursor() as cur:
        if dialect == "mysql":
            # PyMySQL runs one statement at a time
            body = "\n".join(
                line for line in schema_sql(dialect).splitlines() if not line.startswith("--")
            )
            for statement in body.split(";"):
                if statement.strip():
                    cur.execute(statement)
        else:
            cur.execute(schema_sql())
    conn.commit()


@dataclass
class StoreLoad:
    """Drives a realistic mix of changes; ``step`` performs one business action."""

    conn: Any
    seed: int = 7
    #: Makes SKUs and e-mails unique across loads that share a database.
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    rng: random.Random = field(init=False)
    customers: list[int] = field(default_factory=list)
    products: list[int] = field(default_factory=list)
    open_orders: dict[int, str] = field(default_factory=dict)
    steps: int = 0
    #: Orders placed, or moved on, in one transaction: with more than one, a capture
    #: routing by order id writes most of them to several partitions.
    orders_per_transaction: int = 1

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _one(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            row = cur.fetchone() if cur.description else None
        self.conn.commit()
        return row[0] if row else None

    def seed_catalogue(self, products: int = 20) -> None:
        for n in range(products):
            self.products.append(
                self._one(
                    "INSERT INTO store.products (sku, name, price)"
                    " VALUES (%s, %s, %s) RETURNING id",
                    (f"SKU-{self.tag}-{n:04d}", f"Product {n}", f"{self.rng.uniform(2, 200):.2f}"),
                )
            )

    def register_customer(self) -> None:
        n = len(self.customers)
        i = self.rng.randrange(len(COUNTRIES))
        self.customers.append(
            self._one(
                "INSERT INTO store.customers (email, full_name, street, city, postal_code, country)"
                " VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
                (
                    f"c{self.tag}-{n}@example.com",
                    f"Customer {n}",
                    f"{n} Main St",
                    CITIES[i],
                    f"{10000 + n}",
                    COUNTRIES[i],
                ),
            )
        )

    def place_order(self) -> None:
        placed = []
        with self.conn.cursor() as cur:
            for _ in range(self.orders_per_transaction):
                placed.append(self._place(cur))
        self.conn.commit()
        for order_id in placed:
            self.open_orders[order_id] = "pending"

    def _place(self, cur: Any) -> int:
        """One order with its items and its total, in the open transaction."""
        customer = self.rng.choice(self.customers)
        lines = [
            (self.rng.choice(self.products), self.rng.randint(1, 3))
            for _ in range(self.rng.randint(1, 3))
        ]
        cur.execute(
            "INSERT INTO store.orders (customer_id, total) VALUES (%s, 0) RETURNING id",
            (customer,),
        )
        order_id = int(cur.fetchone()[0])
        for line_no, (product, quantity) in enumerate(lines, 1):
            cur.execute(
                "INSERT INTO store.order_items SELECT %s, %s, id, %s, price"
                " FROM store.products WHERE id = %s",
                (order_id, line_no, quantity, product),
            )
        cur.execute(
            "UPDATE store.orders SET total = (SELECT sum(quantity * unit_price)"
            " FROM store.order_items WHERE order_id = %s) WHERE id = %s",
            (order_id, order_id),
        )
        return order_id

    def advance_order(self) -> None:
        moved: dict[int, str] = {}
        with self.conn.cursor() as cur:
            for _ in range(self.orders_per_transaction):
                left = [o for o in self.open_orders if o not in moved]
                if not left:
                    break
                order_id = self.rng.choice(left)
                status = self.open_orders[order_id]
                if status == "pending" and self.rng.random() < 0.1:
                    new = "cancelled"
                else:
                    new = NEXT_STATUS[status]
                extra = ", shipped_at = now(), tracking_number = %s" if new == "shipped" else ""
                args: tuple[Any, ...] = (
                    (new, f"TRK{order_id:08d}", order_id) if extra else (new, order_id)
                )
                cur.execute(
                    f"UPDATE store.orders SET status = %s, updated_at = now(){extra} WHERE id = %s",
                    args,
                )
                moved[order_id] = new
        self.conn.commit()
        for order_id, new in moved.items():
            if new in ("delivered", "cancelled"):
                del self.open_orders[order_id]
            else:
                self.open_orders[order_id] = new

    def touch(self) -> None:
        """Technical-only changes: no business cares (dropped by the translators)."""
        if self.rng.random() < 0.5:
            self._one(
                "UPDATE store.customers SET loyalty_score = loyalty_score + 1, updated_at = now()"
                " WHERE id = %s",
                (self.rng.choice(self.customers),),
            )
        else:
            self._one(
                "UPDATE store.products SET stock = stock + 5, updated_at = now() WHERE id = %s",
                (self.rng.choice(self.products),),
            )

    def move_customer(self) -> None:
        i = self.rng.randrange(len(COUNTRIES))
        self._one(
            "UPDATE store.customers SET city = %s, country = %s, street = %s WHERE id = %s",
            (
                CITIES[i],
                COUNTRIES[i],
                f"{self.rng.randint(1, 99)} New St",
                self.rng.choice(self.customers),
            ),
        )

    def change_price(self) -> None:
        self._one(
            "UPDATE store.products SET price = round(price * %s, 2) WHERE id = %s",
            (self.rng.choice((0.9, 1.1)), self.rng.choice(self.products)),
        )

    def step(self) -> str:
        """One business action, chosen with realistic weights; returns its name."""
        if not self.products:
            self.seed_catalogue()
        if len(self.customers) < 3:
            self.register_customer()
            return "register_customer"
        actions = [
            (self.register_customer, 10),
            (self.place_order, 25),
            (self.advance_order, 35 if self.open_orders else 0),
            (self.touch, 15),
            (self.move_customer, 5),
            (self.change_price, 5),
        ]
        action = self.rng.choices([a for a, _ in actions], [w for _, w in actions])[0]
        action()
        self.steps += 1
        return action.__name__
