"""What the tests of the dev stack and of the demo share: ``bizevents`` run as a user
runs it, in a state folder of the test's own, on free ports."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BIZEVENTS = [sys.executable, "-m", "bizevents"]


def run(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BIZEVENTS, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@contextmanager
def dev_env(state: Path, **more: str) -> Iterator[dict[str, str]]:
    """No BIZEVENTS_ setting of the machine's, the state folder ``state`` and the dev
    stack's free ports (and ``more``); ``dev down --purge`` afterwards."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BIZEVENTS_")},
        "BIZEVENTS_STATE_DIR": str(state),
        "BIZEVENTS_DEV__BROKER_PORT": "0",
        "BIZEVENTS_DEV__REGISTRY_PORT": "0",
        "BIZEVENTS_DEV__POSTGRES_PORT": "0",
        **more,
    }
    try:
        yield env
    finally:
        run(env, "dev", "down", "--purge")


def processes_with_env(entry: str) -> list[str]:
    """The pids of the processes whose environment holds ``entry`` (``NAME=value``)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            variables = environ.read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.encode() in variables:
            found.append(environ.parent.name)
    return found
