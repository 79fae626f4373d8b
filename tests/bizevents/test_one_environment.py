"""Issue 16: one environment for both README commands, and a replay without Spark says so."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# `bizevents replay` in a Python where pyspark cannot be imported (None in sys.modules
# makes every `import pyspark` fail as a missing package does).
WITHOUT_PYSPARK = (
    "import sys; sys.modules['pyspark'] = None; "
    "from bizevents.cli import main; main(prog_name='bizevents')"
)


def _setup_args(script: str) -> list[str]:
    calls = re.findall(r"^scripts/setup(.*?)(?:#.*)?$", (REPO / script).read_text(), re.M)
    assert len(calls) == 1, f"{script} should run scripts/setup once: {calls}"
    return calls[0].split()


def test_demo_and_test_commands_set_up_the_same_environment() -> None:
    """uv sync removes what it is not asked for: both commands must ask for the same extras."""
    assert _setup_args("scripts/demo") == _setup_args("scripts/test")
    assert "spark" in _setup_args("scripts/demo")


def test_replay_without_pyspark_says_what_to_install() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIZEVENTS_")}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            WITHOUT_PYSPARK,
            "replay",
            "--topics",
            "demo.store.orders",
            "--translator",
            "orders@2",
        ],
        env={**env, "BIZEVENTS_LOG_FORMAT": "json"},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and "pyspark is not installed" in lines[0]
    assert "--extra spark" in lines[0] and "bizevents[spark]" in lines[0]
