"""Capture's dead letters: their headers, and the records the broker refuses for good (a
keyless record on a compacted topic, one over its size limit). Each of those is sent again
alone, since a broker refuses a whole batch for one record in it, and one refused alone
goes to the dead-letter topic in its place, said once in the log. Sent again as it is, it
would be refused forever and capture would never move on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

from bizevents.capture.core.offsets import REFUSED_FOR_GOOD, AckTracker
from bizevents.capture.exceptions import CaptureError
from bizevents.contracts.business import (
    HEADER_DLQ_ERROR,
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    HEADER_SOURCE_TOPIC,
)
from bizevents.plumbing.kafka import produce

__all__ = ["dead_letter_headers", "dead_letter_refused", "send_alone"]


def dead_letter_headers(
    reason: str, error: str, source_topic: str, *more: tuple[str, bytes]
) -> list[tuple[str, str | bytes | None]]:
    """The headers of a dead letter capture writes (docs/capture-postgres.md), ``more`` after
    them."""
    return [
        (HEADER_DLQ_STAGE, b"capture"),
        (HEADER_DLQ_REASON, reason.encode()),
        (HEADER_DLQ_ERROR, error.encode()),
        (HEADER_SOURCE_TOPIC, source_topic.encode()),
        *more,
    ]


def dead_letter_refused(
    producer: Any, tracker: AckTracker, dlq: str, log: Any, stop_if_asked: Callable[[], None]
) -> None:
    """Each record ``tracker`` holds as refused for good, sent again alone; acknowledged
    when taken, else written to ``dlq``. A refused dead letter ends capture."""
    while tracker.refused:
        tx, err, msg = tracker.refused.popleft()
        topic = msg.topic() or ""
        if topic == dlq:
            raise CaptureError(f"the dead-letter topic {dlq} refused a record: {err.str()}")
        partition = msg.partition()
        answer = send_alone(
            producer,
            stop_if_asked,
            topic,
            msg.key(),
            msg.value(),
            -1 if partition is None else partition,
            msg.headers(),
        )
        if answer is None or answer.code() not in REFUSED_FOR_GOOD:
            tx.ack(answer, msg)
            continue
        log.warning(
            "Kafka refused a record for good: written to the dead-letter topic",
            topic=topic,
            partition=partition,
            reason=answer.str(),
            dead_letter_topic=dlq,
        )
        headers = [*(msg.headers() or []), *dead_letter_headers(answer.str(), answer.name(), topic)]
        produce(producer, dlq, msg.value(), msg.key(), headers=headers, on_delivery=tx.ack)


def send_alone(
    producer: Any,
    stop_if_asked: Callable[[], None],
    topic: str,
    key: bytes | None,
    value: bytes | None,
    partition: int,
    headers: Any,
) -> KafkaError | None:
    """Send one record with nothing else in flight: the broker's answer to it alone."""
    answers: list[KafkaError | None] = []
    while len(producer) > 0:
        stop_if_asked()
        producer.poll(0.1)
    produce(
        producer,
        topic,
        value,
        key,
        partition=partition,
        headers=headers,
        on_delivery=lambda err, _msg: answers.append(err),
    )
    while not answers:
        stop_if_asked()
        producer.poll(0.1)
    return answers[0]
