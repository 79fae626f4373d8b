"""A short round of scripts/sanitize: the C extensions built with AddressSanitizer and
UBSan, hostile inputs through each entry point that takes record bytes, compared with
the Python path (tests/hostile.py; the documented run takes 1,000,000 per entry point,
docs/reliability.md)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.hostile import ROUNDS

REPO = Path(__file__).resolve().parents[2]


def test_a_short_sanitized_round_finds_nothing() -> None:
    """gcc is part of the set-up (scripts/setup installs it): missing, this fails."""
    assert shutil.which("gcc"), "no gcc to build the extensions with sanitizers"
    done = subprocess.run(
        [str(REPO / "scripts" / "sanitize"), "--inputs", "1500"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "loaded " in done.stdout  # the sanitized builds, not the project's own
    for name in ROUNDS:
        assert f"{name}: 1500 inputs, same verdicts" in done.stdout, done.stdout
