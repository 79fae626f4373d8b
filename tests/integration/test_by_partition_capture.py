"""Issue 40 end to end: the store's orders placed in the real PostgreSQL and MariaDB,
captured with ``routing`` (orders by ``id``, their items by ``order_id``, over four
technical partitions), translated by two transaction workers of one group that own
technical partitions (``transactions.by_partition``), on Tansu and on Apache Kafka.
Two thirds of the transactions place two orders, and more than a third place them on
partitions of both members: every OrderPlaced
comes out once with its true total and items, and each order's status changes in
commit order."""

from __future__ import annotations

import random
import signal
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic import SecretStr

from bizevents.capture.config import CaptureConfig
from bizevents.devstack import Endpoints
from tests.capture import mysql_helpers
from tests.capture.capture_helpers import capture_endpoints, in_process
from tests.integration.test_transaction_worker import (
    Reader,
    Worker,
    _check,
    fill_order,
    store_db,
    truth,
)
from tests.integration.test_transaction_worker_by_partition import (
    N,
    _forwarded,
    _partition,
    _wait_held,
    crossing_share,
    place_mixed,
    wait_statuses,
)
from tests.integration.test_transaction_worker_mysql import store_mysql_db

pytestmark = pytest.mark.integration

ROUTING: dict[str, tuple[str, ...]] = {"store.orders": ("id",), "store.order_items": ("order_id",)}


class Store:
    """The store's database on one source, captured with routing, and the orders this
    test places in it."""

    def __init__(self, db: Any) -> None:
        self.db = db
        tag = uuid.uuid4().hex[:8]
        db.sql("INSERT INTO store.customers (email, full_name) VALUES (%s, 'T')", (f"{tag}@t",))
        self.customer = db.sql("SELECT id FROM store.customers WHERE email = %s", (f"{tag}@t",))
        self.products = []
        for sku, price in (("A", "2.50"), ("B", "4.59"), ("C", "1622.10")):
            db.sql(
                "INSERT INTO store.products (sku, name, price) VALUES (%s, %s, %s)",
                (f"{sku}-{tag}", sku, price),
            )
            found = db.sql("SELECT id FROM store.products WHERE sku = %s", (f"{sku}-{tag}",))
            self.products.append(found[0][0])
        # The store's tables are shared by the session's tests: this test's order ids
        # are its own, counted down from far above any sequence's (an id above
        # MariaDB's AUTO_INCREMENT moves it past this one, so never into ours).
        self.next_order = random.randrange(10**12, 2 * 10**12)
        #: per transaction: the partitions it touched
        self.touched: list[set[int]] = []

    def order_on(self, partition: int) -> int:
        order = self.next_order
        while _partition(order) != partition:
            order -= 1
        self.next_order = order - 1
        return order

    @contextmanager
    def transaction(self, orders: list[int]) -> Iterator[None]:
        """One transaction of the statements run inside, touching ``orders``."""
        self.db.sql("BEGIN")
        yield
        self.db.sql("COMMIT")
        self.touched.append({_partition(o) for o in orders})

    def mixed(self, count: int) -> list[int]:
        """``count`` transactions of :func:`place_mixed`; the orders placed."""
        return place_mixed(count, self.order_on, self.place)

    def place(self, orders: list[int], lines: int) -> None:
        """One transaction placing ``orders`` as the store's load does: each with total 0,
        its items, then its total."""
        with self.transaction(orders):
            for order in orders:
                self.db.sql(
                    "INSERT INTO store.orders (id, customer_id, total) VALUES (%s, %s, 0)",
                    (order, self.customer[0][0]),
                )
                items = [(self.products[(order + n) % 3], n) for n in range(1, lines + 1)]
                fill_order(self.db.sql, order, items)

    def status(self, orders: list[int], status: str) -> None:
        """One transaction moving ``orders`` to ``status``."""
        with self.transaction(orders):
            for o in orders:
                self.db.sql("UPDATE store.orders SET status = %s WHERE id = %s", (status, o))

    def crossing(self, held: list[list[int]]) -> float:
        return crossing_share(self.touched, held)


def _stop(worker: Worker) -> None:
    if worker.alive():
        worker.signal(signal.SIGTERM)


@contextmanager
def captured(
    source: str, broker: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Store, Endpoints, Callable[[], None]]]:
    """The store on ``source`` captured with routing onto ``broker``'s stack: the store,
    the stack, and a call that returns once capture took every change made so far."""
    endpoints = cast(Endpoints, request.getfixturevalue("bizevents_stack_on")(broker))
    state = tmp_path / "capture"
    if source == "mariadb":
        with store_mysql_db(request.getfixturevalue("bizevents_mysql"), endpoints) as my:
            config = CaptureConfig(
                server=my.server,
                dsn=SecretStr(my.dsn),
                tables=tuple(ROUTING),
                partitions=N,
                snapshot="never",
                routing=ROUTING,
            )
            with mysql_helpers.in_process(config, my.capture_endpoints(state)) as run:
                run.wait_snapshot()
                yield Store(my), endpoints, lambda: run.wait_position(my.binlog_end())
    else:
        with store_db(endpoints) as pg:
            config = CaptureConfig(
                server=pg.server,
                tables=tuple(ROUTING),
                slot=pg.slot,
                publication=pg.publication,
                partitions=N,
                snapshot="never",
                heartbeat_interval_s=1.0,
                routing=ROUTING,
            )
            with in_process(config, capture_endpoints(endpoints, state)) as run:
                run.wait_snapshot()
                yield Store(pg), endpoints, lambda: run.wait_acked(pg.wal_lsn())


@pytest.mark.parametrize(
    ("source", "broker"),
    # Both brokers, named (at least once on each; the suite's own broker is either).
    [
        ("postgres", "tansu"),
        ("postgres", "kafka"),
        pytest.param("mariadb", "tansu", marks=pytest.mark.mysql),
        pytest.param("mariadb", "kafka", marks=pytest.mark.mysql),
    ],
)
def test_two_members_by_partition_over_a_routing_capture(
    request: pytest.FixtureRequest, tmp_path: Path, source: str, broker: str
) -> None:
    """Two members by partition over a capture routing the orders by order id: every
    order placed once with its true total and items, the crossing transactions' slices
    exchanged, and each order's status changes (transactions across partitions too) in
    commit order."""
    with ExitStack() as stack:
        store, endpoints, caught_up = stack.enter_context(
            captured(source, broker, request, tmp_path)
        )
        db = store.db
        group = f"{db.server}-tx"
        workers = []
        for i in range(2):
            worker = Worker(db, group, f"{group}.dlq", tmp_path / f"w{i}.log")
            worker.env["BIZEVENTS_TRANSACTIONS__BY_PARTITION"] = "true"
            workers.append(worker.start())
            stack.callback(_stop, worker)
        reader = Reader(db)
        stack.callback(reader.close)
        held = _wait_held(workers, group)
        orders = store.mixed(30)
        changed = orders[:10]
        for status in ("paid", "shipped"):
            store.status(changed, status)
        caught_up()
        events = reader.wait(set(orders), workers[0], timeout=120)
        assert store.crossing(held) >= 1 / 3, held
        _check(events, truth(db, orders))
        assert len(events) == len(orders)  # no member died: each exactly once
        assert sum(_forwarded(endpoints, group, p) for p in range(N)) > 0, "nothing exchanged"
        seen = wait_statuses(endpoints, db.server, set(changed), 2)
        assert seen == {o: ["PAID", "SHIPPED"] for o in changed}
        assert all(w.alive() for w in workers), [w.tail() for w in workers]
