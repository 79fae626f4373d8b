"""docs/writing-a-translator.md runs as written: its files, its tests, its entry point, its pin."""

from __future__ import annotations

import importlib
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from bizevents.plugins import discover
from bizevents.settings import CONFIG_ENV, load_settings
from bizevents.testing import GOLDEN_ENV

GUIDE = Path(__file__).parents[2] / "docs" / "writing-a-translator.md"
BLOCK = re.compile(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", re.DOTALL)


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[Path]:
    """The guide's files written into a folder on sys.path, as `pip install -e .` would."""
    files = dict(BLOCK.findall(GUIDE.read_text(encoding="utf-8")))
    assert {"pyproject.toml", "bizevents_shipping/translators.py", "tests/test_parcels.py"} <= set(
        files
    )
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    # the metadata an install writes: the entry points exactly as the guide's pyproject has them
    project = tomllib.loads(files["pyproject.toml"])["project"]
    info = tmp_path / "bizevents_shipping-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    lines = [f"{k} = {v}" for k, v in project["entry-points"]["bizevents.translators"].items()]
    (info / "entry_points.txt").write_text("[bizevents.translators]\n" + "\n".join(lines) + "\n")
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith(("bizevents_shipping", "test_parcels"))]:
        del sys.modules[name]


def test_the_guides_tests_pass_and_write_their_golden_file(
    plugin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test function of the guide passes: first run writes the golden, then matches."""
    monkeypatch.syspath_prepend(str(plugin / "tests"))
    module = importlib.import_module("test_parcels")
    tests = [getattr(module, name) for name in dir(module) if name.startswith("test_")]
    assert len(tests) == 3
    monkeypatch.setenv(GOLDEN_ENV, "1")
    for test in tests:
        test()
    assert (plugin / "tests" / "golden" / "parcels@1.json").exists()
    monkeypatch.delenv(GOLDEN_ENV)
    for test in tests:
        test()


def test_the_guides_pin_resolves_through_its_entry_point(
    plugin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settings file of the guide pins parcels@1, found by its entry point's name."""
    # load_settings names the file in the environment; this restores it afterwards
    monkeypatch.setenv(CONFIG_ENV, str(plugin / "bizevents.toml"))
    settings = load_settings(plugin / "bizevents.toml")
    assert settings.translators == {"parcels": 1}
    (pinned,) = discover(names=settings.translators).pinned(settings.translators)
    assert pinned.ref == "parcels@1"
    assert pinned.func.__module__ == "bizevents_shipping.translators"
