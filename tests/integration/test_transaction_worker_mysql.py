"""The transaction worker on MySQL-captured topics: the store's orders placed in the real
MariaDB, captured from the binlog with transaction metadata (GTIDs as ids), assembled
and translated by orders@3 into one OrderPlaced per order with its items and true total."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import pytest
from bizevents_store.load import create_schema
from pydantic import SecretStr

from bizevents.capture.config import CaptureConfig
from bizevents.capture.mariadb import queries as my
from bizevents.devstack import Endpoints
from tests.capture.mysql_helpers import MyDb, in_process, mysql_database
from tests.integration.test_transaction_worker import Reader, Worker, _check, fill_order, truth

pytestmark = [pytest.mark.integration, pytest.mark.mysql]


@contextmanager
def store_mysql_db(dsn: str, endpoints: Endpoints) -> Iterator[MyDb]:
    """A test's database on the session's MariaDB, with the store's own database."""
    with mysql_database(dsn, endpoints) as made:
        conn = my.connect(dsn, autocommit=False)
        try:
            create_schema(conn, "mysql")  # the store's own database, `store`
        finally:
            conn.close()
        yield made


@pytest.fixture
def db(bizevents_mysql: str, bizevents_stack: Endpoints) -> Iterator[MyDb]:
    with store_mysql_db(bizevents_mysql, bizevents_stack) as made:
        yield made


def orders_capture(db: MyDb) -> CaptureConfig:
    """Capture of the store's orders and their items, from the binlog's end on."""
    return CaptureConfig(
        server=db.server,
        dsn=SecretStr(db.dsn),
        tables=("store.orders", "store.order_items"),
        partitions=3,
        snapshot="never",
    )


def customer_and_products(db: MyDb) -> tuple[int, list[int]]:
    """A new customer and three products (2.50, 4.59, 1622.10) in the store."""
    tag = uuid.uuid4().hex[:6]
    email = f"tx-{tag}@example.com"
    db.sql("INSERT IGNORE INTO store.customers (email, full_name) VALUES (%s, 'T')", (email,))
    customer = int(db.sql("SELECT id FROM store.customers WHERE email = %s", (email,))[0][0])
    products = []
    for sku, price in (("A", "2.50"), ("B", "4.59"), ("C", "1622.10")):
        db.sql(
            "INSERT INTO store.products (sku, name, price) VALUES (%s, %s, %s)",
            (f"{sku}-{tag}", sku, price),
        )
        products.append(int(db.sql("SELECT LAST_INSERT_ID()")[0][0]))
    return customer, products


def _place(db: MyDb, customer: int, lines: list[tuple[int, int]]) -> int:
    """As the store's load does, in one transaction: the order with total 0, its items,
    then the total."""
    db.sql("BEGIN")
    db.sql("INSERT INTO store.orders (customer_id, total) VALUES (%s, 0)", (customer,))
    order = int(db.sql("SELECT LAST_INSERT_ID()")[0][0])
    fill_order(db.sql, order, lines)
    db.sql("COMMIT")
    return order


def test_orders_placed_from_mariadb_transactions(db: MyDb, tmp_path: Path) -> None:
    """Five orders placed in MariaDB: one OrderPlaced each, with its items and the
    total its transaction set (never the 0.00 of its first INSERT)."""
    customer, products = customer_and_products(db)
    config = orders_capture(db)
    group = f"tx-{uuid.uuid4().hex[:6]}"
    # The worker and the reader need the broker, the registry and the topic prefix only.
    worker = Worker(cast(Any, db), group, f"{group}.dlq", tmp_path / "worker.log")
    reader = Reader(cast(Any, db))
    with in_process(config, db.capture_endpoints(tmp_path / "capture")) as run:
        run.wait_snapshot()
        worker.start()
        try:
            orders = [
                _place(db, customer, [(products[n % 3], n + 1), (products[(n + 1) % 3], 1)])
                for n in range(5)
            ]
            run.wait_position(db.binlog_end())
            events = reader.wait(set(orders), worker)
            expected = truth(cast(Any, db), orders)
            assert all(total > Decimal(0) for total, _ in expected.values())
            _check(events, expected)
            assert len(events) == len(orders)  # not one more
            # the transaction id is the GTID capture wrote
            assert all(e.lineage.tx_id and e.lineage.tx_id.count("-") == 2 for e in events)
        finally:
            reader.close()
            if worker.alive():
                worker.signal(signal.SIGTERM)
