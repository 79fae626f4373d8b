"""docs/from-debezium.md, run as written: its files written into an empty folder, its
commands run in one shell in order (the dev stack on Apache Kafka on free ports, Kafka
Connect standalone with Debezium's PostgreSQL connector, `bizevents translate` over its
topics), the background ones stopped at the end, the stack always stopped.

``connect-standalone.sh`` is Kafka's script in a team's installation; here it runs
``ConnectStandalone`` on the Debezium harness's classpath (scripts/setup-debezium).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.guides import guide_env, guide_steps, run_guide
from tests.peers import harness

GUIDE = Path(__file__).parents[2] / "docs" / "from-debezium.md"

pytestmark = pytest.mark.integration


def _connect_standalone(folder: Path) -> Path:
    """A ``connect-standalone.sh`` of the harness's classpath, in a folder for PATH."""
    bin_dir = folder / "connect-bin"
    bin_dir.mkdir()
    script = bin_dir / "connect-standalone.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"exec java -Xmx1g -cp '{harness.classpath()}' "
        'org.apache.kafka.connect.cli.ConnectStandalone "$@"\n'
    )
    script.chmod(0o755)
    return bin_dir


def test_the_steps_name_debeziums_prefix_as_the_workers() -> None:
    steps = guide_steps(GUIDE)
    files = {s.path: s.text for s in steps if s.kind == "file"}
    connector = dict(
        line.split("=", 1) for line in files["store-connector.properties"].splitlines() if line
    )
    assert f'topic_prefix = "{connector["topic.prefix"]}"' in files["bizevents.toml"]
    assert "schemas.enable=true" in files["connect-worker.properties"]


@pytest.mark.timeout(600)
def test_the_guide_runs_as_written(tmp_path: Path) -> None:
    reason = harness.missing()
    if reason is not None:
        pytest.fail(reason)
    folder = tmp_path / "shop"
    folder.mkdir()
    venv_bin = Path(sys.executable).parent
    env = guide_env(f"{venv_bin}:{_connect_standalone(tmp_path)}:{os.environ['PATH']}")
    ran = run_guide(folder, guide_steps(GUIDE), env, timeout=480)
    # Connect stopped by SIGTERM exits 143 (the JVM's), the worker cleanly
    assert len(ran.stopped) == 2, f"stopped: {ran.stopped}{ran.logs}"
    records = [json.loads(line) for line in ran.outputs[-1].splitlines() if line.startswith("{")]
    registered, moved = records
    assert registered["value"]["email"] == "ada@example.com"
    assert registered["headers"]["bizevents.translator"] == "customers@1"
    assert registered["headers"]["bizevents.source.topic"] == "shop.store.customers"
    assert moved["value"]["city"] == "Berlin"
