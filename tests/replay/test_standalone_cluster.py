"""The replay on a real Spark standalone cluster: a master and two workers on loopback,
each a JVM of its own with its own Python workers, driven through ``--master spark://``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bizevents.devstack import Endpoints
from tests.replay.store_story import expected_events, produce_story, replay_command, story
from tests.replay.test_replay_cli import REPO, _env, _written_ids

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from bizevents.devstack.spark import StandaloneCluster

    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as running:
        yield running


def test_replay_on_a_standalone_cluster_emits_every_event_once(
    bizevents_stack: Endpoints, tmp_path: Path, cluster: Any
) -> None:
    made: Any = story(f"cluster{uuid.uuid4().hex[:8]}", orders=300, deletes=5)
    produce_story(bizevents_stack.bootstrap_servers, bizevents_stack.registry_url, made, 4)
    out = tmp_path / "out"
    command = replay_command(
        made.topic,
        "--to",
        f"path:{out}",
        "--slice-size",
        "100",
        "--master",
        cluster.master_url,
        "--no-progress",
        "--json",
    )
    env = {
        **os.environ,
        **_env(bizevents_stack, tmp_path / "state"),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["ranges"] > 2  # several tasks, spread over the two workers' executors
    written = _written_ids(out)
    assert len(written) == len(set(written))
    assert set(written) == set(
        expected_events(bizevents_stack.bootstrap_servers, bizevents_stack.registry_url, made.topic)
    )
    # the tasks ran in executors the two workers started, not in the driver
    executors = list(cluster.folder.glob("work-*/app-*/*/stderr"))
    assert {p.parents[2].name for p in executors} == {"work-0", "work-1"}, executors
