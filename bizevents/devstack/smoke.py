"""A smoke test of a running stack: Kafka round trip, a schema round trip, a SQL query."""

from __future__ import annotations

import time
import uuid

from bizevents.devstack.processes import StackError
from bizevents.devstack.stack import Endpoints
from bizevents.plumbing.kafka import DeliveryError, send_confirmed

SMOKE_SCHEMA = """
{"type": "record", "name": "Smoke", "namespace": "bizevents.dev",
 "fields": [{"name": "n", "type": "long"}, {"name": "note", "type": "string"}]}
"""


def kafka_round_trip(bootstrap: str, messages: int) -> tuple[int, float]:
    """Produce ``messages`` to a new topic and read them back in assign mode."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = f"bizevents.smoke.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    started = time.perf_counter()
    records = [(str(n).encode(), f"message {n}".encode(), -1) for n in range(messages)]
    try:
        send_confirmed(producer, topic, records)
    except DeliveryError as exc:
        raise StackError(
            f"the broker at {bootstrap} did not acknowledge every smoke message: {exc.reason}"
        ) from None
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bizevents-smoke", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    deadline = time.monotonic() + 30
    try:
        while seen < messages and time.monotonic() < deadline:
            # no more than are left: consume() waits for as many as asked, or the timeout
            for message in consumer.consume(min(1000, messages - seen), timeout=1):
                if message.error() is None and message.value() == f"message {seen}".encode():
                    seen += 1
    finally:
        consumer.close()
    if seen != messages:
        raise StackError(f"read back {seen} of {messages} smoke messages from {topic}")
    return seen, time.perf_counter() - started


def registry_round_trip(url: str) -> int:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": url})
    schema_id = client.register_schema("bizevents.smoke-value", Schema(SMOKE_SCHEMA, "AVRO"))
    fetched = client.get_schema(schema_id)
    if fetched.schema_type not in (None, "AVRO"):
        raise StackError(f"the registry returned schema {schema_id} as {fetched.schema_type}")
    return schema_id


def postgres_query(dsn: str) -> str:
    import psycopg2

    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SHOW wal_level")
        row = cur.fetchone()
    conn.close()
    return str(row[0]) if row else "?"


def run_smoke(endpoints: Endpoints, messages: int) -> list[tuple[str, str]]:
    seen, seconds = kafka_round_trip(endpoints.bootstrap_servers, messages)
    schema_id = registry_round_trip(endpoints.registry_url)
    wal_level = postgres_query(endpoints.postgres_dsn)
    return [
        ("broker", f"{seen} messages produced and read back in {seconds:.2f} s"),
        ("schema registry", f"schema registered as id {schema_id} and read back"),
        ("postgres", f"connected; wal_level={wal_level}"),
    ]
