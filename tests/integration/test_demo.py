"""The main job as a user runs it: `bizevents demo` on a stack of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.dev_cli import dev_env, processes_with_env, run


@pytest.mark.parametrize("source", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)])
def test_demo_runs_the_whole_flow_and_stops_cleanly(tmp_path: Path, source: str) -> None:
    """Store writes become business events of every kind; afterwards nothing is left
    running. On MariaDB too: the same translators on the binlog-captured topics."""
    argv = ["demo", "--live-only", "--duration", "40", "--rate", "40", "--source", source]
    with dev_env(tmp_path / "state", BIZEVENTS_DEV__MYSQL_PORT="0") as env:
        result = run(env, *argv, timeout=240)
        assert result.returncode == 0, result.stderr[-3000:]
        summary = result.stdout[result.stdout.index("demo summary") :]
        for topic in (
            "store.customer-registered",
            "store.order-placed",
            "store.order-status-changed",
            "store.order-shipped",
        ):
            row = next(line for line in summary.splitlines() if topic in line)
            assert int(row.split("│")[2].strip()) > 0, row
        translators = result.stdout[result.stdout.index("per translator") :]
        customers = next(line for line in translators.splitlines() if "customers@1" in line)
        consumed, emitted, _dropped, dead = (int(c.strip()) for c in customers.split("│")[2:6])
        assert consumed > 0 and emitted > 0 and dead == 0, customers
        # orders@3 (whole transactions): every OrderPlaced carries the order's true total
        of_orders = next(line for line in summary.splitlines() if "events of orders@3" in line)
        assert int(of_orders.split("│")[2].strip()) > 0, of_orders
        totals = next(line for line in summary.splitlines() if "true total" in line)
        true, _, placed = totals.split("│")[2].strip().partition(" of ")
        assert int(placed) > 0 and true == placed, totals
        # the demo started the stack, so it stopped it: no service is left recorded
        state = json.loads((tmp_path / "state" / "stack.json").read_text())
        assert state["services"] == {}
        # nor is any process the demo started (stack, capture, worker) still running:
        # each inherited the demo's environment, state folder included
        assert not processes_with_env(f"BIZEVENTS_STATE_DIR={tmp_path / 'state'}")
