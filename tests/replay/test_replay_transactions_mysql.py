"""Replay through orders@3 of MariaDB-captured topics: a range that cuts a transaction is
widened by the GTIDs' commit positions (domain 0), not read whole, and the transaction it
cuts is replayed whole."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from bizevents_store.contracts import OrderPlaced

from bizevents.devstack import Endpoints
from bizevents.replay.transactions import TransactionReplay
from tests.capture.mysql_helpers import MyDb, in_process
from tests.integration.test_transaction_worker import truth
from tests.integration.test_transaction_worker_mysql import (
    _place,
    customer_and_products,
    orders_capture,
    store_mysql_db,
)
from tests.replay.test_replay_transactions import (
    _changes,
    _ended_at,
    _read,
    _settings,
    cutting,
)

pytestmark = [pytest.mark.integration, pytest.mark.mysql]


@pytest.fixture
def db(bizevents_mysql: str, bizevents_stack: Endpoints) -> Iterator[MyDb]:
    with store_mysql_db(bizevents_mysql, bizevents_stack) as made:
        yield made


def test_a_range_that_cuts_a_mariadb_transaction_replays_it_whole(
    db: MyDb, tmp_path: Path, spark: Any
) -> None:
    """Sixteen orders of one to four items placed in MariaDB, captured with GTIDs; a
    --from/--until around the third item of a four-item order: that order's OrderPlaced
    has its four items and true total, only the transactions with a record at the bound
    are replayed, and the ranges are widened by the GTIDs' sequence numbers, not to whole
    partitions."""
    customer, products = customer_and_products(db)
    with in_process(orders_capture(db), db.capture_endpoints(tmp_path / "capture")) as run:
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
    mine = set(orders)
    cut, offset, target, spec = cutting(db, captured["order_items"], orders, 1)  # a middle one
    summary = TransactionReplay(spec, _settings(pg_like, tmp_path / "state"), spark=spark).run()
    assert summary.dead_lettered == 0 and summary.left_out == 0
    # widened by commit position: a GTID without one would make it read every partition whole
    read = sum(e - s for t, _, s, e in summary.ranges if t != f"{db.server}.transaction")
    assert 0 < read < sum(len(changes) for changes in captured.values())

    placed = [e for e in _read(pg_like, target) if isinstance(e, OrderPlaced)]
    ids = [e.order_id for e in placed]
    assert len(ids) == len(set(ids)), "an order placed twice"
    expected = truth(cast(Any, db), [i for i in ids if i in mine])
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
