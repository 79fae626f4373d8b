"""The reference domain: orders@1 ran live and was wrong; replay with orders@2 fixes it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from bizevents_store.contracts import OrderStatusChanged
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.contracts.business import HEADER_EVENT_ID, HEADER_SOURCE_TOPIC
from bizevents.contracts.serde import BusinessDeserializer
from bizevents.devstack import Endpoints
from bizevents.replay import Output, ReplayJob, ReplaySpec
from bizevents.settings import Settings
from tests.replay.store_story import live_translate, produce_story, read_all, story

pytestmark = pytest.mark.integration


def _latest_per_event_id(stack: Endpoints, topic: str, source_topic: str) -> dict[str, Any]:
    """A consumer that keeps the latest record per event_id (of this test's source topic)."""
    latest: dict[str, Any] = {}
    for message in sorted(
        read_all(stack.bootstrap_servers, topic), key=lambda m: (m.partition(), m.offset())
    ):
        headers = dict(message.headers() or [])
        if headers.get(HEADER_SOURCE_TOPIC, b"").decode() != source_topic:
            continue
        latest[headers[HEADER_EVENT_ID].decode()] = message
    return latest


def _final_status(stack: Endpoints, source_topic: str) -> dict[int, str]:
    """Per order, the new status of its last OrderStatusChanged, as a consumer sees it."""
    decode = BusinessDeserializer(
        SchemaRegistryClient({"url": stack.registry_url}), OrderStatusChanged
    )
    latest = _latest_per_event_id(stack, OrderStatusChanged.contract_topic(), source_topic)
    last: dict[int, tuple[int, str]] = {}
    for message in latest.values():
        event = decode(message.value(), message.topic())
        order, at = event.order_id, event.lineage.source_offset
        if order not in last or at > last[order][0]:
            last[order] = (at, event.new_status.value)
    return {order: status for order, (_, status) in last.items()}


def test_replay_v2_supersedes_what_v1_emitted(
    bizevents_stack: Endpoints, settings: Settings, spark: Any
) -> None:
    """Replay orders@2 over the compacted topic: same event ids, and the latest per id is right."""
    made = story(f"shop{uuid.uuid4().hex[:8]}", orders=120, deletes=6)
    produce_story(bizevents_stack.bootstrap_servers, bizevents_stack.registry_url, made)
    live_translate(
        bizevents_stack.bootstrap_servers, bizevents_stack.registry_url, made.topic, "orders@1"
    )
    truth = {order: row["status"].upper() for order, row in made.table.items()}
    before = _final_status(bizevents_stack, made.topic)
    assert any(before.get(o) != s for o, s in truth.items() if s != "PENDING")  # v1 was wrong
    live_ids = set(
        _latest_per_event_id(bizevents_stack, OrderStatusChanged.contract_topic(), made.topic)
    )

    spec = ReplaySpec(made.topic, "orders@2", Output.parse("topic"), compact=True, slice_size=40)
    summary = ReplayJob(spec, settings.runtime(), spark=spark).run()

    assert summary.total("read") == len(made.changes)
    assert summary.total("kept") == len(made.table)  # latest per key; deleted keys gone
    after = _final_status(bizevents_stack, made.topic)
    for order, status in truth.items():
        assert after.get(order, "PENDING") == status, order
    replayed = _latest_per_event_id(
        bizevents_stack, OrderStatusChanged.contract_topic(), made.topic
    )
    # every corrected event superseded one v1 emitted: no new ids, only new values
    assert set(replayed) == live_ids
    replay_flags = {dict(m.headers())[b"bizevents.replay".decode()] for m in replayed.values()}
    assert b"true" in replay_flags
