"""The checks pyproject.toml configures run with the tests, and any finding fails them.

ruff (lint and format) and mypy (strict, over the one package ``bizevents`` and every
floor it links in) run as the commands a developer would type, from the checkout's root;
mypy also over ``bench/``, whose scripts no test runs: a benchmark that no longer fits
the code it measures (a result's type changed, a patched method's signature grew) is
found here, not by the next engineer who runs it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "argv",
    [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy"],
        # a cache of its own: the two mypy runs may run at once (pytest-xdist)
        ["mypy", "--explicit-package-bases", "--cache-dir", ".mypy_cache/bench", "bench"],
    ],
    ids=["ruff-check", "ruff-format", "mypy", "mypy-bench"],
)
def test_the_configured_check_finds_nothing(argv: list[str]) -> None:
    """``ruff check``, ``ruff format --check``, ``mypy`` and ``mypy`` over the benchmarks
    exit 0 on the checkout."""
    done = subprocess.run(
        [str(BIN / argv[0]), *argv[1:]], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{' '.join(argv)} found:\n{done.stdout}{done.stderr}"
