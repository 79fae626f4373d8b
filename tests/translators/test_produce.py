"""The one producer path (:mod:`bizevents.translators.produce`): records appended to one
batch per topic and partition, in order, a full batch sent and a new one begun."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bizevents.plumbing.errors import ConfigError
from bizevents.translators.produce import Send, send_batches


class _Batch:
    """aiokafka's batch builder as the path uses it: ``append`` returns None when full."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.records: list[bytes | None] = []

    def append(self, *, key: Any, value: bytes | None, timestamp: Any, headers: Any) -> Any:
        if len(self.records) == self.room:
            return None
        self.records.append(value)
        return object()


class _Producer:
    """Batches of ``room`` records; what was sent, by topic and partition, in order."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.sent: list[tuple[str, int, list[bytes | None]]] = []

    def create_batch(self) -> _Batch:
        return _Batch(self.room)

    async def send_batch(self, batch: _Batch, topic: str, *, partition: int) -> Any:
        self.sent.append((topic, partition, batch.records))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def _send(topic: str, partition: int, value: bytes) -> Send:
    return (topic, partition, None, value, [])


def test_one_batch_per_partition_in_order_and_a_full_one_sent_at_once() -> None:
    producer = _Producer(room=2)
    items = [_send("a", 0, b"1"), _send("b", 1, b"x"), _send("a", 0, b"2"), _send("a", 0, b"3")]
    futures = asyncio.run(send_batches(producer, items, "the limit"))
    assert producer.sent == [("a", 0, [b"1", b"2"]), ("a", 0, [b"3"]), ("b", 1, [b"x"])]
    assert len(futures) == 3


def test_a_record_larger_than_an_empty_batch_names_the_limit() -> None:
    with pytest.raises(ConfigError, match=r"a record for a is larger than translate\.max_batch"):
        asyncio.run(send_batches(_Producer(room=0), [_send("a", 0, b"1")], "translate.max_batch"))
