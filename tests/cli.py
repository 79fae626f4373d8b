"""The command line as a user runs it, for the tests of what it prints and exits with."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """A command: its exit code and what it printed."""
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def bizevents(
    *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m bizevents ARGS``: its exit code and what it printed."""
    return run([sys.executable, "-m", "bizevents", *args], env=env, cwd=cwd, timeout=timeout)
