"""`bizevents dev up --broker kafka [--brokers 3]` as a user runs it: Apache Kafka on
free loopback ports, its topics kept across `down` and `up`, a three-node cluster
with replication factor 3 and min.insync.replicas 2, and `status`, `smoke`, `down`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.integration.dev_cli import dev_env, run
from tests.integration.test_devstack_cli import recorded

pytestmark = pytest.mark.integration


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A state folder of the test's own, free ports; `dev down --purge` after the test."""
    with dev_env(tmp_path / "state") as environment:
        yield environment


def bootstrap(env: dict[str, str]) -> str:
    status = run(env, "dev", "status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    return str(json.loads(status.stdout)["endpoints"]["bootstrap_servers"])


def known_everywhere(admin: AdminClient, topic: str, timeout: float = 30) -> Any:
    """The cluster's metadata once the broker that answers knows ``topic``: a created
    topic reaches each node's metadata a moment after the controller acknowledged it."""
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(timeout=timeout)
        if topic in meta.topics and not meta.topics[topic].error:
            return meta
        assert time.monotonic() < deadline, f"no node knew {topic} after {timeout:g} s"
        time.sleep(0.2)


def test_one_node_keeps_its_topics_across_down_and_up(env: dict[str, str]) -> None:
    up = run(env, "dev", "up", "--broker", "kafka")
    assert up.returncode == 0, up.stdout + up.stderr
    assert set(recorded(env)) == {"broker", "registry", "postgres"}
    smoke = run(env, "dev", "smoke", "--messages", "200")
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert "200 messages produced and read back" in smoke.stdout
    servers = bootstrap(env)
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic("kept", 2, 1)])["kept"].result(30)

    other = run(env, "dev", "up", "--broker", "tansu")
    assert other.returncode == 1
    assert "runs Apache Kafka (1 node), not Tansu" in other.stderr + other.stdout

    processes = recorded(env)
    assert run(env, "dev", "down").returncode == 0
    assert not any(p.alive() for p in processes.values())
    again = run(env, "dev", "up")  # no --broker: the state folder keeps a Kafka cluster
    assert again.returncode == 0, again.stdout + again.stderr
    meta = known_everywhere(AdminClient({"bootstrap.servers": bootstrap(env)}), "kept")
    assert len(meta.topics["kept"].partitions) == 2


def test_three_nodes_replicate_and_stop_together(env: dict[str, str]) -> None:
    up = run(env, "dev", "up", "--broker", "kafka", "--brokers", "3")
    assert up.returncode == 0, up.stdout + up.stderr
    processes = recorded(env)
    assert set(processes) == {"broker", "broker-2", "broker-3", "registry", "postgres"}
    servers = bootstrap(env)
    assert len(servers.split(",")) == 3
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic("replicated", 3)])["replicated"].result(30)
    meta = known_everywhere(admin, "replicated")
    assert len(meta.brokers) == 3
    assert all(len(p.replicas) == 3 for p in meta.topics["replicated"].partitions.values())
    resource = ConfigResource(ConfigResource.Type.TOPIC, "replicated")
    config = admin.describe_configs([resource])[resource].result(30)
    assert config["min.insync.replicas"].value == "2"

    down = run(env, "dev", "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(p.alive() for p in processes.values())
