"""The fault suite's account of missing business events (bench/faultsuite/report.py), on
Apache Kafka: where their source records sit, the row group's committed offset there,
and which of them were written in a transaction that never committed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.faultsuite.report import missing_sources
from bizevents.contracts.business import (
    HEADER_EVENT_ID,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_TOPIC,
)
from bizevents.devstack import Endpoints
from bizevents.translators.records import OutRecord

pytestmark = pytest.mark.integration

#: What a group's commit answers while its coordinator is not known or still loading.
COORDINATOR_NOT_YET = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
)


def event(topic: str, source: str, offset: int, event_id: str) -> OutRecord:
    headers = [
        (HEADER_EVENT_ID, event_id.encode()),
        (HEADER_SOURCE_TOPIC, source.encode()),
        (HEADER_SOURCE_PARTITION, b"0"),
        (HEADER_SOURCE_OFFSET, str(offset).encode()),
    ]
    return OutRecord(topic, b"k", b"v", headers, "orders@2", event_id)


def commit_offset(bootstrap: str, group: str, offset: TopicPartition) -> None:
    """Commit ``offset`` for ``group``, once the group's coordinator answers (a fresh
    cluster creates its offsets topic first)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                consumer.commit(offsets=[offset], asynchronous=False)
                return
            except KafkaException as exc:
                if exc.args[0].code() not in COORDINATOR_NOT_YET or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def test_missing_events_are_placed_and_told_apart_from_aborted_ones(
    bizevents_stack_on: Callable[[Any], Endpoints],
) -> None:
    bootstrap = bizevents_stack_on("kafka").bootstrap_servers
    tag = uuid.uuid4().hex[:8]
    source, business, group = f"src-{tag}", f"biz-{tag}", f"g-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in (source, business)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{tag}"})
    producer.init_transactions(30)
    aborted, never = event(business, source, 7, "aborted"), event(business, source, 9, "never")
    for record, commit in ((event(business, source, 3, "kept"), True), (aborted, False)):
        producer.begin_transaction()
        producer.produce(business, record.value, record.key, headers=record.headers)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    commit_offset(bootstrap, group, TopicPartition(source, 0, 5))

    lines = missing_sources([aborted, never], bootstrap, group, [business])

    assert lines == [
        "business missing: 2 events, 1 of them read_uncommitted",
        f"business missing from {source}[0]: 2 events of source offsets 7..9; {group} committed 5",
    ]
