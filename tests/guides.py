"""The guides in docs/ run as written, by the tests that hold them
(tests/translators/test_guide.py, tests/peers/test_from_debezium_guide.py): a guide's
steps read from its markers, written as one bash script, run in a folder with the dev
stack on free ports, the background commands stopped and the stack always stopped."""

from __future__ import annotations

import os
import re
import shlex
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from tests.cli import bizevents, run

#: A step's marker: a file, a command, or one left running (until it prints a line).
STEP = re.compile(
    r"<!-- (file: (\S+)|run|run in the background(?:, until it prints: (.+?))?) -->"
    r"\n```\w*\n(.*?)```",
    re.DOTALL,
)
#: The dev stack on free ports; its state folder is the guide's, .bizevents/ in the folder.
FREE_PORTS = {
    "BIZEVENTS_DEV__BROKER_PORT": "0",
    "BIZEVENTS_DEV__REGISTRY_PORT": "0",
    "BIZEVENTS_DEV__POSTGRES_PORT": "0",
}


@dataclass(frozen=True)
class Step:
    kind: str  # "file", "run" or "background"
    path: str
    text: str
    until: str = ""  # a background step: the line it prints once it did its work


def guide_steps(doc: Path) -> list[Step]:
    steps = []
    for marker, path, until, text in STEP.findall(doc.read_text(encoding="utf-8")):
        kind = "file" if path else ("run" if marker == "run" else "background")
        steps.append(Step(kind, path, text, until))
    return steps


def guide_env(path: str) -> dict[str, str]:
    """This process's environment without bizevents' and pytest's settings, ``path``
    as PATH, the stack on free ports."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("BIZEVENTS_", "PYTEST_"))}
    return {**kept, "PATH": path, **FREE_PORTS}


def script(steps: list[Step]) -> str:
    """The guide's steps as one bash script; each step's output follows a marker line."""
    lines = ["set -euo pipefail"]
    for number, step in enumerate(steps):
        lines.append(f"echo '::step {number}::'")
        if step.kind == "file":
            lines.append(f"mkdir -p {shlex.quote(str(Path(step.path).parent))}")
            lines.append(f"cat > {shlex.quote(step.path)} <<'GUIDE_FILE_END'")
            lines.append(step.text + "GUIDE_FILE_END")
        elif step.kind == "run":
            lines.append(step.text)
        else:
            (command,) = step.text.strip().splitlines()  # one command, left running
            # its pid for the test to stop it, and its exit code once stopped
            lines.append(
                f"( {command} > background-{number}.log 2>&1 & echo $! >> background.pids; "
                f"if wait $!; then echo 0; else echo $?; fi > background-{number}.rc ) "
                # not holding the script's output open: the test reads it to its end
                ">/dev/null 2>&1 &"
            )
            if step.until:  # the doc says what it prints: wait for it, as a reader would
                wait = (
                    f"until grep -qF -- {shlex.quote(step.until)} background-{number}.log "
                    "2>/dev/null; do sleep 0.5; done"
                )
                lines.append(f"timeout 120 bash -c {shlex.quote(wait)}")
    return "\n".join(lines) + "\n"


def stop_background(folder: Path) -> dict[str, str]:
    """Stop each background command as its terminal's Ctrl-C or a service manager would
    (SIGTERM; both stop them cleanly), newest first; their exit codes by log name."""
    pids_file = folder / "background.pids"
    pids = [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []
    for pid in reversed(pids):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + 60
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)  # the subshell writes the exit code once its command is gone
    return {rc.stem: rc.read_text().strip() for rc in sorted(folder.glob("background-*.rc"))}


@dataclass(frozen=True)
class GuideRun:
    outputs: list[str]  # each step's output, in order
    stopped: dict[str, str]  # the background commands' exit codes by log name
    logs: str  # the tails of the folder's logs, for a failure's message


def run_guide(folder: Path, steps: list[Step], env: dict[str, str], timeout: float) -> GuideRun:
    """``steps`` run in ``folder`` as one script; the background commands and the dev
    stack then stopped, whatever happened. Asserts the script ran to its end."""
    (folder / "guide.sh").write_text(script(steps))
    try:
        done = run(["bash", "guide.sh"], env=env, cwd=folder, timeout=timeout)
    finally:
        stopped = stop_background(folder)
        bizevents("dev", "down", "--purge", env=env, cwd=folder)
    logs = "".join(
        f"\n--- {log.name}\n{log.read_text()[-3000:]}" for log in sorted(folder.glob("*.log"))
    )
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}{logs}"
    outputs = re.split(r"::step \d+::\n", done.stdout)[1:]
    assert len(outputs) == len(steps)
    return GuideRun(outputs, stopped, logs)
