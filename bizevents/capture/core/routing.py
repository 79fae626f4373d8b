"""Where each technical record goes when capture routes tables by business key, and the
routing's declaration on ``<topic prefix>.routing``.

Without ``routing`` in the configuration nothing changes: the producer partitions by the
Kafka key (:mod:`bizevents.capture.core.sink`). With it, every write path of both
sources asks :meth:`Router.partition` for a technical record's partition: a routed table's
record goes to :func:`~bizevents.contracts.technical.routing.partition_for` of the
configured primary-key columns' values (read back from the record's key, as the
transaction worker reads them; a table routed by one integer column has that column's
varint read in place, in C: :func:`~bizevents.contracts.technical.routing.long_partition`),
every other table's to Kafka's partition of its key, so that END can count each table's
changes per partition
(:class:`~bizevents.capture.core.transactions.TxBlocks`).

At start :func:`to_declare` compares the configured routing with the declared one: a table
routed otherwise than its topics were written (other columns, another partition count,
routed where it was not or the reverse) refuses the start; changing it is a migration
to a new topic generation, never a reshuffle of the records already written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from bizevents.capture.config import CaptureConfig
from bizevents.capture.exceptions import CaptureError
from bizevents.contracts.technical.avro import AvroDecoder
from bizevents.contracts.technical.routing import (
    TableRouting,
    decode_routing,
    encode_routing,
    long_partition,
    partition_for,
    routing_key,
    routing_topic,
)
from bizevents.contracts.technical.topics import table_topic
from bizevents.plumbing.kafka import ensure_topics, read_latest, send_confirmed, while_restarting

__all__ = ["Router", "check_key_columns", "declare", "to_declare"]

#: The bytes before a framed Avro key's record (magic byte, schema id).
_FRAME: Final = 5
#: How long a topic just made may lack a leader (Kafka elects one within seconds).
_LEADER_WAIT_S: Final = 30.0
#: The reader of the routing topic (nothing is committed).
_GROUP: Final = "bizevents-capture-routing"


@dataclass(frozen=True, slots=True)
class _Route:
    table: str
    #: The routed columns, or ``None``: Kafka's partition of the record's key.
    columns: tuple[str, ...] | None
    partitions: int
    #: For a table routed by one integer column preceded in its key only by integers:
    #: how many longs to skip in the key to read it (:func:`long_partition`); else -1.
    skip: int = -1


class Router:
    """The partition of each technical record; ``routes`` is false (and every answer -1,
    the producer's partitioner) for a capture that routes nothing."""

    def __init__(self, config: CaptureConfig) -> None:
        self.routes = bool(config.routing)
        self._config = config
        #: Partition count of each technical topic (as the broker has it).
        self._counts: dict[str, int] = {}
        self._topics: dict[str, _Route] = {}
        self._key_schemas: dict[int, str] = {}
        self._keys = AvroDecoder(self._key_schemas.get)

    def learn(self, codec: Any, table: str) -> None:
        """A table layout's codec, before its first record: its topic and key schema
        (a routed column outside its key is refused)."""
        if not self.routes:
            return
        columns = self._config.routing.get(table)
        key_json = codec.key_schema_json()
        if columns is not None:
            key_fields = (
                [] if key_json is None else [f["name"] for f in json.loads(key_json)["fields"]]
            )
            check_key_columns(table, columns, key_fields)
        if key_json is not None and codec.key_schema_id is not None:
            self._key_schemas[codec.key_schema_id] = key_json
        topic = codec.topic
        n = self._counts.get(topic, self._config.partitions)
        skip = -1 if columns is None or key_json is None else _integer_skip(key_json, columns)
        self._topics[topic] = _Route(table, columns, n, skip)

    def topics_created(self, counts: Mapping[str, int]) -> None:
        """The partition counts of technical topics, as created or found."""
        self._counts.update(counts)

    def table_of(self, topic: str) -> str | None:
        """The table whose technical topic is ``topic`` (``None`` for any other topic)."""
        route = self._topics.get(topic)
        return None if route is None else route.table

    def partition(self, topic: str, key: bytes | None) -> int:
        """The partition of a record of ``topic`` keyed ``key``; -1: the producer's own
        (a capture that routes nothing, or a topic that is not technical)."""
        route = self._topics.get(topic)
        if route is None:
            return -1
        if route.skip >= 0 and key is not None:
            return long_partition(key, _FRAME, route.skip, route.partitions)
        if route.columns is None or key is None:
            return partition_for(key or b"", route.partitions)
        row = self._keys.decode_key(key)
        return partition_for(routing_key([row[c] for c in route.columns]), route.partitions)


def _integer_skip(key_json: str, columns: tuple[str, ...]) -> int:
    """How many longs precede the one routed column in the key's Avro record, when it and
    they are plain ints or longs (same varint, same ``b"%d"`` as the decoded value); -1
    otherwise (the key is decoded). A date or a time is an int or a long too, but named
    (``connect.name``, ``logicalType``) and decoded to another value: not plain."""
    if len(columns) != 1:
        return -1
    for skip, field in enumerate(json.loads(key_json)["fields"]):
        kind = field["type"]
        if isinstance(kind, dict) and not {"connect.name", "logicalType"} & kind.keys():
            kind = kind["type"]
        if kind not in ("int", "long"):
            return -1
        if field["name"] == columns[0]:
            return skip
    return -1


def check_key_columns(
    table: str, columns: tuple[str, ...], key: list[str] | tuple[str, ...]
) -> None:
    """Refuse routing ``table`` by a column outside its Kafka key (its primary key)."""
    outside = [c for c in columns if c not in key]
    if outside:
        raise CaptureError(
            f"routing of {table} names {', '.join(outside)}, not in its primary key "
            f"({', '.join(key) or 'none'}): route a table by primary-key columns only, so "
            "that a row never changes partition"
        )


def to_declare(
    config: CaptureConfig, kafka: dict[str, Any], counts: Mapping[str, int]
) -> list[TableRouting]:
    """The configured routing checked against the declared one (a sentence naming the
    migration when they differ); what is not declared yet. ``counts``: each technical
    topic's partition count."""
    topic = routing_topic(config.prefix)
    declared: dict[str, TableRouting | None] = {}
    try:
        for key, value in read_latest(kafka, topic, _GROUP).items():
            declared[key.decode("utf-8", "replace")] = decode_routing(key, value)
    except ValueError as exc:
        raise CaptureError(f"the routing topic {topic} holds a bad record: {exc}") from None
    wanted = {
        table: TableRouting(
            table, columns, counts.get(table_topic(config.prefix, table), config.partitions)
        )
        for table, columns in config.routing.items()
    }
    for table in sorted(set(declared) | set(wanted)):
        was, now = declared.get(table), wanted.get(table)
        if was is not None and was != now:
            raise CaptureError(_changed(config, table, was.describe(), _said(now)))
    new = [r for t, r in wanted.items() if declared.get(t) is None]
    written = _written(kafka, [table_topic(config.prefix, r.table) for r in new]) if new else set()
    for routing in new:
        if table_topic(config.prefix, routing.table) in written:
            raise CaptureError(_changed(config, routing.table, "by its Kafka key", _said(routing)))
    return new


def declare(config: CaptureConfig, admin: Any, producer: Any, new: list[TableRouting]) -> None:
    """Write ``new`` to the routing topic and wait until Kafka took it (before any record)."""
    topic = routing_topic(config.prefix)
    compacted = {"cleanup.policy": "compact"}
    rf = config.replication_factor
    ensure_topics(admin, [topic], 1, replication_factor=rf, config=compacted, timeout_s=15)
    send_confirmed(producer, topic, [(*encode_routing(routing), -1) for routing in new])


def _said(routing: TableRouting | None) -> str:
    return "by its Kafka key" if routing is None else routing.describe()


def _changed(config: CaptureConfig, table: str, was: str, now: str) -> str:
    return (
        f"capture {config.server} would route {table} {now}, but its topic "
        f"{table_topic(config.prefix, table)} was written routed {was} (declared on "
        f"{routing_topic(config.prefix)}): a changed routing is a migration to a new topic "
        "generation (a new topic_prefix, captured anew), not a reshuffle in place"
    )


def _written(kafka: dict[str, Any], topics: list[str]) -> set[str]:
    """Those of ``topics`` that already hold records."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka, "group.id": _GROUP, "enable.auto.commit": False})
    try:
        meta = consumer.list_topics(timeout=15).topics
        found = set()
        for topic in topics:
            described = meta.get(topic)
            if described is None:
                continue
            for partition in described.partitions:
                tp = TopicPartition(topic, partition)
                _low, high = while_restarting(
                    f"reading the end of {topic}[{partition}]",
                    partial(consumer.get_watermark_offsets, tp, timeout=15),
                    _LEADER_WAIT_S,
                )
                if high > 0:
                    found.add(topic)
                    break
        return found
    finally:
        consumer.close()
