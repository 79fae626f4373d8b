"""``read_latest`` tells a cluster that did not answer from a topic that does not exist,
and reads again when a partition's leader moves (a Kafka node lost or restarting)
instead of failing the start-up that called it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException

from bizevents.devstack import Endpoints
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import read_latest


class _Partition:
    error = None

    def __init__(self) -> None:
        self.partitions = {0: None}


class _Metadata:
    def __init__(self, topic: str) -> None:
        self.topics = {topic: _Partition()}


class _End:
    """The fetch's end-of-partition event at offset 1."""

    def error(self) -> KafkaError:
        return KafkaError(KafkaError._PARTITION_EOF)

    def offset(self) -> int:
        return 1


class _Record:
    def error(self) -> None:
        return None

    def offset(self) -> int:
        return 0

    def key(self) -> bytes:
        return b"key"

    def value(self) -> bytes:
        return b"value"


class _Consumer:
    """A one-record partition whose first watermark request meets a moved leader."""

    moved = 1
    error = KafkaError.NOT_LEADER_FOR_PARTITION
    silent = 0  # fetches that answer nothing

    def __init__(self, conf: dict[str, Any]) -> None:
        self.polled: list[Any] = [_Record(), _End()]

    def list_topics(self, topic: str, timeout: float) -> _Metadata:
        return _Metadata(topic)

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        if _Consumer.moved:
            _Consumer.moved -= 1
            raise KafkaException(KafkaError(_Consumer.error))
        return 0, 1

    def assign(self, tps: list[Any]) -> None:
        pass

    def poll(self, timeout: float) -> Any:
        if _Consumer.silent:
            _Consumer.silent -= 1
            return None
        return self.polled.pop(0) if self.polled else None

    def close(self) -> None:
        pass


def test_a_moved_leader_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confluent_kafka, "Consumer", _Consumer)
    monkeypatch.setattr("bizevents.plumbing.kafka.time.sleep", lambda _s: None)
    assert read_latest({}, "state", "reader") == {b"key": b"value"}
    assert _Consumer.moved == 0


def test_a_listed_topic_its_leader_does_not_know_yet_is_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On three nodes the metadata lists a topic created a moment ago before its
    partition's leader knows it: the worker's start read the promotions then, and
    exited on "unknown topic or partition" (the fault suite, seed 2, 2026-11-29)."""
    monkeypatch.setattr(confluent_kafka, "Consumer", _Consumer)
    monkeypatch.setattr(_Consumer, "error", KafkaError.UNKNOWN_TOPIC_OR_PART)
    monkeypatch.setattr(_Consumer, "moved", 1)
    monkeypatch.setattr("bizevents.plumbing.kafka.time.sleep", lambda _s: None)
    assert read_latest({}, "state", "reader") == {b"key": b"value"}
    assert _Consumer.moved == 0


def test_a_fetch_that_answers_nothing_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node restarting holds the fetch: a transaction worker's start exited on "the
    topic ... did not answer" while the cluster restarted (the fault suite, seed 2)."""
    monkeypatch.setattr(confluent_kafka, "Consumer", _Consumer)
    monkeypatch.setattr(_Consumer, "moved", 0)
    monkeypatch.setattr(_Consumer, "silent", 1)
    monkeypatch.setattr("bizevents.plumbing.kafka.time.sleep", lambda _s: None)
    assert read_latest({}, "state", "reader") == {b"key": b"value"}
    assert _Consumer.silent == 0


def test_a_cluster_restarting_longer_is_read_again_for_wait_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A whole cluster's restart took 102 s in the fault suite: a worker starting meanwhile
    reads the promotions again for its ``broker_wait_s``, past three times ``timeout_s``."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(confluent_kafka, "Consumer", _Consumer)
    monkeypatch.setattr("bizevents.plumbing.kafka.time.sleep", sleep)
    monkeypatch.setattr("bizevents.plumbing.kafka.time.monotonic", lambda: now[0])
    monkeypatch.setattr(_Consumer, "moved", 60)  # a minute of moving leaders
    with pytest.raises(TransientError, match="NOT_LEADER"):
        read_latest({}, "state", "reader", timeout_s=10)  # 30 s
    monkeypatch.setattr(_Consumer, "moved", 60)
    assert read_latest({}, "state", "reader", timeout_s=10, wait_s=180) == {b"key": b"value"}


def test_a_cluster_that_does_not_answer_is_said_so(closed_address: str) -> None:
    with pytest.raises(TransientError, match=f"cluster at {closed_address} did not answer"):
        read_latest({"bootstrap.servers": closed_address}, "anything", "t", timeout_s=2)


def test_a_topic_that_does_not_exist_has_no_keys(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    kafka = {"bootstrap.servers": bizevents_stack.bootstrap_servers}
    assert read_latest(kafka, unique_topic("absent"), "t", timeout_s=10) == {}
