"""What the signal tests of both sources throw at a running capture: bad signal table
rows and bad signal topic records (random bytes, deep JSON, SQL in a filter), and a
watch on a table's topic that says when a change made after them arrived."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

#: The signal table's column sizes (``signal_table_ddl``): id, type, data.
_SIZES = (42, 32, 2048)


def _text(rnd: random.Random, size: int) -> str:
    """Random text: ASCII, JSON's and SQL's punctuation, and other planes (no NUL,
    which neither database's text takes)."""
    alphabet = "[]{}\"'\\;:,()-/*#%$ \t\nabcXYZ019éß中😀\x01\x7f"
    return "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(size + 1)))


def snapshot_with(table: str, where: str) -> str:
    return json.dumps(
        {
            "data-collections": [table],
            "additional-conditions": [{"data-collection": table, "filter": where}],
        }
    )


def bad_rows(seed: int, table: str, sql_filters: list[str]) -> list[tuple[str, str, str]]:
    """Signal table rows capture must refuse: deep JSON (the issue's 1024-deep array),
    filters that hold SQL, random text in each column."""
    rnd = random.Random(seed)
    rows = [
        ("deep-array", "execute-snapshot", "[" * 1024 + "]" * 1024),
        ("deep-object", "execute-snapshot", '{"a":' * 400 + "1" + "}" * 400),
        ("not-json", "execute-snapshot", '{"data-collections": ['),
    ]
    rows += [
        (f"sql-{i}", "execute-snapshot", snapshot_with(table, w)) for i, w in enumerate(sql_filters)
    ]
    for i in range(6):
        rows.append(
            (
                f"random-{i}",
                rnd.choice(["execute-snapshot", "stop-snapshot", _text(rnd, 20)]),
                _text(rnd, 400),
            )
        )
    return [tuple(v[:size] for v, size in zip(row, _SIZES, strict=True)) for row in rows]  # type: ignore[misc]


def bad_records(seed: int, table: str) -> list[tuple[bytes | None, bytes | None]]:
    """Signal topic records capture must refuse: the issue's 5000-deep array, random
    bytes as key and value, JSON that is not a signal, a signal whose data nests too
    deep or is too large, a filter that holds SQL, an empty record."""
    rnd = random.Random(seed)
    deep_data = json.dumps({"type": "execute-snapshot", "data": "[" * 3000 + "]" * 3000})
    sql = json.dumps(
        {"type": "execute-snapshot", "data": snapshot_with(table, "true); SELECT pg_sleep(30")}
    )
    records: list[tuple[bytes | None, bytes | None]] = [
        (b"deep", b"[" * 5000 + b"]" * 5000),
        (b"deep-data", deep_data.encode()),
        (b"large", json.dumps({"type": "stop-snapshot", "data": "x" * 300_000}).encode()),
        (b"list", b"[1, 2, 3]"),
        (b"sql", sql.encode()),
        (None, None),
        (b"\xff\xfe\x00", b'{"type": "pause-snapshot", "data": "{}"}'),
    ]
    for _ in range(5):
        key = rnd.randbytes(rnd.randrange(64)) if rnd.random() < 0.7 else None
        records.append((key, rnd.randbytes(rnd.randrange(2000))))
    return records


def send_records(
    bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 2_000_000})
    for key, value in records:
        producer.produce(topic, value, key)
    assert producer.flush(30) == 0


class TopicEnd:
    """The number of records in a topic: a change made after a bad signal is on its
    topic once the count grew."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})

    def count(self) -> int:
        meta = self.consumer.list_topics(self.topic, timeout=10).topics[self.topic]
        return sum(
            self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1]
            for p in meta.partitions
        )

    def wait_beyond(self, count: int, alive: Callable[[], Any], timeout: float = 30) -> float:
        """Seconds until the topic holds more than ``count`` records (``alive`` raises
        when capture died)."""
        start = time.monotonic()
        while self.count() <= count:
            alive()
            assert time.monotonic() - start < timeout, f"{self.topic}: no new record"
            time.sleep(0.05)
        return time.monotonic() - start

    def close(self) -> None:
        self.consumer.close()


def wait_until(
    condition: Callable[[], bool], alive: Callable[[], Any], what: str, timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        alive()
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
