"""Start-up refusals of the two workers when the pins do not suit them: one sentence,
exit 1, before any broker is reached."""

from __future__ import annotations

import json

import pytest

from tests.bizevents.test_cli_failures import _closed_port, _env, _one_sentence, _run


@pytest.mark.parametrize(
    ("args", "pins", "sentence"),
    [
        (["translate", "--transactions"], {"orders": 2}, "no transaction translator is pinned"),
        # the one runtime runs transaction translators too: it goes on to the broker
        (["translate"], {"orders": 3}, "cannot list the topics of 127.0.0.1:"),
    ],
    ids=["tx-only-row-pins", "all-tx-pins"],
)
def test_worker_refuses_pins_it_cannot_run(
    args: list[str], pins: dict[str, int], sentence: str
) -> None:
    """``--transactions`` refuses when no transaction translator is pinned; the worker
    of every translator takes transaction pins alone and reaches for the broker."""
    env = _env(
        BIZEVENTS_TRANSLATORS=json.dumps(pins),
        BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS=f"127.0.0.1:{_closed_port()}",
        BIZEVENTS_TRANSLATE__TOPIC_PREFIX="shop",
        BIZEVENTS_TRANSLATE__BROKER_WAIT_S="0",
    )
    assert sentence in _one_sentence(_run(*args, env=env))
