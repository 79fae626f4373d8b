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
        (["translate"], {"orders": 3}, "only transaction translators are pinned"),
    ],
    ids=["tx-worker-row-pins", "row-worker-tx-pins"],
)
def test_worker_refuses_pins_it_cannot_run(
    args: list[str], pins: dict[str, int], sentence: str
) -> None:
    """Each worker names the other when only the other's translators are pinned."""
    env = _env(
        BIZEVENTS_TRANSLATORS=json.dumps(pins),
        BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS=f"127.0.0.1:{_closed_port()}",
        BIZEVENTS_TRANSLATE__TOPIC_PREFIX="shop",
    )
    assert sentence in _one_sentence(_run(*args, env=env))
