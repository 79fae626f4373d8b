"""Replay through orders@3 of MariaDB-captured topics: a range that cuts a transaction is
widened by the GTIDs' commit positions (domain 0), not read whole, and the transaction it
cuts is replayed whole."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from bizevents_store.contracts import OrderPlaced
from bizevents_store.load import create_schema
from pydantic import SecretStr

from bizevents.capture import mysql as my
from bizevents.capture.config import CaptureConfig
from bizevents.devstack import Endpoints
from bizevents.replay.spec import Bound, Output, ReplaySpec
from bizevents.replay.transactions import TransactionReplay
from tests.capture.mysql_helpers import MyDb, in_process, mysql_database
from tests.integration.test_transaction_worker_mysql import _place, _truth
from tests.replay.test_replay_transactions import _changes, _ended_at, _read, _settings

pytestmark = [pytest.mark.integration, pytest.mark.mysql]


@pytest.fixture
def db(bizevents_mysql: str, bizevents_stack: Endpoints) -> Iterator[MyDb]:
    with mysql_database(bizevents_mysql, bizevents_stack) as made:
        conn = my.connect(bizevents_mysql, autocommit=False)
        try:
            create_schema(conn, "mysql")  # the store's own database, `store`
        finally:
            conn.close()
        yield made


def _customer_and_products(db: MyDb) -> tuple[int, list[int]]:
    tag = uuid.uuid4().hex[:6]
    email = f"replay-{tag}@example.com"
    db.sql("INSERT INTO store.customers (email, full_name) VALUES (%s, 'R')", (email,))
    customer = int(db.sql("SELECT id FROM store.customers WHERE email = %s", (email,))[0][0])
    products = []
    for sku, price in (("A", "2.50"), ("B", "4.59"), ("C", "1622.10")):
        db.sql(
            "INSERT INTO store.products (sku, name, price) VALUES (%s, %s, %s)",
            (f"{sku}-{tag}", sku, price),
        )
        products.append(int(db.sql("SELECT LAST_INSERT_ID()")[0][0]))
    db.sql("COMMIT")
    return customer, products


def test_a_range_that_cuts_a_mariadb_transaction_replays_it_whole(
    db: MyDb, tmp_path: Path, spark: Any
) -> None:
    """Sixteen orders of one to four items placed in MariaDB, captured with GTIDs; a
    --from/--until around the third item of a four-item order: that order's OrderPlaced
    has its four items and true total, only the transactions with a record at the bound
    are replayed, and the ranges are widened by the GTIDs' sequence numbers, not to whole
    partitions."""
    customer, products = _customer_and_products(db)
    config = CaptureConfig(
        server=db.server,
        dsn=SecretStr(db.dsn),
        tables=("store.orders", "store.order_items"),
        partitions=3,
        snapshot="never",
    )
    with in_process(config, db.capture_endpoints(tmp_path / "capture")) as run:
        run.wait_snapshot()
        orders = [
            _place(db, customer, [(products[(n + i) % 3], i + 1) for i in range(n % 4 + 1)])
            for n in range(16)
        ]
        run.wait_position(db.binlog_end())
    pg_like = cast(Any, db)  # the helpers read only the endpoints and the server name
    captured = {
        table: _changes(pg_like, f"{db.server}.store.{table}")
        for table in ("orders", "order_items")
    }
    items = [c for c in captured["order_items"] if c[2].after is not None]
    mine = set(orders)
    four = [o for o in orders if len([c for c in items if c[2].after["order_id"] == o]) == 4]
    cut = four[1]  # in the middle of the captured orders
    _, offset, _ = sorted(
        (c for c in items if c[2].after["order_id"] == cut), key=lambda c: c[2].after["line_no"]
    )[2]
    target = f"replay-my-{uuid.uuid4().hex[:8]}"
    spec = ReplaySpec(
        topics=f"{db.server}.store.*",
        translator="orders@3",
        output=Output.parse(f"topic:{target}"),
        start=Bound(offset=offset),
        until=Bound(offset=offset + 1),
    )
    summary = TransactionReplay(spec, _settings(pg_like, tmp_path / "state"), spark=spark).run()
    assert summary.dead_lettered == 0 and summary.left_out == 0
    # widened by commit position: a GTID without one would make it read every partition whole
    read = sum(e - s for t, _, s, e in summary.ranges if t != f"{db.server}.transaction")
    assert 0 < read < sum(len(changes) for changes in captured.values())

    placed = [e for e in _read(pg_like, target) if isinstance(e, OrderPlaced)]
    ids = [e.order_id for e in placed]
    assert len(ids) == len(set(ids)), "an order placed twice"
    expected = _truth(db, [i for i in ids if i in mine])
    for e in placed:
        if e.order_id in expected:
            total, lines = expected[e.order_id]
            assert e.total == total
            assert [(i.line_no, i.product_id, i.quantity, i.unit_price) for i in e.items] == lines
    assert cut in ids
    assert len(expected[cut][1]) == 4

    # the records at the bound select their transactions, and nothing else is replayed
    selected: set[int] = set()
    for table, changes in captured.items():
        for _, o, change in changes:
            if o == offset and change.transaction is not None:
                row = change.after or change.before
                selected.add(row["id"] if table == "orders" else row["order_id"])
    replayed = set(ids)
    assert replayed <= selected | _ended_at(pg_like, offset)
    assert selected & mine <= replayed  # other tests' transactions may sit beside them
    assert len(replayed & mine) < len(mine)
    # the GTIDs carry the commit positions the widening went by
    assert all(e.lineage.tx_id and e.lineage.tx_id.startswith("0-") for e in placed)
