"""The shared Kafka and registry plumbing, with fakes of the clients (pure code)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from confluent_kafka.schema_registry.error import SchemaRegistryError

from bizevents.plumbing import parkingio
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import partition_for, produce
from bizevents.plumbing.registry import RegistryUnavailableError, schema_lookup


class _FullThenFree:
    """A producer whose queue is full for the first ``full`` attempts."""

    def __init__(self, full: int) -> None:
        self.full = full
        self.sent: list[tuple[Any, ...]] = []
        self.polls = 0

    def produce(self, topic: str, value: Any, key: Any, **kwargs: Any) -> None:
        if self.full:
            self.full -= 1
            raise BufferError("queue full")
        self.sent.append((topic, value, key, kwargs))

    def poll(self, _timeout: float) -> int:
        self.polls += 1
        return 0


def test_produce_waits_out_a_full_queue() -> None:
    """BufferError is back-pressure: poll, then try again; the record goes once."""
    producer = _FullThenFree(full=3)
    produce(producer, "t", b"v", b"k", partition=2, headers=[("h", b"1")])
    assert producer.polls == 3
    assert producer.sent == [
        ("t", b"v", b"k", {"partition": 2, "headers": [("h", b"1")], "on_delivery": None})
    ]


def test_produce_without_a_partition_leaves_it_to_the_client() -> None:
    producer = _FullThenFree(full=0)
    produce(producer, "t", None, b"k")
    assert "partition" not in producer.sent[0][3]


@pytest.mark.parametrize("key", [b"", b"order-1", bytes(range(256))])
def test_partition_rule_is_crc32_modulo(key: bytes) -> None:
    """librdkafka's consistent partitioner, which live and replay both use."""
    import zlib

    assert partition_for(key, 7) == zlib.crc32(key) % 7
    assert partition_for(None, 7) == 0


class _Registry:
    def __init__(self, failure: Exception | None = None) -> None:
        self.calls = 0
        self.failure = failure

    def get_schema(self, schema_id: int) -> Any:
        self.calls += 1
        if self.failure is not None:
            raise self.failure

        class _Schema:
            schema_str = f'"schema {schema_id}"'

        return _Schema()


def test_schema_lookup_caches() -> None:
    client = _Registry()
    lookup = schema_lookup(client)
    assert lookup(5) == lookup(5) == '"schema 5"'
    assert client.calls == 1


def test_an_unknown_id_is_a_bad_record_not_an_outage() -> None:
    lookup = schema_lookup(_Registry(SchemaRegistryError(404, 40403, "Schema not found")))
    with pytest.raises(KeyError):
        lookup(9)


@pytest.mark.parametrize(
    "failure", [SchemaRegistryError(500, 50001, "boom"), ConnectionError("refused")]
)
def test_other_failures_are_the_registry_unavailable(failure: Exception) -> None:
    with pytest.raises(RegistryUnavailableError, match="schema id 9"):
        schema_lookup(_Registry(failure))(9)


def test_a_restore_of_the_parked_keys_waits_for_a_broker_that_does_not_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parked topic read at an assignment is tried again while the broker does not
    answer (a pause longer than the read waits), not raised: raised, it ended the row
    worker and the consumer kit (the fault suite's 30 s broker pause)."""
    calls: list[str] = []

    def read_to_end(conf: dict[str, Any], topic: str, partitions: list[int]) -> list[Any]:
        calls.append(topic)
        if len(calls) < 3:
            raise TransientError(f"{topic} did not answer within 30 s")
        return ["record"]

    monkeypatch.setattr(parkingio, "read_to_end", read_to_end)
    assert asyncio.run(parkingio.read_parked({}, "app.parked", pause_s=0)) == ["record"]
    assert calls == ["app.parked"] * 3


def test_a_restore_that_fails_otherwise_is_not_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a broker that does not answer is waited for; another failure is raised."""

    def read_to_end(conf: dict[str, Any], topic: str, partitions: list[int]) -> list[Any]:
        raise ValueError("a parked record that does not decode")

    monkeypatch.setattr(parkingio, "read_to_end", read_to_end)
    with pytest.raises(ValueError):
        asyncio.run(parkingio.read_parked({}, "app.parked", pause_s=0))
