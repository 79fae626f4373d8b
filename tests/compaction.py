"""Apache Kafka's log compaction within seconds, for the tests of what reads a compacted
topic (the replay, ``verify``, the consumer kit).

:data:`QUICKLY` makes the cleaner take every rolled segment: a segment rolls 100 ms
after its first record once another arrives, any dirty share is worth a pass, and a
tombstone goes 100 ms after its first pass. Kafka never cleans the active segment, so
:func:`compact` has the test write (its ``roll``) until the records it wants gone are
gone, and returns what is left: the test then knows the offsets really are missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.kafka import end_reader

QUICKLY = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "100",
    "min.compaction.lag.ms": "0",
}


@dataclass(frozen=True)
class Kept:
    """A record the topic still holds."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


def compact_quickly(bootstrap: str, topic: str) -> None:
    """Give an existing topic the :data:`QUICKLY` settings (its others stay)."""
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in QUICKLY.items()
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def kept(bootstrap: str, topic: str, timeout: float = 30) -> list[Kept]:
    """Every record ``topic`` holds now, partition by partition, up to each one's end."""
    consumer = end_reader(bootstrap, "compaction-tests")
    found: list[Kept] = []
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            for p in partitions
        }
        pending = {p for p, (low, high) in ends.items() if high > low}
        consumer.assign([TopicPartition(topic, p, ends[p][0]) for p in pending])
        deadline = time.monotonic() + timeout
        while pending:
            assert time.monotonic() < deadline, f"{topic}: no end of partitions {pending}"
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                p = message.partition() or 0
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, str(error)
                    pending.discard(p)
                    continue
                offset = message.offset() or 0
                if offset < ends[p][1]:
                    found.append(
                        Kept(
                            p,
                            offset,
                            message.key(),
                            message.value(),
                            tuple(message.headers() or ()),
                        )
                    )
                if offset + 1 >= ends[p][1]:
                    pending.discard(p)
    finally:
        consumer.close()
    return found


def missing_offsets(records: list[Kept]) -> int:
    """How many offsets below each partition's last record compaction took out."""
    last: dict[int, int] = {}
    count: dict[int, int] = {}
    for r in records:
        last[r.partition] = max(last.get(r.partition, -1), r.offset)
        count[r.partition] = count.get(r.partition, 0) + 1
    first = {p: min(r.offset for r in records if r.partition == p) for p in last}
    return sum(last[p] - first[p] + 1 - count[p] for p in last)


def compact(
    bootstrap: str,
    topic: str,
    roll: Callable[[], None],
    cleaned: Callable[[list[Kept]], bool],
    timeout: float = 90,
) -> list[Kept]:
    """Roll ``topic``'s segments (``roll`` writes to each of its partitions) until what
    it holds is ``cleaned``; what it holds then."""
    deadline = time.monotonic() + timeout
    while True:
        time.sleep(0.3)  # past segment.ms: the next write rolls the segment
        roll()
        records = kept(bootstrap, topic)
        if cleaned(records):
            return records
        assert time.monotonic() < deadline, (
            f"{topic} not compacted within {timeout} s: {len(records)} records kept, "
            f"{len({(r.partition, r.key) for r in records})} keys, "
            f"{sum(r.value is None for r in records)} tombstones, "
            f"{missing_offsets(records)} offsets missing"
        )
