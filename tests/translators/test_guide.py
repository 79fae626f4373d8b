"""docs/writing-a-translator.md, lived as a new plugin author lives it, then
docs/consuming.md's Python part as the consuming team lives it.

The journey test builds the bizevents wheel, installs it into a fresh virtual environment,
and runs the guide in one shell, in order: its files written where it shows them, its
commands run (pip, pytest, `translators list`, `dev up`, psql, capture, `contracts write`
and `register`, `translate`, `read`), the background ones left running and stopped at the
end, the dev stack on free ports in the test's own folder, always stopped. Then, on that
stack, the consumer's part: `contracts pull`, the billing service on the consumer kit,
until it prints the delivered parcel. A fast part reads the guide for what the journey
would only find late.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.packaging.distributions import build, fresh_venv, install

GUIDE = Path(__file__).parents[2] / "docs" / "writing-a-translator.md"
CONSUMING = Path(__file__).parents[2] / "docs" / "consuming.md"
#: A step's marker: a file, a command, or one left running (until it prints a line).
STEP = re.compile(
    r"<!-- (file: (\S+)|run|run in the background(?:, until it prints: (.+?))?) -->"
    r"\n```\w*\n(.*?)```",
    re.DOTALL,
)
#: Names a plugin's own module must not take: bizevents' floors and PyPI packages of that name.
TAKEN = {"contracts", "translators", "capture", "replay", "consumers", "plumbing", "bizevents"}


@dataclass(frozen=True)
class Step:
    kind: str  # "file", "run" or "background"
    path: str
    text: str
    until: str = ""  # a background step: the line it prints once it did its work


def guide_steps(doc: Path = GUIDE) -> list[Step]:
    steps = []
    for marker, path, until, text in STEP.findall(doc.read_text(encoding="utf-8")):
        kind = "file" if path else ("run" if marker == "run" else "background")
        steps.append(Step(kind, path, text, until))
    return steps


def _files() -> dict[str, str]:
    return {s.path: s.text for s in guide_steps() if s.kind == "file"}


def test_the_plugins_modules_clash_with_nothing() -> None:
    modules = [p for p in _files() if p.startswith("bizevents_shipping/")]
    assert len(modules) >= 3, modules
    for path in modules:
        assert Path(path).stem not in TAKEN, f"{path} is named like a package it would shadow"
    project = tomllib.loads(_files()["pyproject.toml"])["project"]
    for value in project["entry-points"]["bizevents.translators"].values():
        module = value.partition(":")[0]
        assert f"{module.replace('.', '/')}.py" in _files(), f"{value} names no file of the guide"


def test_the_steps_come_in_an_order_that_works() -> None:
    """Installed before tested; pytest installed before it runs; contracts registered before
    the worker; the topic prefix the worker needs is the capture's server."""
    runs = [s.text for s in guide_steps() if s.kind != "file"]
    first = {
        what: next(i for i, text in enumerate(runs) if what in text)
        for what in (
            "pip install -e .",
            "pip install pytest",
            "pytest tests",
            "contracts register",
            "translate\n",
        )
    }
    assert first["pip install -e ."] < first["pytest tests"]
    assert first["pip install pytest"] <= first["pytest tests"]
    assert first["contracts register"] < first["translate\n"]
    settings = tomllib.loads(_files()["bizevents.toml"])
    capture = tomllib.loads(_files()["capture.toml"])
    assert settings["translate"]["topic_prefix"] == capture["server"]


def _script(steps: list[Step]) -> str:
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


def _stop_background(folder: Path) -> dict[str, str]:
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


@pytest.mark.integration
@pytest.mark.packaging
@pytest.mark.timeout(600)  # 40 s alone, 2 min on a busy machine: pip, a stack, two workers
def test_the_guide_as_a_new_author_lives_it(tmp_path: Path) -> None:
    wheel = build(tmp_path / "dist").wheel
    venv = fresh_venv(tmp_path / ".venv", with_pip=True)
    install(venv, wheel)  # `pip install bizevents`, the wheel a release would upload
    folder = tmp_path / "bizevents-shipping"
    folder.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("BIZEVENTS_", "PYTEST_"))},
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        "VIRTUAL_ENV": str(venv),
        # the stack on free ports; its state folder is the guide's, .bizevents/ in the folder
        "BIZEVENTS_DEV__BROKER_PORT": "0",
        "BIZEVENTS_DEV__REGISTRY_PORT": "0",
        "BIZEVENTS_DEV__POSTGRES_PORT": "0",
    }
    env.pop("PYTHONPATH", None)
    guide = guide_steps()
    steps = guide + guide_steps(CONSUMING)
    (folder / "guide.sh").write_text(_script(steps))
    try:
        done = subprocess.run(
            ["bash", "guide.sh"],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=540,
            check=False,
        )
    finally:
        stopped = _stop_background(folder)
        subprocess.run(
            ["bizevents", "dev", "down", "--purge"],
            cwd=folder,
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
    logs = "".join(
        f"\n--- {log.name}\n{log.read_text()[-3000:]}" for log in sorted(folder.glob("*.log"))
    )
    outputs = re.split(r"::step \d+::\n", done.stdout)[1:]
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}{logs}"
    assert len(outputs) == len(steps)
    assert len(stopped) == 3 and set(stopped.values()) == {"0"}, f"stopped: {stopped}{logs}"

    # the installed plugin is listed, its version pinned
    (listed,) = [outputs[i] for i, st in enumerate(steps) if "translators list" in st.text]
    assert re.search(r"parcels@1 .* pinned", listed), listed
    # the plugin's own tests ran and wrote their golden file
    assert "3 passed" in "".join(outputs)
    assert (folder / "tests" / "golden" / "parcels@1.json").is_file()
    assert (folder / "contracts" / "shipping.ParcelDelivered.avsc").is_file()
    # the guide's last command read the business event back: the parcel delivered, with
    # lineage, its time in RFC 3339 with Z
    (line,) = [text for text in outputs[len(guide) - 1].splitlines() if text.startswith("{")]
    record = json.loads(line)
    assert record["value"]["parcel_id"] == 7
    assert record["value"]["weight_kg"] == "1.250"
    assert record["value"]["delivered_at"].endswith("Z")
    assert record["headers"]["bizevents.translator"] == "parcels@1"
    # the consumer's side: its typed module pulled from the registry, the event handled
    # by the kit and saved by its event id
    assert (folder / "parcel_events.py").is_file()
    with sqlite3.connect(folder / "billing.db") as db:
        saved = db.execute("SELECT event_id, parcel_id, weight_kg FROM deliveries").fetchall()
    assert saved == [(record["headers"]["bizevents.event_id"], 7, "1.250")], saved
