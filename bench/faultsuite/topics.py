"""Reading the topics back: every record, end offsets, a group's commits, contents."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from tests.kafka import Message, end_reader

#: a record read back
Rec = Message


def read_topics(
    bootstrap: str,
    topics: Iterable[str],
    timeout: float = 120,
    isolation: str = "read_committed",
) -> list[Rec]:
    """Every record of ``topics`` to the end of each partition (assign mode, no group);
    ``read_uncommitted`` reads aborted and open transactions' records too."""
    from confluent_kafka import KafkaError, TopicPartition

    consumer = end_reader(
        bootstrap, "faults-reader", **{"fetch.wait.max.ms": 10, "isolation.level": isolation}
    )
    try:
        found = consumer.list_topics(timeout=30).topics  # all: by name would create it
        assignment = [
            TopicPartition(t, p, 0) for t in topics if t in found for p in found[t].partitions
        ]
        if not assignment:
            return []
        consumer.assign(assignment)
        pending = {(tp.topic, tp.partition) for tp in assignment}
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no end of {sorted(pending)} within {timeout:.0f} s")
            for m in consumer.consume(5000, timeout=1):
                err = m.error()
                where = (str(m.topic()), int(m.partition() or 0))
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(where)
                        continue
                    raise RuntimeError(str(err))
                pending.add(where)
                out.append(Message.of(m))
        return out
    finally:
        consumer.close()


def end_offsets(records: Iterable[Rec]) -> dict[tuple[str, int], int]:
    ends: dict[tuple[str, int], int] = {}
    for r in records:
        ends[(r.topic, r.partition)] = max(ends.get((r.topic, r.partition), 0), r.offset + 1)
    return ends


def committed(bootstrap: str, group: str, ends: dict[tuple[str, int], int]) -> dict[Any, int]:
    """The group's committed offsets of the partitions in ``ends`` (no join: a fetch)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        got = consumer.committed([TopicPartition(t, p) for t, p in ends], timeout=20)
        return {(tp.topic, tp.partition): tp.offset for tp in got}
    finally:
        consumer.close()


def schema_lookup(url: str) -> Callable[[int], str]:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": url})
    cache: dict[int, str] = {}

    def lookup(schema_id: int) -> str:
        if schema_id not in cache:
            text = client.get_schema(schema_id).schema_str
            if text is None:
                raise RuntimeError(f"schema {schema_id} has no text in the registry")
            cache[schema_id] = text
        return cache[schema_id]

    return lookup


def content_of(value: bytes | None, schema_text: Callable[[int], str]) -> Any:
    """A business event's content without its lineage (which names the source offset)."""
    import io

    import fastavro

    if value is None or len(value) < 5:
        return value
    schema = fastavro.parse_schema(json.loads(schema_text(int.from_bytes(value[1:5], "big"))))
    data = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema, None)
    if isinstance(data, dict):
        data.pop("lineage", None)
    return data
