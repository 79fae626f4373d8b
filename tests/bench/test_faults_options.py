"""The fault suite's options, checked before it starts anything (bench/faults.py)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from bench import faults


def test_without_pyspark_the_suite_says_so_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The suite kills replays: without pyspark each replay exits 1 at once, and the
    suite restarted them as unexpected exits until its load ended."""
    found = importlib.util.find_spec

    def without_pyspark(name: str, *args: Any) -> Any:
        return None if name == "pyspark" else found(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_pyspark)
    with pytest.raises(SystemExit) as exited:
        faults.main(["--short"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "pyspark is not installed" in err, err
    assert "Traceback" not in err


def test_exactly_once_needs_kafka(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        faults.main(["--short", "--exactly-once"])
    assert exited.value.code == 2
    assert "--brokers and --exactly-once need --broker kafka" in capsys.readouterr().err
