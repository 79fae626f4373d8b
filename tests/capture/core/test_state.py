"""Capture's state in Kafka (capture/core/state.py): the snapshot ledger as it is
written and read back."""

from __future__ import annotations

import json

from bizevents.capture.core.state import Ledger, Pending


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
