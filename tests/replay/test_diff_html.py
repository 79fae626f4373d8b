"""Issue 16: `bizevents replay --diff ... --diff-html FILE` on Spark writes the readable report."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from bizevents.devstack import Endpoints
from tests.replay.store_story import produce_story, replay_command, story

pytestmark = pytest.mark.integration


def test_replay_diff_writes_an_html_report(bizevents_stack: Endpoints, tmp_path: Path) -> None:
    made = story(f"html{uuid.uuid4().hex[:8]}", orders=30)
    produce_story(bizevents_stack.bootstrap_servers, bizevents_stack.registry_url, made)
    report = tmp_path / "diff.html"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIZEVENTS_")}
    env |= {
        "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": bizevents_stack.bootstrap_servers,
        "BIZEVENTS_REGISTRY__URL": bizevents_stack.registry_url,
        "BIZEVENTS_STATE_DIR": str(tmp_path / "state"),
        "BIZEVENTS_LOG_LEVEL": "WARNING",
    }
    result = subprocess.run(
        replay_command(
            made.topic,
            "--diff",
            "orders@1",
            "--diff-html",
            str(report),
            "--master",
            "local[1]",
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    page = report.read_text()
    # the text output and the page tell the same counts
    status_line = next(
        line for line in result.stdout.splitlines() if "store.orders.OrderStatusChanged" in line
    )
    equal, changed = (cell.strip() for cell in status_line.split("│")[2:4])
    assert equal == "0" and int(changed.replace(",", "")) > 0
    assert f'<td class="n">{changed}</td>' in page
    assert "store.orders.OrderStatusChanged · changed" in page
    assert '<tr class="differs"><th>new_status</th>' in page


def test_diff_html_without_diff_says_so(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIZEVENTS_")}
    result = subprocess.run(
        replay_command(
            "t",
            "--diff-html",
            str(tmp_path / "x.html"),
        ),
        env={**env, "BIZEVENTS_STATE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "--diff-html writes the report of a --diff run" in result.stderr
