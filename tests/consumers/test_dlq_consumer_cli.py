"""``bizevents dlq ... --consumer GROUP``: wrong combinations of options are one sentence
and exit 1, before anything is read or written (no broker is needed to say so)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from bizevents.cli import main


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (["redrive", "--all"], "give either --translator NAME@VERSION or --consumer GROUP"),
        (
            ["redrive", "--translator", "orders@4", "--consumer", "billing", "--all"],
            "give either --translator NAME@VERSION or --consumer GROUP",
        ),
        (["redrive", "--consumer", "billing"], "give either --key KEY or --all"),
        (
            ["discard", "ab", "--reason", "x"],
            "give either --translator NAME or --consumer GROUP",
        ),
        (
            ["list", "--parked-topic", "p"],
            "--parked-topic and --dead-letter-topic go with --consumer GROUP",
        ),
    ],
)
def test_wrong_options_are_one_sentence(args: list[str], sentence: str) -> None:
    result = CliRunner().invoke(main, ["dlq", *args])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: ")
    assert sentence in result.output
    assert "Traceback" not in result.output
