"""The transaction worker's checkpoints: what each virtual partition's owner records in
the state topic (where to read again, what was released), how they are read back at
a rebuild, and where a partition never checkpointed starts."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Final

import structlog

from bizevents.plumbing.errors import TransientError
from bizevents.translators.assembly import Checkpoint, commit_position

__all__ = ["POINT", "TP", "Point", "Progress", "read_checkpoints", "start_offsets"]

log = structlog.get_logger("transactions")

#: A technical partition, as the checkpoints name it.
TP = tuple[str, int]

#: The state topic's key of a virtual partition's checkpoint: ``assembly:<n>``.
POINT: Final = b"assembly:"


@dataclass(frozen=True, slots=True)
class Point:
    """A virtual partition's checkpoint: where to read again, and what was released."""

    offsets: dict[TP, int] = field(default_factory=dict)
    released: Checkpoint = field(default_factory=Checkpoint)
    ids: frozenset[str] = frozenset()

    def encode(self) -> bytes:
        others = [i for i in self.released.released if commit_position(i) is None]
        return json.dumps(
            {
                "offsets": [[t, p, o] for (t, p), o in sorted(self.offsets.items())],
                "position": self.released.position,
                # PostgreSQL ids are covered by the position; only other ids are listed
                "released": others,
            }
        ).encode()

    @staticmethod
    def decode(value: bytes) -> Point:
        data = json.loads(value)
        offsets = {(str(t), int(p)): int(o) for t, p, o in data.get("offsets", ())}
        ids = tuple(str(i) for i in data.get("released", ()))
        return Point(offsets, Checkpoint(data.get("position"), ids), frozenset(ids))

    def has(self, tx_id: str | None) -> bool:
        """Whether the transaction ``tx_id`` was released before this checkpoint."""
        if tx_id is None:
            return False
        position, done = commit_position(tx_id), self.released.position
        if position is not None:
            return done is not None and position <= done
        return tx_id in self.ids


class Progress:
    """Where a member has read since its last rebuild: arrival sequence numbers (the
    assembler's offsets), and per technical partition the (sequence, offset) of the
    records read since the oldest open transaction's first part, and the next offset
    to read: where to read again after a restart."""

    def __init__(self, offsets: dict[TP, int], seq: int = 0) -> None:
        self.seq = seq
        self.seen: dict[TP, deque[tuple[int, int]]] = {tp: deque() for tp in offsets}
        self.next = dict(offsets)

    def arrived(self, tp: TP, offset: int) -> int:
        """The record at ``offset`` of ``tp`` was read: its arrival sequence number."""
        self.seq += 1
        self.seen[tp].append((self.seq, offset))
        return self.seq

    def offsets(self, first: int) -> dict[TP, int]:
        """Per technical partition, the first record read at arrival ``first`` or later
        (the oldest open transaction's first part), else the next to read."""
        offsets: dict[TP, int] = {}
        for tp, seen in self.seen.items():
            while seen and seen[0][0] < first:
                seen.popleft()
            offsets[tp] = seen[0][1] if seen else self.next[tp]
        return offsets


def start_offsets(conf: dict[str, Any], group: str, read: Sequence[TP]) -> dict[TP, int]:
    """Where a virtual partition never checkpointed starts: the committed offsets of
    the group ``<group_id>.start`` (nobody joins it), else each partition's start."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **conf,
            "group.id": group,
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        found = consumer.committed([TopicPartition(t, p) for t, p in read], 30)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): max(tp.offset, 0) for tp in found}


async def read_checkpoints(
    conf: dict[str, Any], topic: str, exactly_once: bool, timeout_s: float
) -> dict[int, Point]:
    """The last checkpoint of each virtual partition in the state ``topic``, read to its
    end (``read_committed`` under exactly once, to the end as first seen: every
    transaction open then ended); nothing coming for ``timeout_s`` is a
    :class:`TransientError`."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    consumer = AIOKafkaConsumer(
        **conf,
        enable_auto_commit=False,
        group_id=None,
        # exactly once: only checkpoints whose outputs were committed with them
        isolation_level="read_committed" if exactly_once else "read_uncommitted",
    )
    await consumer.start()
    last: dict[bytes, bytes] = {}
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        moved = time.monotonic()
        end: int | None = None
        while True:
            batch = await consumer.getmany(tp, timeout_ms=500, max_records=10_000)
            for record in batch.get(tp, []):
                moved = time.monotonic()
                if record.value:
                    last[record.key or b""] = record.value
            high = consumer.highwater(tp)
            if exactly_once and high is not None:
                # the end as first seen, past any transaction open then (another
                # partition's, whose commit a node's restart held up): read_committed
                # stops at its first record until it ends, and a checkpoint read before
                # a later committed one would publish that one's events again
                end = high = high if end is None else end
            position = await consumer.position(tp)
            if high is not None and position >= high:
                break
            if time.monotonic() - moved > timeout_s:
                # a rebuild that waits for ever holds the member's partitions for ever
                raise TransientError(
                    f"the state topic {tp.topic} was not read to its end: nothing "
                    f"came for {timeout_s:g} s at offset {position} "
                    f"(end {high})"
                )
    finally:
        with suppress(Exception):
            await consumer.stop()
    out = {}
    for key, value in last.items():
        if key.startswith(POINT):
            with suppress(ValueError):
                out[int(key[len(POINT) :])] = Point.decode(value)
    log.info(
        "checkpoints read",
        end=position,
        positions={v: p.released.position for v, p in sorted(out.items())},
    )
    return out
