"""The fault suite's short mode (``bench/faults.py --short``): kills, a paused broker and a
PostgreSQL restart under the store's load, counted against the database's history.

It starts its own stack (it pauses the broker and restarts PostgreSQL, which would
disturb the shared one) and runs as a subprocess, as a user would run it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
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
