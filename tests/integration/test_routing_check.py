"""The transaction worker's start-up check of capture's routing (real PostgreSQL, broker
and registry): a capture that routes the store's order items otherwise than orders@3
keys them stops the worker at start with one sentence; one that agrees passes."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from bizevents_store.translators import orders_v3

from bizevents.contracts.technical.routing import TableRouting
from bizevents.devstack import Endpoints
from bizevents.translators.routingcheck import check_routing
from tests.capture.capture_helpers import Db, capture_endpoints, in_process
from tests.integration.test_transaction_worker import Worker, store_db

pytestmark = pytest.mark.integration


@pytest.fixture
def db(bizevents_stack: Endpoints) -> Iterator[Db]:
    with store_db(bizevents_stack) as made:
        yield made


@contextmanager
def routed(db: Db, tmp_path: Path, items_by: tuple[str, ...]) -> Iterator[Any]:
    """The store's orders (by id) and items (by ``items_by``) captured, routed."""
    config = db.config(
        ["store.orders", "store.order_items"],
        partitions=3,
        routing={"store.orders": ("id",), "store.order_items": items_by},
    )
    with in_process(config, capture_endpoints(db.endpoints, tmp_path / "capture")) as run:
        run.wait_snapshot()
        yield run


def test_the_worker_refuses_a_routing_other_than_its_keys(db: Db, tmp_path: Path) -> None:
    """Items routed by (order_id, line_no), keyed by order_id in orders@3: exit 1, one
    sentence naming translator, table and both keys, no traceback."""
    group = f"route-{uuid.uuid4().hex[:8]}"
    with routed(db, tmp_path, ("order_id", "line_no")):
        worker = Worker(db, group, f"{group}.dlq", tmp_path / "worker.log").start()
        assert worker.process is not None
        try:
            code = worker.process.wait(60)
        finally:
            if worker.alive():
                worker.signal(signal.SIGKILL)
    out = worker.log.read_text()
    assert code == 1, out[-3000:]
    plain = [line for line in out.splitlines() if not line.startswith("{")]
    assert plain[-1].endswith(
        f"translator orders@3 keys store.order_items by order_id, but capture routes it by "
        f"order_id, line_no over 3 partitions (declared on {db.server}.routing): declare the "
        "same keys, or route capture anew (a new topic generation, docs/transactions.md)"
    ), out[-3000:]
    assert not any("Traceback" in line for line in out.splitlines()), out[-3000:]


def test_an_agreeing_routing_passes(db: Db, tmp_path: Path) -> None:
    """Items routed by order_id, as orders@3 keys them: the check gives the routing."""
    with routed(db, tmp_path, ("order_id",)):
        found = check_routing(
            {"bootstrap.servers": db.endpoints.bootstrap_servers},
            f"{db.server}.routing",
            [orders_v3],
        )
    assert found == {
        "store.orders": TableRouting("store.orders", ("id",), 3),
        "store.order_items": TableRouting("store.order_items", ("order_id",), 3),
    }
