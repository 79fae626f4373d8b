"""``ensure_topics`` asks again when CreateTopics times out (a cluster that lost the node
its metadata named as controller) and still refuses what the cluster refuses."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from bizevents.plumbing.kafka import TopicCreationError, ensure_topics


class _Topic:
    def __init__(self) -> None:
        self.partitions = {0: None}


class _Metadata:
    def __init__(self, names: set[str]) -> None:
        self.topics = {name: _Topic() for name in names}


class _Admin:
    """The two calls ensure_topics makes, answered from a script of create errors."""

    def __init__(self, errors: list[int | None]) -> None:
        self.errors = errors
        self.created: set[str] = set()
        self.attempts = 0

    def list_topics(self, timeout: float) -> _Metadata:
        return _Metadata(self.created)

    def create_topics(self, topics: list[Any], request_timeout: float) -> dict[str, Future[None]]:
        self.attempts += 1
        code = self.errors.pop(0) if self.errors else None
        out: dict[str, Future[None]] = {}
        for topic in topics:
            future: Future[None] = Future()
            if code is None:
                self.created.add(topic.topic)
                future.set_result(None)
            else:
                future.set_exception(KafkaException(KafkaError(code)))
            out[topic.topic] = future
        return out


def test_a_timed_out_creation_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bizevents.plumbing.kafka.time.sleep", lambda _s: None)
    admin = _Admin([KafkaError._TIMED_OUT, KafkaError.NOT_CONTROLLER])
    assert ensure_topics(admin, ["t"], 1) == {"t": 1}
    assert admin.attempts == 3


def test_a_refusal_is_not_asked_again() -> None:
    admin = _Admin([KafkaError.INVALID_REPLICATION_FACTOR])
    with pytest.raises(TopicCreationError, match="refused to create t"):
        ensure_topics(admin, ["t"], 1)
    assert admin.attempts == 1
