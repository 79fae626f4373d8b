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
import sqlite3
import tomllib
from pathlib import Path

import pytest

from tests.guides import guide_env, guide_steps, run_guide
from tests.packaging.distributions import build, fresh_venv, install

GUIDE = Path(__file__).parents[2] / "docs" / "writing-a-translator.md"
CONSUMING = Path(__file__).parents[2] / "docs" / "consuming.md"
#: Names a plugin's own module must not take: bizevents' floors and PyPI packages of that name.
TAKEN = {"contracts", "translators", "capture", "replay", "consumers", "plumbing", "bizevents"}


def _files() -> dict[str, str]:
    return {s.path: s.text for s in guide_steps(GUIDE) if s.kind == "file"}


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
    runs = [s.text for s in guide_steps(GUIDE) if s.kind != "file"]
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


@pytest.mark.integration
@pytest.mark.packaging
@pytest.mark.timeout(600)  # 40 s alone, 2 min on a busy machine: pip, a stack, two workers
def test_the_guide_as_a_new_author_lives_it(tmp_path: Path) -> None:
    wheel = build(tmp_path / "dist").wheel
    venv = fresh_venv(tmp_path / ".venv", with_pip=True)
    install(venv, wheel)  # `pip install bizevents`, the wheel a release would upload
    folder = tmp_path / "bizevents-shipping"
    folder.mkdir()
    env = {**guide_env(f"{venv / 'bin'}:{os.environ['PATH']}"), "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)
    guide = guide_steps(GUIDE)
    steps = guide + guide_steps(CONSUMING)
    ran = run_guide(folder, steps, env, timeout=540)
    outputs, stopped = ran.outputs, ran.stopped
    assert len(stopped) == 3 and set(stopped.values()) == {"0"}, f"stopped: {stopped}{ran.logs}"

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
