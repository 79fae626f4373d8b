"""Both Kafka clients against the embedded broker: the paths the project relies on.

What the broker supports and what it does not is written in docs/broker.md; each
claim there points at a test here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bizevents.devstack import Endpoints


def create_topic(bootstrap: str, topic: str, partitions: int, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=config)])
    futures[topic].result(timeout=15)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in records:
        producer.produce(topic, key=key, value=value, headers=[("h", key)])
        producer.poll(0)
    assert producer.flush(30) == 0


def test_librdkafka_produce_and_assign_mode_read(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    """confluent-kafka produces keyed records and reads them back by explicit offsets."""
    topic = unique_topic("assign")
    bootstrap = bizevents_stack.bootstrap_servers
    create_topic(bootstrap, topic, 3, **{"cleanup.policy": "compact"})
    records = [(f"k{i % 50}".encode(), f"v{i}".encode()) for i in range(3_000)]
    records.append((b"k7", None))  # a tombstone keeps its null value
    produce(bootstrap, topic, records)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        highs = {}
        for partition in range(3):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            assert low == 0
            highs[partition] = high
        assert sum(highs.values()) == len(records)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        seen: list[tuple[bytes, bytes | None, int, int]] = []
        deadline = time.monotonic() + 30
        while len(seen) < len(records) and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1):
                assert message.error() is None, message.error()
                assert message.headers() == [("h", message.key())]
                seen.append((message.key(), message.value(), message.partition(), message.offset()))
    finally:
        consumer.close()
    assert sorted((k, v) for k, v, _, _ in seen) == sorted(records, key=lambda r: (r[0], r[1] or b""))
    # the key decides the partition: every record of one key is in one partition, in order
    by_key: dict[bytes, set[int]] = {}
    for key, _, partition, _ in seen:
        by_key.setdefault(key, set()).add(partition)
    assert all(len(parts) == 1 for parts in by_key.values())
    k3 = [v for k, v, _, _ in sorted(seen, key=lambda s: s[3]) if k == b"k3"]
    assert k3 == [f"v{i}".encode() for i in range(3, 3_000, 50)]


def test_aiokafka_consumer_group_reads_everything(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    """An aiokafka consumer group gets every partition and commits its offsets."""
    from aiokafka import AIOKafkaConsumer

    topic = unique_topic("group")
    bootstrap = bizevents_stack.bootstrap_servers
    create_topic(bootstrap, topic, 4)
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(2_000)]
    produce(bootstrap, topic, records)
    group = f"{topic}.readers"

    async def read_all() -> tuple[set[bytes], int]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        values: set[bytes] = set()
        try:
            async with asyncio.timeout(60):
                while len(values) < len(records):
                    batch = await consumer.getmany(timeout_ms=500)
                    for messages in batch.values():
                        values.update(m.value for m in messages if m.value is not None)
            await consumer.commit()
            committed = 0
            for tp in consumer.assignment():
                committed += await consumer.committed(tp) or 0
        finally:
            await consumer.stop()
        return values, committed

    values, committed = asyncio.run(read_all())
    assert values == {v for _, v in records}
    assert committed == len(records)
