"""What capture may confirm to PostgreSQL, the snapshot record, and the config checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bizevents.capture.config import CaptureConfig, load_capture_config
from bizevents.capture.core.offsets import AckTracker
from bizevents.capture.core.state import Ledger, Pending
from bizevents.plumbing.errors import ConfigError


def test_confirms_only_fully_acknowledged_prefixes() -> None:
    """Acks out of order across transactions: the position waits for the oldest."""
    tracker = AckTracker(start_lsn=100)
    t1 = tracker.begin(1)
    t1.produced(2)
    tracker.commit(t1, 200)
    t2 = tracker.begin(2)
    t2.produced(1)
    tracker.commit(t2, 300)
    t2.ack(None)
    assert tracker.confirmable() == 100  # t1 still waits
    t1.ack(None)
    assert tracker.confirmable() == 100
    t1.ack(None)
    assert tracker.confirmable() == 300
    assert tracker.in_flight == 0 and tracker.idle


def test_open_transaction_confirms_nothing_and_a_failure_is_kept() -> None:
    """A transaction without its Commit holds the position; a failed ack is reported."""
    tracker = AckTracker()
    tx = tracker.begin(7)
    tx.produced(1)
    tx.ack(None)
    assert tracker.confirmable() == 0 and not tracker.idle
    assert tracker.advance_idle(999) == 0
    tracker.abandon_open()
    assert tracker.open is None
    failing = tracker.begin(8)
    failing.produced(1)
    failing.ack("broker said no")  # type: ignore[arg-type]
    assert tracker.failure == "broker said no"
    tracker.commit(failing, 500)
    assert tracker.confirmable() == 0


def test_idle_tracker_follows_the_server_position() -> None:
    """Nothing in flight: the server's reported position may be confirmed."""
    tracker = AckTracker(10)
    assert tracker.advance_idle(50) == 50
    assert tracker.advance_idle(40) == 50


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


@pytest.mark.parametrize(
    ("toml", "fragment"),
    [
        ('server = "s"\n', "name the tables"),
        ('server = "s"\ntables = ["orders"]\n', "schema.table"),
        (
            'server = "s"\ntables = ["public.a"]\ncolumns."public.b".exclude = ["x"]\n',
            "not captured",
        ),
        (
            'server = "s"\ntables = ["public.a"]\n[columns."public.a"]\n'
            'include = ["x"]\nexclude = ["y"]\n',
            "not both",
        ),
        ('server = "s"\ntables = ["public.a"]\nslot = "Bad-Slot"\n', "slot/publication"),
        ('server = "s"\ntables = ["public.a"]\nwhat = 1\n', "what"),
    ],
    ids=[
        "no-tables",
        "unqualified",
        "filter-unknown-table",
        "include-and-exclude",
        "bad-slot",
        "unknown-key",
    ],
)
def test_config_refuses_impossible_combinations(tmp_path: Path, toml: str, fragment: str) -> None:
    """A bad capture file fails at once with a sentence naming the problem."""
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=fragment):
        load_capture_config(path)


def test_config_defaults() -> None:
    """Slot, publication and topic prefix follow the server name."""
    config = CaptureConfig(server="Shop-EU", tables=("public.orders",))
    assert config.slot_name == "bizevents_shop_eu"
    assert config.publication_name == config.slot_name
    assert config.prefix == "Shop-EU"
    assert config.column_filter("public.orders").keeps("anything")
