"""``bizevents read``: a topic's records as JSON lines, to look at what a stack holds.

Confluent-framed keys and values are read with their writer schemas from the registry
(business events and technical changes alike); other bytes print as text. It reads every
partition from its first offset, without a consumer group (nothing is committed), and
stops after ``--count`` records or when nothing new came for ``--timeout`` seconds.
"""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Callable
from typing import Any

import click

from bizevents.cli.kit import at_least, fails_cleanly, json_text, settings_of


def decoder(schema_for_id: Callable[[int], str]) -> Callable[[bytes | None], Any]:
    """Bytes to a JSON-able value: Avro with its writer schema when framed, else text."""
    import fastavro

    from bizevents.plumbing.framing import FramingError, unframe

    parsed: dict[int, Any] = {}

    def decode(data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            schema_id, body = unframe(data)
        except FramingError:
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError:
                return {"base64": base64.b64encode(data).decode("ascii")}
        if schema_id not in parsed:
            try:
                text = schema_for_id(schema_id)
            except KeyError:  # not this registry's: show the bytes rather than stop
                return {"schema_id": schema_id, "base64": base64.b64encode(body).decode("ascii")}
            parsed[schema_id] = fastavro.parse_schema(json.loads(text))
        return fastavro.schemaless_reader(io.BytesIO(bytes(body)), parsed[schema_id], None)

    return decode


def _partitions(consumer: Any, topic: str, timeout: float, servers: str) -> list[int]:
    """The topic's partitions, once it exists: it is waited for up to ``timeout`` seconds
    (a worker or a capture that was just started creates it)."""
    from bizevents.plumbing.errors import ConfigError, TransientError

    deadline = time.monotonic() + timeout
    while True:
        try:
            found = consumer.list_topics(topic, timeout=15).topics.get(topic)
        except Exception as exc:
            raise TransientError(f"cannot reach the broker {servers}: {exc}") from exc
        if found is not None and found.error is None and found.partitions:
            return sorted(found.partitions)
        if time.monotonic() >= deadline:
            raise ConfigError(f"there is no topic {topic} on {servers} (waited {timeout:g} s)")
        time.sleep(0.5)


def _headers(headers: Any) -> dict[str, str | None]:
    """Header values as text (lineage headers are text)."""
    return {
        str(name): value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        for name, value in (headers or [])
    }


@click.command()
@click.argument("topic")
@click.option("--count", type=click.IntRange(min=1), help="Stop after this many records.")
@at_least("--timeout", low=0, default=5.0, help="Stop when no record came for this many seconds.")
@click.pass_context
@fails_cleanly
def read(ctx: click.Context, topic: str, count: int | None, timeout: float) -> None:
    """Print TOPIC's records, one JSON object a line: partition, offset, key, value, headers."""
    from confluent_kafka import Consumer, TopicPartition

    from bizevents.plumbing.registry import registry_client, schema_lookup

    settings = settings_of(ctx)
    consumer = Consumer(
        {
            **settings.kafka.librdkafka(),
            "group.id": "bizevents-read",  # required by the client; never joined nor committed
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        partitions = _partitions(consumer, topic, timeout, settings.kafka.bootstrap_servers)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        decode = decoder(schema_lookup(registry_client(settings.registry)))
        seen = 0
        deadline = time.monotonic() + timeout
        while count is None or seen < count:
            left = deadline - time.monotonic()
            message = consumer.poll(max(left, 0.0)) if left > 0 else None
            if message is None:
                break
            if message.error() is not None:
                continue  # end of partition and the like: keep waiting until the timeout
            record = {
                "partition": message.partition(),
                "offset": message.offset(),
                "key": decode(message.key()),
                "value": decode(message.value()),
                "headers": _headers(message.headers()),
            }
            click.echo(json.dumps(record, default=json_text, ensure_ascii=False))
            seen += 1
            deadline = time.monotonic() + timeout
    finally:
        consumer.close()
