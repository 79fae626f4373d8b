"""After `bizevents dev up` on free ports, the other commands find the stack without exports."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer

from bizevents.contracts.business import TOPIC_PROPERTY
from tests.integration.dev_cli import dev_env, run

pytestmark = pytest.mark.integration


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Only the state folder and the dev stack's free ports: no broker or registry address."""
    with dev_env(tmp_path / "state") as environment:
        up = run(environment, "dev", "up")
        assert up.returncode == 0, up.stderr
        yield environment


def test_commands_use_the_running_stack(env: dict[str, str], tmp_path: Path) -> None:
    status = run(env, "dev", "status", "--json")
    endpoints = json.loads(status.stdout)["endpoints"]
    assert not endpoints["bootstrap_servers"].endswith(":19092"), "port 0 picks a free port"

    topic = f"shipping.parcel-delivered.{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": endpoints["bootstrap_servers"]})
    producer.produce(topic, b"hello")
    assert producer.flush(15) == 0

    listed = run(env, "topics", "--json")
    assert listed.returncode == 0, listed.stderr
    assert topic in {entry["topic"] for entry in json.loads(listed.stdout)}

    contract = tmp_path / "ParcelDelivered.avsc"
    schema = {"type": "record", "name": "ParcelDelivered", "namespace": "shipping"}
    schema |= {"fields": [{"name": "parcel_id", "type": "long"}], TOPIC_PROPERTY: topic}
    contract.write_text(json.dumps(schema))
    registered = run(env, "contracts", "register", str(contract))
    assert registered.returncode == 0, registered.stdout + registered.stderr
    subjects = httpx.get(f"{endpoints['registry_url']}/subjects").json()
    assert f"{topic}-value" in subjects

    # `read` prints the record (plain bytes as text) and stops after --count
    read = run(env, "read", topic, "--count", "1", "--timeout", "30")
    assert read.returncode == 0, read.stderr
    (line,) = read.stdout.splitlines()
    # the broker auto-created the topic with several partitions: the record is in any one
    assert json.loads(line) | {"partition": 0} == {
        "partition": 0,
        "offset": 0,
        "key": None,
        "value": "hello",
        "headers": {},
    }
    missing = run(env, "read", f"{topic}.nothing", "--timeout", "1")
    assert missing.returncode == 1
    assert f"there is no topic {topic}.nothing on 127.0.0.1:" in " ".join(missing.stderr.split())
    assert "Traceback" not in missing.stderr

    # an address the environment names wins over the running stack's
    elsewhere = {**env, "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:9"}
    refused = run(elsewhere, "topics")
    assert refused.returncode == 1
    assert "127.0.0.1:9" in refused.stderr
