"""Routing by business key: which technical partition a change goes to, and the topic
where a capture declares its routing.

Pure. A capture that routes a table (``routing`` in its configuration) writes every
record of it to :func:`partition_for` of :func:`routing_key` of the configured
primary-key columns' values, so every change of one business key (an order and its
items) lands in one partition, whatever the row's own key. :func:`routing_key` is the
business key's bytes as the transaction worker computes them, and :func:`partition_for`
is Kafka's default partitioner (Java's murmur2, made positive, modulo the partition
count), so a Java producer keyed by the same bytes agrees.

The capture declares its routing on the compacted topic ``<topic prefix>.routing``
(:func:`routing_topic`): one record per routed table, keyed by the table's name, whose
value is JSON ``{"columns": [...], "partitions": n}``. The transaction worker reads it at
start-up to check its translators' declared keys, and a capture started with another
routing refuses to start.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "TableRouting",
    "decode_routing",
    "encode_routing",
    "long_partition",
    "murmur2",
    "partition_for",
    "python_long_partition",
    "python_murmur2",
    "routing_key",
    "routing_topic",
]

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_MASK: Final = 0xFFFFFFFF


def routing_key(values: Sequence[object]) -> bytes:
    """The business key's bytes: ``b"%d"`` for one int, else the values' compact JSON."""
    if len(values) == 1 and type(values[0]) is int:
        return b"%d" % values[0]  # the usual key, without the JSON encoder
    return json.dumps(list(values), default=str, separators=(",", ":")).encode()


def python_murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``: a signed 32-bit int, as Java returns it
    (the reference of ``_routing.c``'s)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length - length % 4
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length - end
    if rest:
        if rest == 3:
            h ^= data[end + 2] << 16
        if rest >= 2:
            h ^= data[end + 1] << 8
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def python_long_partition(key: bytes, offset: int, skip: int, partitions: int) -> int:
    """:func:`partition_for` of :func:`routing_key` of the Avro long found in ``key``
    after ``offset`` bytes and ``skip`` other longs (a key routed by one integer column,
    read without decoding the key); a :class:`ValueError` for a varint cut short or
    longer than 64 bits (the reference of ``_routing.c``'s)."""
    if offset < 0 or skip < 0 or not 1 <= partitions < 2**31:
        raise ValueError("offset and skip >= 0, 1 <= partitions < 2**31")
    pos = offset
    value = 0
    for _ in range(skip + 1):
        u = 0
        shift = 0
        while True:
            if shift > 63:
                raise ValueError("a varint longer than 64 bits")
            if pos >= len(key):
                raise ValueError("a varint cut short")
            b = key[pos]
            pos += 1
            if shift == 63 and b & 0x7E:
                raise ValueError("a varint longer than 64 bits")
            u |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
        value = (u >> 1) ^ -(u & 1)
    return partition_for(b"%d" % value, partitions)


try:
    from bizevents.contracts.technical import _routing  # type: ignore[attr-defined]
except ImportError:  # not built (scripts/setup builds it): the Python, slower
    _routing = None

#: Kafka's ``Utils.murmur2`` (:func:`python_murmur2`, compiled where built).
murmur2: Callable[[bytes], int] = python_murmur2 if _routing is None else _routing.murmur2
#: :func:`python_long_partition`, compiled where built.
long_partition: Callable[[bytes, int, int, int], int] = (
    python_long_partition if _routing is None else _routing.long_partition
)


def partition_for(key: bytes, partitions: int) -> int:
    """Kafka's default partition of ``key`` among ``partitions``: murmur2, positive, modulo."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def routing_topic(prefix: str) -> str:
    """The compacted topic where a capture of topic prefix ``prefix`` declares its routing."""
    return f"{prefix}.routing"


@dataclass(frozen=True, slots=True)
class TableRouting:
    """One table's routing: the primary-key columns it is routed by and the technical
    topic's partition count."""

    table: str
    columns: tuple[str, ...]
    partitions: int

    def describe(self) -> str:
        """The routing in words, for a sentence."""
        return f"by {', '.join(self.columns)} over {self.partitions} partitions"


def encode_routing(routing: TableRouting) -> tuple[bytes, bytes]:
    """The routing topic's key and value for ``routing``."""
    value = {"columns": list(routing.columns), "partitions": routing.partitions}
    return routing.table.encode(), json.dumps(value, separators=(",", ":")).encode()


def decode_routing(key: bytes | None, value: bytes | None) -> TableRouting | None:
    """The routing a record of the routing topic declares (``None`` for a tombstone);
    a :class:`ValueError` saying what is wrong with it."""
    if not key:
        raise ValueError("a routing record has no key (the table's name)")
    table = key.decode("utf-8", errors="replace")
    if value is None:
        return None
    try:
        data = json.loads(value)
    except ValueError as exc:
        raise ValueError(f"the routing of {table} is not JSON: {exc}") from exc
    columns = data.get("columns") if isinstance(data, dict) else None
    partitions = data.get("partitions") if isinstance(data, dict) else None
    if (
        not isinstance(columns, list)
        or not columns
        or not all(isinstance(c, str) and c for c in columns)
    ):
        raise ValueError(f"the routing of {table} needs columns, a non-empty list of names")
    if type(partitions) is not int or partitions < 1:
        raise ValueError(f"the routing of {table} needs partitions, a positive integer")
    return TableRouting(table, tuple(columns), partitions)
