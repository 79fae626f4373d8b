"""The fault suite's short mode (``bench/faults.py --short``): kills, a paused broker and a
PostgreSQL restart under the store's load, counted against the database's history.

It starts its own stack (it pauses the broker and restarts PostgreSQL, which would
disturb the shared one) and runs as a subprocess, as a user would run it.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _faults() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_faults", REPO / "bench" / "faults.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


faults = _faults()
RESULT = re.compile(
    r"^lost=(\d+) duplicated_ids=(\d+) reordered=(\d+) "
    r"differing_duplicates=(\d+) unexpected_exits=(\d+)$",
    re.MULTILINE,
)


def result_of(output: str) -> dict[str, int]:
    found = RESULT.search(output)
    assert found is not None, f"no result line in:\n{output[-4000:]}"
    names = ("lost", "duplicated_ids", "reordered", "differing_duplicates", "unexpected_exits")
    return dict(zip(names, map(int, found.groups()), strict=True))


def test_result_line_is_parsed() -> None:
    line = "lost=2 duplicated_ids=31 reordered=1 differing_duplicates=0 unexpected_exits=1"
    assert result_of(f"noise\n{line}\n  details") == {
        "lost": 2,
        "duplicated_ids": 31,
        "reordered": 1,
        "differing_duplicates": 0,
        "unexpected_exits": 1,
    }


def test_order_breaks_allow_a_resent_suffix_and_catch_a_new_record_out_of_order() -> None:
    resent = [(0, "a"), (1, "b"), (2, "c"), (1, "b"), (2, "c"), (3, "d")]
    assert faults.order_breaks({"k": resent}) == []
    swapped = [(0, "a"), (2, "c"), (1, "b")]
    assert faults.order_breaks({"k": swapped}) == ["k: commit #1 after #2"]
    # each key on its own: another key's later commit is no break
    assert faults.order_breaks({"k": [(5, "x")], "j": [(1, "y")]}) == []


def test_report_fails_on_loss_reorder_differing_copies_or_a_crash() -> None:
    assert faults.Report(duplicated_ids=3, same_content_duplicates=3).ok()
    for field in (
        "tech_missing",
        "events_missing",
        "replay_missing",
        "tx_missing",
        "reordered",
        "differing_duplicates",
        "events_unexpected",
        "unexpected_exits",
    ):
        assert not faults.Report(**{field: 1}).ok(), field


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_short_fault_suite_loses_nothing_and_keeps_order() -> None:
    """A few SIGKILLs of capture, the worker and a replay, a broker pause and a fast
    restart of PostgreSQL: no committed change and no business event is lost, no key's
    changes or events come out of commit order, and duplicates carry the same id and
    content; no component exits on its own."""
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "faults.py"), "--short", "--seed", "3"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=840,
        check=False,
    )
    output = run.stdout + run.stderr[-6000:]
    result = result_of(run.stdout)
    assert result["lost"] == 0, output
    assert result["reordered"] == 0, output
    assert result["differing_duplicates"] == 0, output
    assert result["unexpected_exits"] == 0, output
    assert run.returncode == 0, output
