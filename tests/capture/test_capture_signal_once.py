"""Issue 42: a signal is carried out once. After signals ran (one on the signal topic,
one a row of the signal table), capture restarted with ``snapshot = "never"``, with a
new slot (MariaDB: a position lost or older than the signal's row) and with an empty
state folder carries none of them out again (real PostgreSQL, MariaDB and broker)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.signals import SignalTopic, new_signal, signal_table_ddl
from bizevents.capture.core.state import StateStore
from bizevents.contracts.envelope import ChangeEvent
from bizevents.devstack import Endpoints
from tests.capture import capture_helpers as pgh
from tests.capture import mysql_helpers as myh

pytestmark = pytest.mark.integration

ROWS = 20


def _incremental(endpoints: Endpoints, topic: str) -> int:
    """The records of ``topic`` an incremental snapshot wrote."""
    return sum(
        1
        for r in pgh.read_topic(endpoints, topic)
        if isinstance(r.decoded, ChangeEvent) and r.decoded.source.snapshot_raw == "incremental"
    )


def _send(endpoints: Endpoints, config: CaptureConfig, table: str) -> None:
    """A snapshot signal for ``table`` on the signal topic."""
    kafka = {"bootstrap.servers": endpoints.bootstrap_servers}
    producer = Producer(kafka)
    topic = SignalTopic(kafka, config.signal_topic_name, config.server)
    topic.send(producer, new_signal("execute-snapshot", (table,)))
    assert producer.flush(10) == 0


def _snapshotted(run: Any, table: str) -> Callable[[], bool]:
    return lambda: run.stats.incremental_rows.get(table) == ROWS and not run.runner.ledger.queue


def _nothing_again(run: Any, caught_up: Callable[[], None], how: str) -> None:
    """Capture read its signals' channels for a while: no snapshot asked for, none
    refused (a signal carried out again would be one or the other)."""
    run.wait_snapshot()
    caught_up()
    time.sleep(2.5)  # the signal topic is polled every half second
    caught_up()
    assert not run.runner.ledger.queue, f"{how}: a signal was carried out again"
    assert run.stats.signals_refused == 0, f"{how}: a signal was read again"
    run.stop()


def test_postgres_signals_are_carried_out_once(pg: pgh.Db, tmp_path: Path) -> None:
    s = pg.schema
    for t in ("a", "b"):
        pg.sql(f"CREATE TABLE {s}.{t} (id int PRIMARY KEY)")
        pg.sql(f"INSERT INTO {s}.{t} SELECT generate_series(1, {ROWS})")
    pg.sql(signal_table_ddl(f"{s}.sig", mysql=False))
    config = pg.config(["a", "b"], signal_table=f"{s}.sig")
    with pgh.in_process(config, pgh.capture_endpoints(pg.endpoints, tmp_path / "first")) as run:
        run.wait_snapshot()
        _send(pg.endpoints, config, f"{s}.a")
        pgh.wait_for(_snapshotted(run, f"{s}.a"), run, "the topic's signal was not carried out")
        pg.sql(
            f"INSERT INTO {s}.sig VALUES (%s, %s, %s)",
            new_signal("execute-snapshot", (f"{s}.b",)).to_row(),
        )
        pgh.wait_for(_snapshotted(run, f"{s}.b"), run, "the table's signal was not carried out")
        run.wait_acked(pg.wal_lsn())
        run.stop()
    counts = {t: _incremental(pg.endpoints, pg.topic(t)) for t in ("a", "b")}
    assert counts == {"a": ROWS, "b": ROWS}

    never = config.model_copy(update={"snapshot": "never"})
    restarts = [
        ("snapshot = never", never, False),
        ("a new slot", config, True),
        ("an empty state folder", config, False),
    ]
    for n, (how, cfg, drop_slot) in enumerate(restarts):
        if drop_slot:
            pg.drop_slot()
        endpoints = pgh.capture_endpoints(pg.endpoints, tmp_path / f"empty{n}")
        with pgh.in_process(cfg, endpoints) as again:

            def caught_up(run: pgh.InProcess = again) -> None:
                run.wait_acked(pg.wal_lsn())

            _nothing_again(again, caught_up, how)
    assert {t: _incremental(pg.endpoints, pg.topic(t)) for t in ("a", "b")} == counts


@pytest.mark.mysql
def test_mariadb_signals_are_carried_out_once(my: myh.MyDb, tmp_path: Path) -> None:
    for t in ("a", "b"):
        my.sql(f"CREATE TABLE {t} (id INT PRIMARY KEY)")
        my.sql(f"INSERT INTO {t} VALUES " + ", ".join(f"({i})" for i in range(1, ROWS + 1)))
    my.sql(signal_table_ddl("sig", mysql=True))
    config = my.config(["a", "b"], signal_table=f"{my.name}.sig")
    with myh.in_process(config, my.capture_endpoints(tmp_path / "first")) as run:
        run.wait_snapshot()
        _send(my.endpoints, config, f"{my.name}.a")
        pgh.wait_for(
            _snapshotted(run, f"{my.name}.a"), run, "the topic's signal was not carried out"
        )
        before_row = my.binlog_end()
        my.sql(
            "INSERT INTO sig VALUES (%s, %s, %s)",
            new_signal("execute-snapshot", (f"{my.name}.b",)).to_row(),
        )
        pgh.wait_for(
            _snapshotted(run, f"{my.name}.b"), run, "the table's signal was not carried out"
        )
        run.wait_position(my.binlog_end())
        run.stop()
    counts = {t: _incremental(my.endpoints, my.topic(t)) for t in ("a", "b")}
    assert counts == {"a": ROWS, "b": ROWS}

    kafka = {"bootstrap.servers": my.endpoints.bootstrap_servers}
    store = StateStore(kafka, config.offsets_topic_name, config.server)
    producer = Producer(kafka)

    def lose_position() -> None:
        store.write_acknowledged(producer, store.position_key(), None)

    def older_position() -> None:
        older = {
            "file": before_row.file,
            "pos": before_row.pos,
            "gtid": before_row.gtid,
            "snapshot_done": True,
        }
        store.write_acknowledged(producer, store.position_key(), older)

    never = config.model_copy(update={"snapshot": "never"})
    restarts: list[tuple[str, CaptureConfig, Callable[[], None]]] = [
        ("snapshot = never, the position lost", never, lose_position),
        ("a position older than the signal's row", config, older_position),
        ("an empty state folder", config, lambda: None),
    ]
    for n, (how, cfg, before) in enumerate(restarts):
        before()
        with myh.in_process(cfg, my.capture_endpoints(tmp_path / f"empty{n}")) as again:

            def caught_up(again: myh.InProcess = again) -> None:
                again.wait_position(my.binlog_end())

            _nothing_again(again, caught_up, how)
    assert {t: _incremental(my.endpoints, my.topic(t)) for t in ("a", "b")} == counts
