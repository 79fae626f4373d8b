"""The demo finds the store plugin through its entry points, and says what to install."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bizevents.cli import main
from bizevents.demo import PINS, store_plugin


def test_demo_finds_the_store_plugin_through_its_entry_points() -> None:
    """The pinned translators and the load module come from the installed plugin."""
    pinned, load = store_plugin()
    assert {t.name: t.version for t in pinned} == PINS
    assert callable(load.create_schema) and callable(load.StoreLoad)


def test_demo_without_the_store_plugin_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No plugin installed: one sentence naming the package, exit 1, nothing started."""

    def nothing_installed(**_: Any) -> list[Any]:
        return []

    monkeypatch.setattr("bizevents.translators.registry.entry_points", nothing_installed)
    result = CliRunner().invoke(
        main, ["demo", "--duration", "1"], env={"BIZEVENTS_STATE_DIR": str(tmp_path)}
    )
    assert result.exit_code == 1
    assert "the demo runs the store plugin (bizevents-store), which is not installed" in (
        result.stderr
    )
    assert "pip install -e examples/store" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "demo").exists()  # it stopped before starting the stack
