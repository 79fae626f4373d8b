"""Capture's dead letters (pure, a fake producer): the headers, and a record the broker
refused for good sent again alone, acknowledged if taken, else dead-lettered in its
place; a refused dead letter stops capture. Against the real broker:
tests/capture/test_capture_refused.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import structlog
from confluent_kafka import KafkaError

from bizevents.capture.core.deadletters import dead_letter_headers, dead_letter_refused, send_alone
from bizevents.capture.core.offsets import AckTracker
from bizevents.capture.exceptions import CaptureError
from bizevents.contracts.business import (
    HEADER_DLQ_ERROR,
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    HEADER_SOURCE_TOPIC,
)

_DLQ = "shop.capture.dlq"


class _Message:
    def __init__(self, topic: str, key: bytes | None, value: bytes, partition: int | None) -> None:
        self._topic, self._key, self._value, self._partition = topic, key, value, partition

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes:
        return self._value

    def partition(self) -> int | None:
        return self._partition

    def headers(self) -> list[tuple[str, bytes]]:
        return [("app", b"1")]


class _Producer:
    """Answers each record on the next poll: ``refuse(topic, key)`` says with what."""

    def __init__(self, refuse: Callable[[str, bytes | None], KafkaError | None]) -> None:
        self.refuse = refuse
        self.sent: list[tuple[str, bytes | None, Any, dict[str, Any]]] = []
        self.waiting: list[tuple[Any, KafkaError | None, _Message]] = []
        #: How many records were in flight as each was produced.
        self.beside: list[int] = []

    def produce(self, topic: str, value: Any, key: Any, **kwargs: Any) -> None:
        self.sent.append((topic, key, value, kwargs))
        self.beside.append(len(self.waiting))
        msg = _Message(topic, key, value, kwargs.get("partition"))
        self.waiting.append((kwargs["on_delivery"], self.refuse(topic, key), msg))

    def poll(self, _timeout: float = 0) -> int:
        answered, self.waiting = self.waiting, []
        for ack, err, msg in answered:
            ack(err, msg)
        return len(answered)

    def __len__(self) -> int:
        return len(self.waiting)


def _refused(tracker: AckTracker, topic: str, key: bytes | None) -> Any:
    """One record of a transaction in flight, refused for good in its batch."""
    tx = tracker.begin(1)
    tx.produced(1)
    tx.ack(KafkaError(KafkaError.INVALID_RECORD), _Message(topic, key, b"v", 2))
    assert tracker.refused and tx.pending == 1
    return tx


def _never() -> None:
    pass


def test_dead_letter_headers_are_capture_s_then_the_extra_ones() -> None:
    headers = dead_letter_headers("bad", "ValueError", "shop.public.t", ("x", b"y"))
    assert headers == [
        (HEADER_DLQ_STAGE, b"capture"),
        (HEADER_DLQ_REASON, b"bad"),
        (HEADER_DLQ_ERROR, b"ValueError"),
        (HEADER_SOURCE_TOPIC, b"shop.public.t"),
        ("x", b"y"),
    ]


def test_a_record_taken_alone_is_acknowledged_and_not_dead_lettered() -> None:
    """Refused with its batch, taken alone: its transaction counts it, nothing else
    is written."""
    tracker = AckTracker()
    tx = _refused(tracker, "shop.public.t", b"k")
    producer = _Producer(lambda _t, _k: None)
    dead_letter_refused(producer, tracker, _DLQ, structlog.get_logger(), _never)
    ((topic, key, value, kwargs),) = producer.sent
    assert (topic, key, value, kwargs["partition"]) == ("shop.public.t", b"k", b"v", 2)
    assert tx.pending == 0 and not tracker.refused


def test_a_record_refused_alone_goes_to_the_dead_letter_topic_in_its_place() -> None:
    """Its bytes, its own headers then capture's (the broker's reason and error name),
    acknowledged for its transaction when the dead letter is; said once in the log."""
    tracker = AckTracker()
    tx = _refused(tracker, "shop.public.t", None)
    producer = _Producer(
        lambda topic, _k: None if topic == _DLQ else KafkaError(KafkaError.INVALID_RECORD)
    )
    with structlog.testing.capture_logs() as logs:
        dead_letter_refused(producer, tracker, _DLQ, structlog.get_logger(), _never)
    assert tx.pending == 1  # the dead letter not acknowledged yet
    producer.poll()
    assert tx.pending == 0
    (_, (topic, key, value, kwargs)) = producer.sent
    assert (topic, key, value) == (_DLQ, None, b"v")
    headers = kwargs["headers"]
    assert headers[0] == ("app", b"1")
    assert dict(headers)[HEADER_SOURCE_TOPIC] == b"shop.public.t"
    assert dict(headers)[HEADER_DLQ_ERROR] == KafkaError(KafkaError.INVALID_RECORD).name().encode()
    assert [e["event"] for e in logs] == [
        "Kafka refused a record for good: written to the dead-letter topic"
    ]


def test_a_failure_that_is_not_for_good_fails_the_transaction() -> None:
    """Sent alone, a transient failure: the transaction's failure, no dead letter."""
    tracker = AckTracker()
    _refused(tracker, "shop.public.t", b"k")
    transient = KafkaError(KafkaError._MSG_TIMED_OUT)
    producer = _Producer(lambda _t, _k: transient)
    dead_letter_refused(producer, tracker, _DLQ, structlog.get_logger(), _never)
    assert len(producer.sent) == 1 and tracker.failure is transient


def test_a_refused_dead_letter_stops_capture() -> None:
    tracker = AckTracker()
    _refused(tracker, _DLQ, b"k")
    with pytest.raises(CaptureError, match=f"the dead-letter topic {_DLQ} refused a record"):
        dead_letter_refused(_Producer(lambda _t, _k: None), tracker, _DLQ, None, _never)


def test_send_alone_waits_for_what_is_in_flight_first_and_heeds_a_stop() -> None:
    producer = _Producer(lambda _t, key: KafkaError(KafkaError.INVALID_RECORD) if key else None)
    producer.produce("t", b"earlier", None, on_delivery=lambda *_: None)
    answer = send_alone(producer, _never, "t", b"k", b"v", -1, None)
    assert answer is not None and answer.code() == KafkaError.INVALID_RECORD
    assert [s[2] for s in producer.sent] == [b"earlier", b"v"] and producer.beside == [0, 0]

    class _Stopped(Exception):
        pass

    def stop() -> None:
        raise _Stopped

    producer.produce("t", b"in flight", None, on_delivery=lambda *_: None)
    with pytest.raises(_Stopped):
        send_alone(producer, stop, "t", b"k", b"v", -1, None)
