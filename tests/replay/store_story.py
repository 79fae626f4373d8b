"""The reference domain's orders as technical records: a generated story, produced, translated.

A deterministic story of ``store.orders`` rows (placed, paid, shipped, delivered or
cancelled, a few deleted), encoded as Debezium Avro envelopes with the project's
own encoder and registered schemas, produced keyed to a technical topic
``<server>.store.orders``. ``live_translate`` plays the live worker: the translation
core (``Pipeline``) with a pinned version, produced to the contracts' topics.
"""

from __future__ import annotations

import random
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.contracts.envelope import ChangeEvent, PgPosition, Source, Tombstone
from bizevents.contracts.technical import AutoDecoder
from bizevents.translators.pipeline import Pipeline, SourceRecord
from tests.kafka import create_topic as create_topic
from tests.store_technical import registered_orders_encoder

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@dataclass
class Story:
    """The changes of the orders table in commit order, and the table they leave."""

    server: str
    changes: list[ChangeEvent | Tombstone] = field(default_factory=list)
    table: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def topic(self) -> str:
        return f"{self.server}.store.orders"


def story(server: str, orders: int, seed: int = 11, deletes: int = 0) -> Story:
    """``orders`` orders moving through their lifecycle, interleaved; ``deletes`` removed."""
    rng = random.Random(seed)
    result = Story(server)
    lsn = 0x1000000
    tx = 700
    source = Source(
        connector="postgresql", name=server, db="shop", schema="store", table="orders", ts_ms=0
    )

    def emit(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        nonlocal lsn, tx
        lsn += 64
        tx += 1
        row = after or before
        assert row is not None
        src = Source(
            **{
                **_fields(source),
                "ts_ms": 1_700_000_000_000 + tx,
                "position": PgPosition(lsn=lsn, tx_id=tx),
            }
        )
        result.changes.append(
            ChangeEvent(
                op=op,  # type: ignore[arg-type]
                source=src,
                before=before,
                after=after,
                key={"id": row["id"]},
                ts_ms=src.ts_ms,
            )
        )

    live: dict[int, dict[str, Any]] = {}
    next_id = 1
    moment = T0
    while next_id <= orders or live:
        moment += timedelta(seconds=1)
        if next_id <= orders and (not live or rng.random() < 0.45):
            row = {
                "id": next_id,
                "customer_id": rng.randrange(1, 50),
                "status": "pending",
                "total": Decimal(rng.randrange(100, 100_000)) / 100,
                "currency": "EUR",
                "placed_at": moment,
                "shipped_at": None,
                "tracking_number": None,
                "updated_at": moment,
            }
            live[next_id] = row
            next_id += 1
            emit("c", None, row)
            continue
        order_id = rng.choice(sorted(live))
        old = live[order_id]
        status = old["status"]
        if status in ("delivered", "cancelled"):
            result.table[order_id] = live.pop(order_id)
            continue
        if rng.random() < 0.12:
            new_status = "cancelled"
        else:
            new_status = {"pending": "paid", "paid": "shipped", "shipped": "delivered"}[status]
        new = {**old, "status": new_status, "updated_at": moment}
        if new_status == "shipped":
            new["shipped_at"] = moment
            new["tracking_number"] = f"TRK{order_id:06d}"
        live[order_id] = new
        emit("u", old, new)
        if rng.random() < 0.3:  # some orders stop moving early
            result.table[order_id] = live.pop(order_id)
    for order_id in rng.sample(sorted(result.table), deletes):
        row = result.table.pop(order_id)
        emit("d", row, None)
        result.changes.append(Tombstone(key={"id": order_id}))
    return result


def _fields(source: Source) -> dict[str, Any]:
    return {name: getattr(source, name) for name in source.__dataclass_fields__}


def replay_command(topic: str, *args: str, translator: str = "orders@2") -> list[str]:
    """``bizevents replay`` of ``topic`` through ``translator``, as a process runs it."""
    return [
        sys.executable,
        "-m",
        "bizevents",
        "replay",
        "--topics",
        topic,
        "--translator",
        translator,
        *args,
    ]


def produce_story(bootstrap: str, registry_url: str, made: Story, partitions: int = 3) -> int:
    """Produce the story's envelopes to its technical topic; returns how many records."""
    create_topic(bootstrap, made.topic, partitions)
    encoder = registered_orders_encoder(made.server, SchemaRegistryClient({"url": registry_url}))
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    for event in made.changes:
        key, value = encoder.encode(event)
        producer.produce(made.topic, value, key, partition=zlib.crc32(key or b"") % partitions)
    assert producer.flush(60) == 0
    return len(made.changes)


def read_all(bootstrap: str, topic: str, timeout: float = 20.0) -> Iterator[Any]:
    """Every record of ``topic`` (assign mode, all partitions, up to Fetch's end)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = admin.list_topics(timeout=10).topics[topic].partitions
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "replay-tests",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    pending = set(partitions)
    import time

    deadline = time.monotonic() + timeout
    try:
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(message.partition())
                        continue
                    raise RuntimeError(str(error))
                yield message
        assert not pending, f"no end of {topic} partitions {pending}"
    finally:
        consumer.close()


def source_records(bootstrap: str, topic: str) -> list[SourceRecord]:
    return [
        SourceRecord(m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.headers() or [])
        for m in read_all(bootstrap, topic)
    ]


def live_translate(bootstrap: str, registry_url: str, topic: str, translator_ref: str) -> int:
    """The live path in miniature: Pipeline(translator, replay=False), produced like the worker."""
    from bizevents.contracts.serde import BusinessSerializer
    from bizevents.translators.registry import discover

    client = SchemaRegistryClient({"url": registry_url})
    lookups: dict[int, str] = {}

    def schema_for_id(schema_id: int) -> str:
        if schema_id not in lookups:
            lookups[schema_id] = client.get_schema(schema_id).schema_str or ""
        return lookups[schema_id]

    pipeline = Pipeline(
        [discover().resolve(translator_ref)], AutoDecoder(schema_for_id), BusinessSerializer(client)
    )
    result = pipeline.process(source_records(bootstrap, topic))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = sorted({r.topic for r in result.records})
    existing = admin.list_topics(timeout=10).topics
    for t in topics:
        if t not in existing:
            try:
                create_topic(bootstrap, t, 4)
            except Exception as exc:  # another test was first
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
    counts = {t: len(admin.list_topics(timeout=10).topics[t].partitions) for t in topics}
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for record in result.records:
        producer.produce(
            record.topic,
            record.value,
            record.key,
            headers=list(record.headers),
            partition=zlib.crc32(record.key or b"") % counts[record.topic],
        )
    assert producer.flush(60) == 0
    return len(result.records)


def expected_events(
    bootstrap: str, registry_url: str, topic: str, translator_ref: str = "orders@2"
) -> dict[str, str]:
    """``event id -> contract topic`` of what a replay of ``topic`` must emit (no dead letters)."""
    from bizevents.translators.registry import discover

    client = SchemaRegistryClient({"url": registry_url})
    pipeline = Pipeline(
        [discover().resolve(translator_ref)],
        AutoDecoder(lambda i: client.get_schema(i).schema_str),
        lambda event, topic=None, lineage=None: b"",
        replay=True,
    )
    result = pipeline.process(source_records(bootstrap, topic))
    return {r.event_id: r.topic for r in result.records if not r.dead_letter}
