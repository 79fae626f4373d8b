"""``ensure_topics`` asks again when CreateTopics times out (a cluster that lost the node
its metadata named as controller) or a topic shows no partitions yet (a cluster still
electing its leaders), and still refuses what the cluster refuses."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import TopicCreationError, ensure_topics


class _Topic:
    def __init__(self, partitions: int = 1) -> None:
        self.partitions = dict.fromkeys(range(partitions))


class _Metadata:
    def __init__(self, names: set[str], partitions: int = 1) -> None:
        self.topics = {name: _Topic(partitions) for name in names}


class _Admin:
    """The two calls ensure_topics makes, answered from a script of create errors."""

    def __init__(self, errors: list[int | str | None]) -> None:
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
            elif code == "no answer":
                pass  # the future never completes
            else:
                future.set_exception(KafkaException(KafkaError(code)))
            out[topic.topic] = future
        return out


def test_a_timed_out_creation_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bizevents.plumbing.kafka.time.sleep", lambda _s: None)
    admin = _Admin([KafkaError._TIMED_OUT, KafkaError.NOT_CONTROLLER])
    assert ensure_topics(admin, ["t"], 1) == {"t": 1}
    assert admin.attempts == 3


def test_a_creation_not_answered_in_time_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bizevents.plumbing.kafka.time.sleep", lambda _s: None)
    admin = _Admin(["no answer"])
    assert ensure_topics(admin, ["t"], 1, timeout_s=0.05, wait_s=30) == {"t": 1}
    assert admin.attempts == 2


def test_a_refusal_is_not_asked_again() -> None:
    admin = _Admin([KafkaError.INVALID_REPLICATION_FACTOR])
    with pytest.raises(TopicCreationError, match="refused to create t"):
        ensure_topics(admin, ["t"], 1)
    assert admin.attempts == 1


class _Clock:
    """``time`` for ensure_topics: its sleeps pass at once and move the clock on."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _Electing(_Admin):
    """A cluster that has created the topic and names no partition of it for a while."""

    def __init__(self, clock: _Clock, electing_s: float) -> None:
        super().__init__([])
        self.clock = clock
        self.electing_s = electing_s

    def list_topics(self, timeout: float) -> _Metadata:
        return _Metadata(self.created, 0 if self.clock.now < self.electing_s else 2)


def test_partitions_that_show_late_are_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Longer than one attempt's few seconds, within ``wait_s``: the counts, not an error."""
    clock = _Clock()
    monkeypatch.setattr("bizevents.plumbing.kafka.time", clock)
    admin = _Electing(clock, electing_s=40)
    assert ensure_topics(admin, ["t"], 2, timeout_s=5, wait_s=180) == {"t": 2}
    assert admin.attempts == 1  # created once; only the metadata was asked again


def test_partitions_that_never_show_are_a_transient_error_past_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    monkeypatch.setattr("bizevents.plumbing.kafka.time", clock)
    admin = _Electing(clock, electing_s=float("inf"))
    with pytest.raises(TransientError, match="the topics t have no partitions yet"):
        ensure_topics(admin, ["t"], 2, timeout_s=5, wait_s=60)
    assert 60 <= clock.now < 70
