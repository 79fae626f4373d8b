"""The one body of the equivalence tests (tests/peers/test_debezium_postgres.py and
test_debezium_mariadb.py): the same workload through bizevents capture and through
Debezium, both reading their signals from one signal table, then every record compared
(tests/peers/compare.py) and every difference held to its row of
docs/technical-envelope.md's table. A :class:`Peer` says what differs by database: its
tables and their rows, the connector's properties, SQL transactions, the capture run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.signals import new_signal
from bizevents.contracts.envelope import ChangeEvent, Tombstone
from tests.capture.capture_helpers import read_topic
from tests.peers import compare, differences, harness

#: The tables both databases have besides their own (``Peer.tables``): ``items`` takes
#: the updates, the key change, the delete and the column added and dropped; ``done``'s
#: one row ends the workload.
ITEMS_DDL = "CREATE TABLE {items} (id INT PRIMARY KEY, note VARCHAR(40), qty INT)"
DONE_DDL = "CREATE TABLE {done} (id INT PRIMARY KEY)"


class Peer(Protocol):
    database: str  # as differences.py names it: "PostgreSQL" or "MariaDB"
    tools: Path  # the harness's classpath for this database's connector
    db: Any  # tests.capture's Db or MyDb
    #: the tables of this database only, in capture's order, with their DDL and the rows
    #: the initial snapshot reads and the multi-row transaction writes
    tables: tuple[str, ...]
    tombstones: int  # the workload's: deletes and key changes

    def name(self, table: str) -> str: ...  # as SQL names it
    def topic(self, table: str) -> str: ...
    def create(self) -> None: ...  # every table, the signal table ``sig``, snapshot rows
    def transaction_rows(self) -> list[tuple[str, dict[str, Any]]]: ...
    def last_changes(self) -> None: ...  # the database's own changes before the signal
    def config(self, tables: list[str]) -> CaptureConfig: ...
    def properties(self, tables: list[str]) -> dict[str, str]: ...
    def capture(self, config: CaptureConfig, state: Path) -> AbstractContextManager[Any]: ...
    def drained(self, run: Any) -> None: ...  # until capture acknowledged all written
    def autocommit(self, on: bool) -> None: ...


def insert(peer: Peer, table: str, row: dict[str, Any]) -> None:
    names = list(row)
    peer.db.sql(
        f"INSERT INTO {peer.name(table)} ({', '.join(names)}) "
        f"VALUES ({', '.join(['%s'] * len(names))})",
        [row[n] for n in names],
    )


@contextmanager
def transaction(peer: Peer, commit: bool = True) -> Iterator[None]:
    peer.autocommit(False)
    try:
        yield
        if commit:
            peer.db.conn.commit()
        else:
            peer.db.conn.rollback()
    finally:
        peer.autocommit(True)


def snapshot_marker(r: harness.Record) -> str | None:
    source = (r.value or {}).get("payload", {}).get("source") or {}
    return source.get("snapshot")


def _incremental(r: harness.Record) -> bool:
    return snapshot_marker(r) == "incremental"


def side_by_side(peer: Peer, tmp_path: Path) -> None:
    """The workload through both, compared; the table held."""
    tables = [*peer.tables, "items", "done"]
    peer.create()
    insert(peer, "items", {"id": 100, "note": "snapshot", "qty": 1})
    config = peer.config(tables)
    dbz = harness.start(
        peer.properties(tables), tmp_path / "debezium", until_topic=".done", tools=peer.tools
    )
    try:
        with peer.capture(config, tmp_path / "state") as run:
            run.wait_snapshot()
            dbz.wait_for(lambda rs: any(snapshot_marker(r) == "last" for r in rs))
            with transaction(peer):  # a multi-row transaction
                for table, row in peer.transaction_rows():
                    insert(peer, table, row)
                insert(peer, "items", {"id": 1, "note": "one", "qty": 1})
            sql = peer.db.sql
            sql(f"UPDATE {peer.name('items')} SET qty = 2 WHERE id = 1")
            sql(f"UPDATE {peer.name('items')} SET id = 2 WHERE id = 1")  # a key change
            sql(f"DELETE FROM {peer.name('items')} WHERE id = 100")
            with transaction(peer, commit=False):
                insert(peer, "items", {"id": 9, "note": "rolled back", "qty": 9})
            sql(f"ALTER TABLE {peer.name('items')} ADD COLUMN extra INT")
            insert(peer, "items", {"id": 3, "note": "added", "qty": 3, "extra": 33})
            sql(f"ALTER TABLE {peer.name('items')} DROP COLUMN extra")
            insert(peer, "items", {"id": 4, "note": "dropped", "qty": 4})
            peer.last_changes()
            signal = new_signal("execute-snapshot", (peer.name("items"),))
            sql(f"INSERT INTO {peer.name('sig')} VALUES (%s, %s, %s)", signal.to_row())
            deadline = time.monotonic() + 60
            while run.runner.ledger.queue or not run.stats.incremental_rows:
                if run.error is not None:
                    raise run.error
                assert time.monotonic() < deadline, "bizevents' incremental snapshot did not end"
                time.sleep(0.1)
            dbz.wait_for(lambda rs: sum(map(_incremental, rs)) == 3)  # items 2, 3, 4
            insert(peer, "done", {"id": 1})
            peer.drained(run)
            run.stop()
        dbz.finish()
    finally:
        dbz.stop()

    ours = [
        (peer.topic(t), r.decoded)
        for t in tables
        for r in sorted(read_topic(peer.db.endpoints, peer.topic(t)), key=lambda r: r.offset)
    ]
    records = dbz.records()
    theirs = compare.debezium_changes(records, {peer.topic(t) for t in tables})
    mine, other = compare.per_key(ours), compare.per_key(theirs)
    assert sum(isinstance(d, Tombstone) for _, d in ours) == peer.tombstones
    for side in (ours, theirs):
        assert any(
            isinstance(d, ChangeEvent) and d.source.snapshot_raw == "incremental" for _, d in side
        )
    rows = differences.rows_for(peer.database)
    tx_topic = f"{peer.db.server}.transaction"
    ours_tx = compare.read_transactions(peer.db.endpoints, tx_topic)
    assert ours_tx, "bizevents wrote no transaction record"
    lone = compare.hold_transactions(
        ours_tx,
        compare.debezium_transactions(records, tx_topic),
        tx_topic,
        {peer.name(t) for t in tables},
        rows["transaction.id"].holds if "transaction.id" in rows else None,
    )
    compare.hold_table([*compare.differences(mine, other), *lone], rows, mine)
