"""``bizevents replay`` as a user runs it: clear errors, and a killed driver resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pytest
from click.testing import CliRunner

from bizevents.cli import main
from bizevents.devstack import Endpoints
from tests.replay.store_story import expected_events, produce_story, replay_command, story

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _env(stack: Endpoints, state_dir: Path, registry_url: str | None = None) -> dict[str, str]:
    return {
        "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": stack.bootstrap_servers,
        "BIZEVENTS_REGISTRY__URL": registry_url or stack.registry_url,
        "BIZEVENTS_STATE_DIR": str(state_dir),
        "BIZEVENTS_LOG_LEVEL": "WARNING",
    }


@pytest.fixture(scope="module")
def orders_topic(bizevents_stack: Endpoints) -> Any:
    made = story(f"cli{uuid.uuid4().hex[:8]}", orders=300, deletes=5)
    produce_story(bizevents_stack.bootstrap_servers, bizevents_stack.registry_url, made, 4)
    return made


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (["--topics", "no.such.topic.*", "--translator", "orders@2"], "no topic matches --topics"),
        (["--translator", "orders@9"], "no translator orders@9 is registered"),
        (["--translator", "orders"], "must be name@version"),
        (["--translator", "orders@2", "--registry-down"], "schema registry at"),
        (["--translator", "orders@2", "--to", "kafka"], "is not an output"),
        (["--translator", "orders@2", "--to", "replay", "--format", "parquet"], "path:DIR"),
    ],
    ids=[
        "missing-topic",
        "unknown-version",
        "bare-name",
        "registry-unreachable",
        "bad-output",
        "format-without-path",
    ],
)
def test_clear_errors(
    bizevents_stack: Endpoints, tmp_path: Path, orders_topic: Any, args: list[str], sentence: str
) -> None:
    """Exit 1 with one sentence on stderr, before Spark starts."""
    registry = None
    if "--registry-down" in args:
        args = [a for a in args if a != "--registry-down"]
        registry = "http://127.0.0.1:9"  # discard port: nothing listens
    if "--topics" not in args:
        args = ["--topics", orders_topic.topic, *args]
    if "--to" not in args:
        args = [*args, "--to", f"path:{tmp_path / 'out'}"]
    result = CliRunner().invoke(
        main, ["replay", *args], env=_env(bizevents_stack, tmp_path, registry)
    )
    assert result.exit_code == 1, result.output
    assert sentence in result.stderr
    assert "Traceback" not in result.stderr


def _written_ids(out: Path) -> list[str]:
    ids: list[str] = []
    for path in sorted(out.rglob("*.avro")):
        with path.open("rb") as handle:
            records: list[dict[str, Any]] = list(fastavro.reader(handle))  # type: ignore[arg-type]
            ids += [r["event_id"] for r in records if r["event_id"]]
    return ids


def test_killed_driver_resumes_without_losing_a_range(
    bizevents_stack: Endpoints, tmp_path: Path, orders_topic: Any
) -> None:
    """kill -9 the driver after a few ranges finished; the rerun finishes the rest, none lost."""
    out = tmp_path / "out"
    run_id = f"kill-{uuid.uuid4().hex[:6]}"
    command = replay_command(
        orders_topic.topic,
        "--to",
        f"path:{out}",
        "--run-id",
        run_id,
        "--slice-size",
        "20",
        "--master",
        "local[1]",
        "--no-progress",
        "--json",
    )
    env = {**os.environ, **_env(bizevents_stack, tmp_path / "state")}
    state = tmp_path / "state" / "replay" / run_id / "state.json"
    first = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        done = 0
        while time.monotonic() < deadline and first.poll() is None:
            if state.is_file():
                try:
                    done = len(json.loads(state.read_text())["done"])
                except ValueError:
                    done = 0  # caught between write and rename is impossible; be lenient
                if done >= 3:
                    break
            time.sleep(0.05)
        assert first.poll() is None, first.stderr.read() if first.stderr else ""
        os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
    finally:
        first.wait(30)
    planned = json.loads(state.read_text())
    assert 3 <= len(planned["done"]) < len(planned["ranges"])

    second = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout)
    assert summary["skipped"] >= len(planned["done"])
    assert summary["ranges"] == len(planned["ranges"])
    written = _written_ids(out)
    assert set(written) == set(
        expected_events(
            bizevents_stack.bootstrap_servers, bizevents_stack.registry_url, orders_topic.topic
        )
    )
    # a range in flight at the kill ran again: its file was replaced, not doubled
    assert len(written) == len(set(written))
