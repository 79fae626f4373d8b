"""Kafka as the tests and benchmarks see it: make a topic, fill it, read it to its end.

Reading is in assign mode, with no group membership (librdkafka groups misbehave on
Tansu): a consumer that reports each partition's end (:func:`end_reader`), and
:func:`read_all`, every record of a topic up to the end of each partition.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions)]).values():
        future.result(30)


def produce(
    bootstrap: str, topic: str, records: Sequence[tuple[bytes | None, bytes | None]]
) -> None:
    """Keyed records; librdkafka's default partitioner puts one key in one partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def end_reader(bootstrap: str, group: str, **extra: Any) -> Consumer:
    """A consumer that commits nothing and says when it reaches a partition's end."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **extra,
        }
    )


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]
    #: When the broker appended it (ms): which of two copies came when.
    timestamp: int = 0

    @classmethod
    def of(cls, m: Any) -> Message:
        """The record librdkafka gave, its headers by name (a missing value is ``b""``)."""
        headers: dict[str, bytes] = {}
        for header in m.headers() or []:
            name, raw = header[0], header[1]
            headers[name] = raw.encode() if isinstance(raw, str) else raw or b""
        key, value = m.key(), m.value()
        return cls(
            str(m.topic()),
            int(m.partition() or 0),
            int(m.offset() or 0),
            key.encode() if isinstance(key, str) else key,
            value.encode() if isinstance(value, str) else value,
            headers,
            int(m.timestamp()[1]),
        )


def read_all(
    bootstrap: str, topic: str, timeout: float = 30, isolation: str = "read_uncommitted"
) -> list[Message]:
    """Every record of ``topic`` to the end of each partition."""
    consumer = end_reader(bootstrap, "unused", **{"isolation.level": isolation})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions = sorted(meta.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        at_end: set[int] = set()
        out: list[Message] = []
        deadline = time.monotonic() + timeout
        while len(at_end) < len(partitions):
            assert time.monotonic() < deadline, f"{topic}: no end within {timeout}s"
            for m in consumer.consume(5000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(int(m.partition() or 0))
                        continue
                    raise AssertionError(str(err))
                at_end.discard(int(m.partition() or 0))
                out.append(Message.of(m))
        return out
    finally:
        consumer.close()
