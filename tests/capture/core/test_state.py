"""Capture's state in Kafka (capture/core/state.py): the snapshot ledger as it is
written and read back, and a capture moved to an empty state folder that resumes from
Kafka on either source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bizevents.capture.core.state import Ledger, Pending
from bizevents.contracts.envelope import ChangeEvent
from tests.capture.capture_helpers import final_state, read_topic
from tests.capture.sources import Source


def test_ledger_round_trips_and_names_the_added_tables() -> None:
    """The ledger reads back as written; a table configured since is "added" until its
    incremental snapshot is queued or done; no record means no ledger."""
    ledger = Ledger(
        True, ["s.a"], [Pending("s.c", "sig-1", "id > 3", ["7"], 12, paused=True)], "0/10"
    )
    again = Ledger.from_json(json.loads(json.dumps(ledger.to_json())))
    assert again is not None
    assert (again.initial_done, again.tables, again.consistent_point) == (True, ["s.a"], "0/10")
    assert again.queue[0].to_json() == ledger.queue[0].to_json()
    assert again.added_tables(["s.a", "s.b", "s.c"]) == ["s.b"]
    assert Ledger.from_json(None) is None and Ledger.from_json({}) is None


@pytest.mark.integration
def test_a_capture_started_with_an_empty_state_folder_does_not_snapshot_again(
    source: Source, tmp_path: Path
) -> None:
    """The position (PostgreSQL's slot, MariaDB's binlog position) and the snapshot
    ledger are in Kafka: a capture started elsewhere (another, empty state folder)
    against the same Kafka resumes from them, no second snapshot."""
    items = source.table("items")
    source.sql(f"CREATE TABLE {items} (id INT PRIMARY KEY, v INT)")
    source.sql(f"INSERT INTO {items} VALUES " + ", ".join(f"({i}, 0)" for i in range(1, 301)))
    first, second = tmp_path / "first", tmp_path / "second"
    with source.in_process(source.config(["items"], state_dir=first), first) as run:
        run.wait_snapshot()
        source.caught_up(run)
        run.stop()
    source.sql(f"UPDATE {items} SET v = 1 WHERE id = 7")
    with source.in_process(source.config(["items"], state_dir=second), second) as run:
        run.wait_snapshot()
        source.caught_up(run)
        assert run.stats.snapshot_rows == {}, "the moved capture snapshotted again"
        run.stop()
    records = read_topic(source.db.endpoints, source.topic("items"))
    ops = [r.decoded.op for r in records if isinstance(r.decoded, ChangeEvent)]
    assert ops.count("r") == 300 and ops.count("u") == 1
    assert final_state(records) == source.table_state("items")
    assert not second.exists() or not any(second.iterdir()), "state went to a local file"
