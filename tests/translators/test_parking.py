"""Per-key parking in the translation core and its pure state (docs/parking.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bizevents import translator
from bizevents.contracts.business import HEADER_DLQ_REASON, HEADER_DLQ_STAGE, BusinessEvent
from bizevents.contracts.change import Change
from bizevents.contracts.technical import AutoDecoder
from bizevents.plumbing.parking import (
    PARKED_EXTRA_HEADERS,
    PARKED_HEADER,
    Parked,
    ParkedKeys,
    ParkingBoundError,
    Unparked,
    decode_state,
    ref_key,
    ref_of,
)
from bizevents.translators.pipeline import Pipeline, SourceRecord, TranslatorFailedError
from tests.translators.sample import ThingCreated, ThingRenamed, things_v1
from tests.translators.test_pipeline import TOPIC, envelope, fake_serializer

PARKED_TOPIC = "test.parked"


@translator(name="things", version=9, sources=["public.things"], emits=[ThingCreated, ThingRenamed])
def things_bad(change: Change) -> Iterable[BusinessEvent]:
    """things@1, except that it raises on a label "bad"."""
    if change.is_create and change.new("label") == "bad":
        raise ValueError("bad label")
    return things_v1.func(change) or ()


def rec(offset: int, thing: int, label: str, op: str = "c") -> SourceRecord:
    before = {"id": thing, "label": "x"} if op == "u" else None
    value = envelope(op, before, {"id": thing, "label": label}, 100 + offset)
    return SourceRecord(TOPIC, 0, offset, f'{{"id": {thing}}}'.encode(), value, [("t", b"1")])


def parking_pipeline(on_error: dict[str, Any] | None = None, bound: int = 10) -> Pipeline:
    return Pipeline(
        [things_bad],
        AutoDecoder(),
        fake_serializer,
        parking=ParkedKeys(bound),
        parked_topic=PARKED_TOPIC,
        on_error=on_error,
    )


def test_a_failure_parks_its_key_and_the_keys_later_changes_wait_while_others_flow() -> None:
    p = parking_pipeline()
    result = p.process(
        [rec(0, 1, "bad"), rec(1, 2, "ok"), rec(2, 1, "y", "u"), rec(3, 2, "z", "u")]
    )
    events = [r for r in result.records if r.event_id]
    dead = [r for r in result.records if r.topic == "bizevents.dead-letter"]
    state = [r for r in result.records if r.topic == PARKED_TOPIC]
    assert [r.key for r in events] == [b'{"id": 2}', b'{"id": 2}']  # key 2 flows
    assert [dict(r.headers)[HEADER_DLQ_STAGE] for r in dead] == [b"translate", b"parked"]
    assert all(dict(r.headers)[PARKED_HEADER] == b"1" for r in dead)
    assert [r.value for r in dead] == [rec(0, 1, "bad").value, rec(2, 1, "y", "u").value]
    # the original headers come first, then the ones parking appended
    assert all(r.headers[:-PARKED_EXTRA_HEADERS] == [("t", b"1")] for r in dead)
    ref = ("things", TOPIC, 0, b'{"id": 1}')
    assert [r.key for r in state] == [ref_key(ref)] * 2
    last = decode_state(state[-1].value or b"")
    reason = f"ValueError: bad label (at {__file__}:38)"  # the translator's raise
    assert last == Parked(0, 2, 2, "translate", reason, reason)
    assert result.counts["things@9"].parked == 2
    assert p.parking is not None and p.parking.per_translator == {"things": 1}


def test_dead_letter_on_error_keeps_the_old_behaviour() -> None:
    p = parking_pipeline({"things": "dead-letter"})
    result = p.process([rec(0, 1, "bad"), rec(1, 1, "y", "u")])
    (dead,) = [r for r in result.records if not r.event_id]
    assert PARKED_HEADER not in dict(dead.headers)
    assert [r.key for r in result.records if r.event_id] == [b'{"id": 1}']
    assert result.counts["things@9"].parked == 0


def test_fail_on_error_stops_with_a_sentence() -> None:
    p = parking_pipeline({"things": "fail"})
    with pytest.raises(TranslatorFailedError, match=r"things@9 failed \(translate\).*offset 0"):
        p.process([rec(0, 1, "bad")])


def test_past_the_bound_the_worker_stops_with_a_sentence() -> None:
    p = parking_pipeline(bound=2)
    p.process([rec(0, 1, "bad"), rec(1, 2, "bad")])
    with pytest.raises(ParkingBoundError, match=r"translate\.max_parked_keys"):
        p.process([rec(2, 3, "bad")])


def test_unparked_key_flows_and_changes_already_re_driven_are_skipped() -> None:
    p = parking_pipeline()
    p.process([rec(0, 1, "bad"), rec(1, 1, "y", "u")])
    assert p.parking is not None
    ref = ("things", TOPIC, 0, b'{"id": 1}')
    p.parking.unpark(ref, 1, "redriven")
    again = p.process([rec(0, 1, "bad"), rec(1, 1, "y", "u"), rec(2, 1, "w", "u")])
    assert [r.topic for r in again.records] == [ThingRenamed.contract_topic()]
    assert p.parking.per_translator == {"things": 0}


def test_undecodable_change_parks_the_key_for_the_topics_translators() -> None:
    p = parking_pipeline()
    p.process([rec(0, 5, "ok")])  # the topic's table is learnt
    poison = SourceRecord(TOPIC, 0, 1, b'{"id": 1}', b"\x00garbage", [])
    result = p.process([poison, rec(2, 1, "y", "u")])
    stages = [dict(r.headers)[HEADER_DLQ_STAGE] for r in result.records if r.topic != PARKED_TOPIC]
    assert stages == [b"decode", b"parked"]
    assert b"decode" not in (dict(result.records[0].headers)[HEADER_DLQ_REASON] or b"")


refs = st.tuples(
    st.sampled_from(["a", "b|c", "ü"]),
    st.sampled_from(["t.x", "t|y"]),
    st.integers(0, 64),
    st.binary(max_size=12),
)


@given(refs)
def test_a_parked_topic_key_names_its_ref(ref: tuple[str, str, int, bytes]) -> None:
    decoded = ref_of(ref_key(ref))
    if "|" in ref[0] or "|" in ref[1]:
        assert decoded is None or decoded != ref  # never a wrong key silently
    else:
        assert decoded == ref


@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=30))
def test_restoring_from_the_records_gives_the_same_state(steps: list[tuple[int, bool]]) -> None:
    live = ParkedKeys(100)
    log: list[tuple[bytes, bytes]] = []
    for offset, (thing, unpark) in enumerate(steps):
        ref = ("things", TOPIC, 0, bytes([thing]))
        if unpark:
            log.append((ref_key(ref), live.unpark(ref, offset, "redriven")))
        else:
            log.append((ref_key(ref), live.park(ref, offset, "translate", "r")))
    restored = ParkedKeys(100)
    for key, value in log:
        restored.apply(key, value)
    assert restored.parked == live.parked
    assert restored.through == live.through
    assert restored.watched == live.watched
    assert {k: v for k, v in restored.per_translator.items() if v} == {
        k: v for k, v in live.per_translator.items() if v
    }


def test_state_records_round_trip() -> None:
    ref = ("n", "t", 1, b"k")
    assert decode_state(Unparked(4, "redriven by n@2").record(ref)) == Unparked(
        4, "redriven by n@2"
    )


class FakeMessage:
    """What the parked-topic and dead-letter readers read of a confluent-kafka message."""

    def __init__(
        self, key: bytes | None, value: bytes | None, headers: Any = None, offset: int = 0
    ) -> None:
        self._key, self._value, self._headers, self._offset = key, value, headers, offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> Any:
        return self._headers

    def offset(self) -> int:
        return self._offset


def test_a_keys_parked_records_come_once_each_in_source_order_from_its_park_on() -> None:
    from bizevents.translators.parkingio import parked_records

    p = parking_pipeline()
    first = p.process([rec(0, 1, "bad"), rec(1, 2, "ok"), rec(2, 1, "y", "u")])
    again = p.process([rec(2, 1, "y", "u"), rec(3, 1, "z", "u")])  # read again after a crash
    dead = [r for r in first.records + again.records if r.topic == "bizevents.dead-letter"]
    messages = [FakeMessage(r.key, r.value, r.headers, i) for i, r in enumerate(reversed(dead))]
    ref = ("things", TOPIC, 0, b'{"id": 1}')
    found = parked_records(messages, ref, -1)
    assert [r.source.offset for r in found] == [0, 2, 3]
    assert [r.stage for r in found] == ["translate", "parked", "parked"]
    assert all(r.source.headers == [("t", b"1")] for r in found)  # the original headers
    assert found[1].source.value == rec(2, 1, "y", "u").value
    assert [r.source.offset for r in parked_records(messages, ref, 2)] == [3]
    assert parked_records(messages, ("other", TOPIC, 0, b'{"id": 1}'), -1) == []


def test_an_answered_request_stays_answered_when_its_request_is_read_again() -> None:
    from dataclasses import replace

    from bizevents.plumbing.parking import Request
    from bizevents.plumbing.parkingio import read_requests

    asked = Request("r1", "redrive", "things", TOPIC, 0, b"k".hex(), 2)
    done = replace(asked, status="done", message="ok")
    requests: dict[str, Request] = {}
    read_requests([FakeMessage(asked.record_key(), asked.record())], requests)
    assert requests["r1"].status == "pending"
    read_requests([FakeMessage(done.record_key(), done.record())], requests)
    read_requests([FakeMessage(asked.record_key(), asked.record())], requests)
    assert requests["r1"] == done
    read_requests(
        [FakeMessage(b"park|x", b"{}"), FakeMessage(b"request|bad", b"not json")], requests
    )
    assert list(requests) == ["r1"]
