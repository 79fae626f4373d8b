"""Compaction semantics over an offset range, as Kafka's log cleaner would leave it.

A compacted topic keeps, per key, the latest record; a tombstone (a null value)
removes the key. The broker of the embedded stack never compacts, and a production
topic may not have been cleaned up to the range's end, so ``--compact`` applies
these semantics while reading. The key decides the partition, so compacting each
partition on its own is exact.

Records without a key cannot be compacted (Kafka refuses them on compacted topics);
they all survive here.

:func:`compact` is the plain reference; the replay uses :class:`KeyIndex`, which is
built per slice of a partition, merged across slices on the driver, and then tells
each slice which of its offsets survive.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import TypeVar

from bizevents.translators.records import Keyed

R = TypeVar("R", bound=Keyed)


def compact(records: Sequence[R]) -> list[R]:
    """The reference: a record survives when it is no tombstone and no later record has its key.

    ``records`` are in offset order; the survivors keep that order.
    """
    survivors: list[R] = []
    later_keys: set[bytes] = set()
    for record in reversed(records):
        if record.key is None:
            if record.value is not None:
                survivors.append(record)
            continue
        if record.key in later_keys:
            continue
        later_keys.add(record.key)
        if record.value is not None:
            survivors.append(record)
    survivors.reverse()
    return survivors


def key_digest(key: bytes) -> bytes:
    """16 bytes that stand for a key in the index (keys can be long; offsets must travel)."""
    return hashlib.blake2b(key, digest_size=16).digest()


class KeyIndex:
    """Per key digest, the offset of its latest record and whether that one is a tombstone."""

    __slots__ = ("latest", "unkeyed")

    def __init__(self) -> None:
        self.latest: dict[bytes, int] = {}  # digest -> offset, negative-1-encoded tombstones
        self.unkeyed: list[int] = []

    def add(self, offset: int, key: bytes | None, tombstone: bool) -> None:
        if key is None:
            if not tombstone:
                self.unkeyed.append(offset)
            return
        # offsets arrive in increasing order within a slice; merge() handles the rest
        self.latest[key_digest(key)] = -offset - 1 if tombstone else offset

    def add_all(self, records: Iterable[Keyed]) -> KeyIndex:
        for record in records:
            self.add(record.offset, record.key, record.value is None)
        return self

    def merge(self, other: KeyIndex) -> None:
        """Fold in the index of another slice of the same partition (any order)."""
        mine = self.latest
        for digest, encoded in other.latest.items():
            current = mine.get(digest)
            if current is None or _offset(encoded) > _offset(current):
                mine[digest] = encoded
        self.unkeyed.extend(other.unkeyed)

    def survivors(self) -> list[int]:
        """The offsets that survive compaction, sorted."""
        kept = [encoded for encoded in self.latest.values() if encoded >= 0]
        kept.extend(self.unkeyed)
        kept.sort()
        return kept

    def __getstate__(self) -> tuple[dict[bytes, int], list[int]]:
        return self.latest, self.unkeyed

    def __setstate__(self, state: tuple[dict[bytes, int], list[int]]) -> None:
        self.latest, self.unkeyed = state


def _offset(encoded: int) -> int:
    return encoded if encoded >= 0 else -encoded - 1


def compact_in_memory(records: Sequence[R]) -> list[R]:
    """What a task of a one-slice partition does: index its records, keep the survivors."""
    keep = set(KeyIndex().add_all(records).survivors())
    return [record for record in records if record.offset in keep]
