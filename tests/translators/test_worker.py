"""The translator worker's start-up as the command runs it: a pin with no such version is
one sentence (tests/integration/test_translate_worker.py runs the worker for real)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_cli_refuses_a_pin_with_no_such_version() -> None:
    """``bizevents translate`` with ``orders = 9`` exits 1 with a sentence naming it."""
    env = {**os.environ, "BIZEVENTS_TRANSLATORS": '{"orders": 9}', "BIZEVENTS_LOG_FORMAT": "json"}
    done = subprocess.run(
        [sys.executable, "-m", "bizevents", "translate"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "no translator orders@9 is registered (orders has versions [1, 2, 3])" in done.stderr
