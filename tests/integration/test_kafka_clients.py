"""Both Kafka clients against the embedded broker: the paths the project relies on.

What the broker supports and what it does not is written in docs/broker.md; each
claim there points at a test here or in test_broker_support.py.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

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

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        seen: list[tuple[bytes, bytes | None, int, int]] = []
        deadline = time.monotonic() + 30
        while len(seen) < len(records) and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1):
                assert message.error() is None, message.error()
                assert message.headers() == [("h", message.key())]
                seen.append((message.key(), message.value(), message.partition(), message.offset()))
        # the high watermark a Fetch returns is right (ListOffsets is not: see below)
        highs = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), cached=True)[1]
            for p in range(3)
        ]
    finally:
        consumer.close()
    assert sum(highs) == len(records)

    def order(record: tuple[bytes, bytes | None]) -> tuple[bytes, bytes]:
        return record[0], record[1] or b""

    assert sorted(((k, v) for k, v, _, _ in seen), key=order) == sorted(records, key=order)
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
            # the join takes half the session timeout on this broker (docs/broker.md)
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
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


def test_minimal_faust_app_consumes_and_produces(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str], tmp_path: Path
) -> None:
    """A stock Faust worker reads one topic and writes another on the embedded broker."""
    bootstrap = bizevents_stack.bootstrap_servers
    source, sink = unique_topic("faust-in"), unique_topic("faust-out")
    create_topic(bootstrap, source, 1)
    create_topic(bootstrap, sink, 1)
    produce(bootstrap, source, [(f"k{i}".encode(), f"value {i}".encode()) for i in range(200)])
    env = {
        **os.environ,
        "FAUST_TEST_APP_ID": unique_topic("app"),
        "FAUST_TEST_BROKER": bootstrap,
        "FAUST_TEST_SOURCE": source,
        "FAUST_TEST_SINK": sink,
    }
    log = tmp_path / "faust.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "faust",
                "-A",
                "tests.integration.faust_passthrough",
                "--datadir",
                str(tmp_path / "faust"),
                "-l",
                "warn",
                "worker",
                "--without-web",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).parents[2],
        )
    try:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
        consumer.assign([TopicPartition(sink, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 45
        while len(values) < 200 and time.monotonic() < deadline:
            assert worker.poll() is None, log.read_text()[-3000:]
            values += [m.value() for m in consumer.consume(500, timeout=0.2) if m.error() is None]
        consumer.close()
    finally:
        worker.terminate()
        worker.wait(30)
    assert values == [f"VALUE {i}".encode() for i in range(200)], log.read_text()[-3000:]
    # with Faust's default 60 s session the group join alone takes ~30 s on this broker
