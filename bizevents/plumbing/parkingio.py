"""The parked topic's reading, shared by every part that parks keys (docs/parking.md).

:mod:`bizevents.plumbing.parking` holds the parked keys as pure state; the parts that
park (the row worker, the consumer kit) and ``bizevents dlq`` read the parked topic and
the dead-letter topic to their ends with :func:`read_to_end`, and fold the re-drive and
discard requests among the parked topic's records with :func:`read_requests`. The
commands (``bizevents dlq``, ``bizevents capture parked | redrive | discard``) read the
parked keys with :func:`parked_keys` and ask for a re-drive or a discard with :func:`ask`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import structlog

from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import send_confirmed
from bizevents.plumbing.parking import ParkedKeys, Request

__all__ = ["REQUEST_PREFIX", "ask", "parked_keys", "read_parked", "read_requests", "read_to_end"]

log = structlog.get_logger("parking")

REQUEST_PREFIX = b"request|"


async def read_parked(conf: dict[str, Any], topic: str, pause_s: float = 1.0) -> list[Any]:
    """The parked topic ``topic`` read to its end (:func:`read_to_end`) for a restore at
    an assignment, tried again every ``pause_s`` while the broker does not answer
    (paused, restarting): the assignment's records wait for it, as they must (nothing of
    a parked key is handled before the parked keys are known). Giving up ended the
    worker or the consumer (the fault suite's 30 s broker pause)."""
    while True:
        try:
            return await asyncio.to_thread(read_to_end, conf, topic, [0])
        except TransientError as exc:
            log.warning("the parked keys could not be read; trying again", reason=str(exc))
            await asyncio.sleep(pause_s)


def read_to_end(
    conf: dict[str, Any],
    topic: str,
    partitions: Sequence[int] | None = None,
    start: dict[int, int] | None = None,
    timeout_s: float = 30.0,
) -> list[Any]:
    """The records of ``topic`` (confluent-kafka messages) from ``start`` (else the
    beginning) to the end of each partition, as the Fetch high watermark tells it (the
    embedded broker's ListOffsets is wrong, docs/broker.md)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            **conf,
            "group.id": "bizevents-parked-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        wanted = sorted(meta.partitions) if partitions is None else list(partitions)
        begin = start or {}
        consumer.assign([TopicPartition(topic, p, begin.get(p, OFFSET_BEGINNING)) for p in wanted])
        unfinished = set(wanted)
        found: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while unfinished:
            msg = consumer.poll(0.2)
            if msg is None:
                if time.monotonic() > deadline:
                    raise TransientError(f"{topic} did not answer within {timeout_s:.0f} s")
                continue
            err = msg.error()
            if err is None:
                found.append(msg)
            elif err.code() == KafkaError._PARTITION_EOF:
                unfinished.discard(msg.partition())
            elif not err.retriable():
                raise TransientError(f"cannot read {topic}: {err}")
        return found
    finally:
        consumer.close()


def read_requests(messages: Sequence[Any], requests: dict[str, Request]) -> None:
    """Fold the request records among ``messages`` into ``requests`` (id → the latest;
    an answered request stays answered, even when its request is read again)."""
    for msg in messages:
        key = msg.key()
        value = msg.value()
        if key is None or not key.startswith(REQUEST_PREFIX) or value is None:
            continue
        try:
            request = Request.decode(value)
        except (ValueError, TypeError):
            continue
        known = requests.get(request.id)
        if known is None or known.status == "pending":
            requests[request.id] = request


def parked_keys(conf: dict[str, Any], topic: str) -> tuple[ParkedKeys, int]:
    """The parked keys the parked topic ``topic`` holds now (each key's latest state
    folded), and the offset after its last record, where the answers to a request
    written now will be."""
    messages = read_to_end(conf, topic)
    keys = ParkedKeys()
    for msg in messages:
        key = msg.key()
        if key is not None:
            keys.apply(key, msg.value())
    return keys, (messages[-1].offset() + 1 if messages else 0)


def ask(
    conf: dict[str, Any], topic: str, requests: Sequence[Request], position: int, timeout_s: float
) -> list[Request] | None:
    """Write ``requests`` to the parked topic and wait for their answers, read from
    ``position`` on (in the order of ``requests``); ``None`` when not every one was
    answered within ``timeout_s`` (the requests stay: the part that owns each key
    carries it out when it runs)."""
    from confluent_kafka import Producer

    records = [(r.record_key(), r.record(), 0) for r in requests]
    send_confirmed(Producer(conf), topic, records)
    answers: dict[str, Request] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        messages = read_to_end(conf, topic, [0], {0: position})
        if messages:
            position = messages[-1].offset() + 1
        read_requests(messages, answers)
        done = [answers.get(r.id) for r in requests]
        if all(a is not None and a.status != "pending" for a in done):
            return [a for a in done if a is not None]
        if time.monotonic() > deadline:
            return None
        time.sleep(0.3)
