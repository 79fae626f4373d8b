"""The one producer path of both workers: records appended to one aiokafka batch per
topic and partition, in order, and sent; their acknowledgements are futures.

Appending whole batches (aiokafka's ``create_batch`` and ``send_batch``) skips the
per-record ``send`` and its future: the row worker's block and the transaction worker's
turn each send a few batches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from bizevents.plumbing.errors import ConfigError

__all__ = ["Send", "send_batches"]

#: A record to send: (topic, partition, key, value, headers).
Send = tuple[str, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]


async def send_batches(
    producer: Any, items: Iterable[Send], limit: str
) -> list[asyncio.Future[Any]]:
    """``items`` appended to one batch per topic and partition of ``producer``, in order
    (a full batch is sent and a new one begun); the futures of the broker's
    acknowledgements. A record larger than an empty batch is a :class:`ConfigError`
    naming ``limit``, the setting that bounds a batch."""
    builders: dict[tuple[str, int], Any] = {}
    futures: list[asyncio.Future[Any]] = []
    for topic, partition, key, value, headers in items:
        slot = (topic, partition)
        batch = builders.get(slot)
        if batch is None:
            batch = builders[slot] = producer.create_batch()
        if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
            futures.append(await producer.send_batch(batch, topic, partition=partition))
            batch = builders[slot] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                raise ConfigError(f"a record for {topic} is larger than {limit}")
    for (topic, partition), batch in builders.items():
        futures.append(await producer.send_batch(batch, topic, partition=partition))
    return futures
