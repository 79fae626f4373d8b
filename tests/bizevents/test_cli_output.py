"""What the CLI prints: one time format, RFC 3339 in UTC with ``Z``, and no log line per
registry request."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import fastavro
import httpx
from confluent_kafka import Producer

from bizevents.devstack import Endpoints

SCHEMA = {
    "type": "record",
    "name": "ParcelDelivered",
    "namespace": "shipping",
    "fields": [
        {"name": "parcel_id", "type": "long"},
        {"name": "delivered_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    ],
}


def test_read_prints_times_in_rfc_3339_with_z(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique_topic("parcels")
    registered = httpx.post(
        f"{bizevents_stack.registry_url}/subjects/{topic}-value/versions",
        json={"schema": json.dumps(SCHEMA)},
    )
    schema_id = registered.raise_for_status().json()["id"]
    body = io.BytesIO()
    at = datetime(2026, 11, 29, 2, 23, 25, 157694, tzinfo=timezone(timedelta(hours=1)))
    fastavro.schemaless_writer(body, SCHEMA, {"parcel_id": 7, "delivered_at": at})
    producer = Producer({"bootstrap.servers": bizevents_stack.bootstrap_servers})
    producer.produce(topic, struct.pack(">bI", 0, schema_id) + body.getvalue())
    assert producer.flush(15) == 0

    env = {k: v for k, v in os.environ.items() if not k.startswith("BIZEVENTS_")}
    env |= {
        "BIZEVENTS_STATE_DIR": str(tmp_path),
        "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": bizevents_stack.bootstrap_servers,
        "BIZEVENTS_REGISTRY__URL": bizevents_stack.registry_url,
    }
    read = subprocess.run(
        [sys.executable, "-m", "bizevents", "read", topic, "--count", "1", "--timeout", "30"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert read.returncode == 0, read.stderr
    value = json.loads(read.stdout)["value"]
    assert value == {"parcel_id": 7, "delivered_at": "2026-11-29T01:23:25.157694Z"}
    assert datetime.fromisoformat(value["delivered_at"]) == at.astimezone(UTC)
    assert read.stderr == ""  # no line per registry request (httpx logs each at INFO)


def test_config_means_the_settings_file_in_every_command() -> None:
    """`--config` is the settings file, given before the command; no command takes a
    `--config` of its own (capture and verify take their capture file as an argument)."""
    import click

    from bizevents.cli import main

    def commands(group: click.Group, path: str) -> list[tuple[str, click.Command]]:
        found: list[tuple[str, click.Command]] = []
        for name, command in group.commands.items():
            found.append((f"{path} {name}", command))
            if isinstance(command, click.Group):
                found += commands(command, f"{path} {name}")
        return found

    assert "--config" in {o for p in main.params for o in p.opts}
    taking = [
        path
        for path, command in commands(main, "bizevents")
        if any("--config" in p.opts for p in command.params)
    ]
    assert taking == []
