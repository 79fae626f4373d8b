"""The commands' side of the parked topic: the parked keys read once for ``dlq`` and
``capture parked`` (:func:`parked_keys`), and a request's round trip (:func:`ask`), on
the test stack's broker; the restore at an assignment waiting out a broker that does not
answer (a fake read)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bizevents.devstack import Endpoints
from bizevents.plumbing import parkingio
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import ensure_topics, send_confirmed
from bizevents.plumbing.parking import Parked, Request, Unparked, ref_key
from bizevents.plumbing.parkingio import ask, parked_keys, read_requests, read_to_end

A = ("orders", "shop.orders", 0, b"k-a")
B = ("orders", "shop.orders", 1, b"k-b")


def _topic(endpoints: Endpoints, unique_topic: Callable[[str], str]) -> tuple[dict[str, str], str]:
    kafka = {"bootstrap.servers": endpoints.bootstrap_servers}
    topic = unique_topic("parked")
    ensure_topics(AdminClient(kafka), [topic], 1, timeout_s=15)
    return kafka, topic


def test_the_parked_keys_are_each_keys_latest_state_and_the_end_is_after_the_last_record(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    kafka, topic = _topic(bizevents_stack, unique_topic)
    request = Request("r1", "discard", "orders", A[1], A[2], A[3].hex(), reason="x")
    records = [
        (ref_key(A), Parked(5, 7, 2, "translate", "boom", "boom again").record(A), 0),
        (ref_key(B), Parked(3, 3, 1, "translate", "bad", "bad").record(B), 0),
        (request.record_key(), request.record(), 0),
        (ref_key(B), Unparked(3, "discarded").record(B), 0),
    ]
    send_confirmed(Producer(kafka), topic, records)
    keys, end = parked_keys(kafka, topic)
    assert keys.parked == {A: Parked(5, 7, 2, "translate", "boom", "boom again")}
    assert keys.through == {B: 3}
    assert end == 4


def test_a_request_is_written_and_its_answer_read_and_no_answer_in_time_is_none(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    kafka, topic = _topic(bizevents_stack, unique_topic)
    asked = [Request(f"r{i}", "redrive", *ref[:3], ref[3].hex(), 2) for i, ref in enumerate([A, B])]
    _, position = parked_keys(kafka, topic)
    assert ask(kafka, topic, asked[:1], position, timeout_s=1) is None

    def answer() -> None:
        """What the part that owns the keys does: each pending request answered."""
        requests: dict[str, Request] = {}
        while len(requests) < 3:  # r0 (asked above) and the two asked below
            read_requests(read_to_end(kafka, topic), requests)
        done = [dataclasses.replace(r, status="done", message="ok") for r in requests.values()]
        send_confirmed(Producer(kafka), topic, [(r.record_key(), r.record(), 0) for r in done])

    _, position = parked_keys(kafka, topic)
    answering = threading.Thread(target=answer)
    answering.start()
    asked = [dataclasses.replace(asked[1], id="r2"), dataclasses.replace(asked[0], id="r3")]
    answers = ask(kafka, topic, asked, position, timeout_s=30)
    answering.join(30)
    assert answers is not None
    assert [(a.id, a.status, a.message) for a in answers] == [
        ("r2", "done", "ok"),
        ("r3", "done", "ok"),
    ]


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
