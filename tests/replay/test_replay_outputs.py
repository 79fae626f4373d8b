"""The outputs against the real broker: Parquet files, ``replay`` topics, ``topic:NAME``.

One small story (two partitions, a few ranges) serves every test of the module;
each test replays it once with the session's Spark and checks where the events went.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.cli import main
from bizevents.contracts.business import HEADER_EVENT_ID, HEADER_REPLAY, HEADER_SOURCE_TOPIC
from bizevents.contracts.serde import BusinessDeserializer
from bizevents.devstack import Endpoints
from bizevents.replay import Output, ReplayJob, ReplaySpec
from bizevents.settings import Settings
from bizevents.translators.registry import discover
from tests.replay.store_story import Story, expected_events, produce_story, read_all, story

pytestmark = pytest.mark.integration

SLICE = 1000  # offsets per range: one range per partition (a Parquet write costs ~1-2 s)


@pytest.fixture(scope="module")
def made(bizevents_stack: Endpoints) -> Story:
    result = story(f"out{uuid.uuid4().hex[:8]}", orders=40, deletes=2)
    produce_story(bizevents_stack.bootstrap_servers, bizevents_stack.registry_url, result, 2)
    return result


@pytest.fixture(scope="module")
def expected(bizevents_stack: Endpoints, made: Story) -> dict[str, str]:
    """``event id -> contract topic`` of what orders@2 emits for the story."""
    found = expected_events(
        bizevents_stack.bootstrap_servers, bizevents_stack.registry_url, made.topic
    )
    assert len(found) > 50
    return found


def _ours(stack: Endpoints, topic: str, source_topic: str) -> list[Any]:
    """The records of ``topic`` translated from ``source_topic`` (other tests share topics)."""
    return [
        m
        for m in read_all(stack.bootstrap_servers, topic)
        if dict(m.headers() or []).get(HEADER_SOURCE_TOPIC, b"").decode() == source_topic
    ]


def _ends(stack: Endpoints, topics: set[str]) -> dict[tuple[str, int], int]:
    """The high watermark of every partition of ``topics`` that exists (a write moves it)."""
    found = AdminClient({"bootstrap.servers": stack.bootstrap_servers}).list_topics(timeout=10)
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "replay-ends"})
    try:
        return {
            (t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
            for t in sorted(topics & set(found.topics))
            for p in found.topics[t].partitions
        }
    finally:
        consumer.close()


def test_replay_to_parquet(
    bizevents_stack: Endpoints,
    settings: Settings,
    spark: Any,
    tmp_path: Path,
    made: Story,
    expected: dict[str, str],
) -> None:
    """Spark's Parquet writer, one folder per range; every id once, values decode."""
    out = tmp_path / "parquet"
    spec = ReplaySpec(
        made.topic, "orders@2", Output.parse(f"path:{out}", "parquet"), slice_size=SLICE
    )
    summary = ReplayJob(spec, settings.runtime(), spark=spark).run()

    assert summary.ranges == 2 and summary.total("read") == len(made.changes)
    folders = sorted(p.name for p in out.iterdir())
    assert len(folders) == summary.ranges and all(f.startswith("range=") for f in folders)
    rows = spark.read.parquet(str(out)).collect()
    assert Counter(r.event_id for r in rows) == Counter(set(expected))  # each id exactly once
    assert sum(summary.events.values()) == len(rows)

    deserialize = BusinessDeserializer(
        SchemaRegistryClient({"url": bizevents_stack.registry_url}),
        *discover().resolve("orders@2").emits,
    )
    for row in rows:
        event = deserialize(bytes(row.value), row.topic)
        assert event.lineage.event_id == row.event_id and event.lineage.replay
        assert row.contract == type(event).contract_fullname()
        assert row.topic == expected[row.event_id] == type(event).contract_topic()
        assert row.translator == "orders@2" and row.source_topic == made.topic
        assert (row.source_partition, row.source_offset) == (
            event.lineage.source_partition,
            event.lineage.source_offset,
        )
        headers = {h.key: bytes(h.value) for h in row.headers}
        assert headers[HEADER_EVENT_ID] == row.event_id.encode()
        assert json.loads(row.event)["lineage"]["event_id"] == row.event_id


def test_replay_output_goes_to_the_replay_topics(
    bizevents_stack: Endpoints,
    settings: Settings,
    spark: Any,
    made: Story,
    expected: dict[str, str],
) -> None:
    """``--to replay``: ``<contract topic>.replay``, replay header set; live topics untouched."""
    contract_topics = set(expected.values())
    live_before = _ends(bizevents_stack, contract_topics)
    spec = ReplaySpec(made.topic, "orders@2", Output.parse("replay"), slice_size=SLICE)
    summary = ReplayJob(spec, settings.runtime(), spark=spark).run()

    assert _ends(bizevents_stack, contract_topics) == live_before  # the live topics: untouched
    assert set(summary.events) == {t + ".replay" for t in contract_topics}
    for topic in contract_topics:
        replayed = _ours(bizevents_stack, topic + ".replay", made.topic)
        ids = [dict(m.headers())[HEADER_EVENT_ID].decode() for m in replayed]
        assert sorted(ids) == sorted(i for i, t in expected.items() if t == topic), topic
        assert {dict(m.headers())[HEADER_REPLAY] for m in replayed} == {b"true"}


def test_replay_to_one_named_topic(
    bizevents_stack: Endpoints,
    settings: Settings,
    spark: Any,
    made: Story,
    expected: dict[str, str],
) -> None:
    """``--to topic:NAME``: every event of every contract lands in that one topic."""
    target = f"fixes-{uuid.uuid4().hex[:8]}"
    spec = ReplaySpec(made.topic, "orders@2", Output.parse(f"topic:{target}"), slice_size=SLICE)
    summary = ReplayJob(spec, settings.runtime(), spark=spark).run()

    assert summary.events == {target: len(expected)}
    records = list(read_all(bizevents_stack.bootstrap_servers, target))
    assert sorted(dict(m.headers())[HEADER_EVENT_ID].decode() for m in records) == sorted(expected)
    assert len({m.value()[1:5] for m in records}) >= 3  # each value framed with its own schema


def test_progress_on_a_terminal(
    bizevents_stack: Endpoints, spark: Any, tmp_path: Path, made: Story, expected: dict[str, str]
) -> None:
    """With stderr taken for a terminal (rich's TTY_COMPATIBLE=1): ranges done, then a table."""
    env = {
        "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": bizevents_stack.bootstrap_servers,
        "BIZEVENTS_REGISTRY__URL": bizevents_stack.registry_url,
        "BIZEVENTS_STATE_DIR": str(tmp_path / "state"),
        "BIZEVENTS_LOG_LEVEL": "WARNING",
        "TTY_COMPATIBLE": "1",
    }
    args = ["--topics", made.topic, "--translator", "orders@2", "--to", f"path:{tmp_path / 'out'}"]
    result = CliRunner().invoke(
        main, ["replay", *args, "--slice-size", str(SLICE), "--run-id", "progress"], env=env
    )
    assert result.exit_code == 0, result.stderr
    state = json.loads((tmp_path / "state/replay/progress/state.json").read_text())
    ranges = len(state["ranges"])
    assert ranges == 2
    assert f"{ranges} ranges planned" in result.stderr
    assert f"{ranges}/{ranges}" in result.stderr  # the bar's ranges-done count, at the end
    assert "events/s" in result.stderr
    assert "\x1b[" in result.stderr  # drawn as on a terminal, not as plain lines
    assert "replay progress" in result.stdout  # the summary table's title
    assert "records read" in result.stdout and f"{len(made.changes):,}" in result.stdout
    for topic in set(expected.values()):
        assert f"events → {topic}" in result.stdout
