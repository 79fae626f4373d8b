"""The replay of a technical topic Apache Kafka really compacted: the same latest business
state as the replay of the same topic before compaction.

The story's topic is written, replayed with ``--compact`` (latest record per key, the
replay's own compaction), then compacted by Kafka (tests/compaction.py) until offsets
are missing and the deletes' tombstones are gone too; replayed again, with and without
``--compact``, in slices that end inside the gaps. Each replay must emit the very same
events (ids, topics, payloads) for the story's records.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.devstack import Endpoints
from bizevents.replay import Output, ReplayJob, ReplaySpec
from tests.compaction import Kept, compact, compact_quickly, missing_offsets
from tests.replay.conftest import stack_settings
from tests.replay.store_story import produce_story, story
from tests.store_technical import order_change, registered_orders_encoder

pytestmark = pytest.mark.integration

SLICE = 7  # small ranges: many of them start or end inside a gap


def _events(spark: Any, folder: Path, story_records: int) -> set[tuple[str, str, str]]:
    """``(event id, topic, event as JSON)`` of each event the story's records gave."""
    rows = spark.read.parquet(str(folder)).collect()
    return {(r.event_id, r.topic, r.event) for r in rows if r.source_offset < story_records}


@pytest.mark.timeout(900)  # 7 min at a load of 25 on 2 cores: four Spark replays in slices
def test_a_replay_of_a_compacted_topic_gives_the_state_it_gave_before_compaction(
    bizevents_stack_on: Callable[[Any], Endpoints], tmp_path: Path, spark: Any
) -> None:
    stack = bizevents_stack_on("kafka")  # Tansu does not compact (docs/broker.md)
    bootstrap = stack.bootstrap_servers
    made = story(f"cmp{uuid.uuid4().hex[:8]}", orders=40, deletes=3)
    records = produce_story(bootstrap, stack.registry_url, made, partitions=1)
    settings = stack_settings(stack, tmp_path / "state")

    def replay(name: str, compacted: bool) -> set[tuple[str, str, str]]:
        out = tmp_path / name
        spec = ReplaySpec(
            made.topic,
            "orders@2",
            Output.parse(f"path:{out}", "parquet"),
            compact=compacted,
            slice_size=SLICE,
        )
        ReplayJob(spec, settings.runtime(), spark=spark).run()
        return _events(spark, out, records)

    before = replay("before", compacted=True)
    assert before

    # Rolls: changes of an order of its own (id 0, not in the story), after the story.
    encoder = registered_orders_encoder(
        made.server, SchemaRegistryClient({"url": stack.registry_url})
    )
    producer = Producer({"bootstrap.servers": bootstrap})
    rolls = iter(range(1, 10_000))
    placed = datetime(2026, 3, 1, tzinfo=UTC)

    def roll() -> None:
        n = next(rolls)
        row = {
            "id": 0,
            "customer_id": 1,
            "status": "pending",
            "total": Decimal(n),
            "currency": "EUR",
            "placed_at": placed,
            "shipped_at": None,
            "tracking_number": None,
            "updated_at": placed + timedelta(seconds=n),
        }
        key, value = encoder.encode(order_change(made.server, "c", None, row, lsn=n, tx_id=n))
        producer.produce(made.topic, value, key, partition=0)
        assert producer.flush(10) == 0

    def cleaned(kept: list[Kept]) -> bool:
        # versions gone, and the deletes' tombstones too (a second pass of the cleaner)
        return missing_offsets(kept) > 0 and all(r.value is not None for r in kept)

    compact_quickly(bootstrap, made.topic)
    kept = compact(bootstrap, made.topic, roll, cleaned)
    story_kept = [r for r in kept if r.offset < records]
    # the latest record of each of the 37 orders left, nothing of the 3 deleted ones
    assert len({r.key for r in story_kept}) == len(story_kept) == 40 - 3 < records

    assert replay("after-compact", compacted=True) == before
    assert replay("after-all", compacted=False) == before
