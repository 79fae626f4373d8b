"""The Kafka side of capture: technical topics, schema registration, the producer.

Technical topics are created compacted with the configured partition count; the
dead-letter topic is a log of what failed, not compacted. Schemas are
registered under ``<topic>-key`` and ``<topic>-value`` (Confluent's topic-name
strategy) before the first event that uses them. The producer waits for every
in-sync replica (``acks=all``), is idempotent (so a retry cannot reorder or duplicate
within a partition), retries without a deadline (a broker outage becomes
backpressure, not loss), and partitions by key with Java's murmur2, as a Kafka
Connect producer would; a capture that routes tables by business key names each
technical record's partition itself (:mod:`bizevents.capture.core.routing`).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from bizevents.capture.config import CaptureConfig
from bizevents.capture.exceptions import CaptureError
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import ensure_topics

__all__ = ["SchemaRegistrar", "create_dead_letter_topic", "create_topics", "producer_config"]


def producer_config(kafka: dict[str, Any], config: CaptureConfig) -> dict[str, Any]:
    """librdkafka settings of the capture producer."""
    return {
        **kafka,
        "acks": "all",
        "enable.idempotence": True,
        "message.timeout.ms": 0,  # no deadline: an outage stalls (backpressure), never drops
        "linger.ms": config.linger_ms,
        "batch.num.messages": 10_000,
        "batch.size": 1_000_000,
        "compression.type": config.compression,
        "partitioner": "murmur2_random",
        "queue.buffering.max.messages": max(config.max_in_flight * 2, 100_000),
        "queue.buffering.max.kbytes": 1_048_576,
    }


def create_topics(admin: AdminClient, topics: list[str], config: CaptureConfig) -> dict[str, int]:
    """Create the technical topics that do not exist yet (compacted); each one's
    partition count."""
    return ensure_topics(
        admin,
        topics,
        config.partitions,
        replication_factor=config.replication_factor,
        config={"cleanup.policy": "compact"},
        # an unreachable broker is retried by the run with backoff: give up the wait soon
        timeout_s=15,
    )


def create_dead_letter_topic(admin: AdminClient, config: CaptureConfig) -> None:
    """Create the dead-letter topic if it does not exist yet. Not compacted: a snapshot
    row's dead letter has no key (which a compacted topic refuses), and each of a parked
    key's changes is kept, in order, not only its last. Kept until deleted: a parked
    change waits there for its re-drive."""
    ensure_topics(
        admin,
        [config.dlq_topic],
        config.partitions,
        replication_factor=config.replication_factor,
        config={"cleanup.policy": "delete", "retention.ms": "-1"},
        timeout_s=15,
    )


class Registrable(Protocol):
    """A table codec of any source: its topic and schemas, and where the ids go."""

    @property
    def topic(self) -> str: ...

    def key_schema_json(self) -> str | None: ...

    def value_schema_json(self) -> str: ...

    def set_schema_ids(self, key_id: int | None, value_id: int) -> None: ...


class SchemaRegistrar:
    """Registers each table's key and value schema once per distinct schema."""

    def __init__(self, client: SchemaRegistryClient) -> None:
        self._client = client
        self._ids: dict[tuple[str, str], int] = {}

    def _register(self, subject: str, schema_json: str) -> int:
        cached = self._ids.get((subject, schema_json))
        if cached is not None:
            return cached
        try:
            schema_id = self._client.register_schema(subject, Schema(schema_json, "AVRO"))
        except SchemaRegistryError as exc:
            if exc.http_status_code == 409:
                raise CaptureError(
                    f"the schema registry refused the new schema of {subject} as incompatible "
                    f"with the registered versions: {exc.error_message}"
                ) from exc
            raise TransientError(f"the schema registry failed for {subject}: {exc}") from exc
        except Exception as exc:  # network errors of the registry's HTTP client
            raise TransientError(f"the schema registry is unreachable: {exc}") from exc
        self._ids[(subject, schema_json)] = schema_id
        return schema_id

    def register_schema(self, subject: str, schema_json: str) -> int:
        """Register one schema under ``subject`` (once per distinct schema); its id."""
        return self._register(subject, schema_json)

    def register(self, codec: Registrable) -> None:
        """Register ``codec``'s schemas and give it their ids."""
        key_json = codec.key_schema_json()
        key_id = None if key_json is None else self._register(f"{codec.topic}-key", key_json)
        value_id = self._register(f"{codec.topic}-value", codec.value_schema_json())
        codec.set_schema_ids(key_id, value_id)


def make_producer(conf: dict[str, Any]) -> Producer:
    """The producer (a separate function so tests can see its configuration)."""
    return Producer(conf)


def describe(conf: dict[str, Any]) -> str:
    """The producer's configuration without secrets, for a log line."""
    shown = {k: v for k, v in conf.items() if "password" not in k and "sasl" not in k}
    return json.dumps(shown, default=str, sort_keys=True)
