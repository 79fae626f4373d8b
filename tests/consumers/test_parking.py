"""Reading a consumer group's parked events back from its dead-letter records (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from bizevents.consumers.parking import (
    HEADER_CONSUMER_GROUP,
    HEADER_CONSUMER_OFFSET,
    HEADER_CONSUMER_PARTITION,
    HEADER_CONSUMER_TOPIC,
    parked_event_of,
    parked_events,
)
from bizevents.contracts.business import HEADER_DLQ_ERROR, HEADER_DLQ_REASON, HEADER_DLQ_STAGE
from bizevents.plumbing.parking import PARKED_HEADER


@dataclass
class Msg:
    """The parts of a confluent-kafka message the reader uses."""

    k: bytes | None
    v: bytes | None
    h: list[tuple[str, bytes]]

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def headers(self) -> list[tuple[str, bytes]]:
        return self.h


ORIGINAL = [("bizevents.source.topic", b"shop.public.prices"), ("bizevents.source.offset", b"9")]


def dead(offset: int, key: bytes = b"k1", group: str = "g", parked: bool = True) -> Msg:
    ours = [
        (HEADER_DLQ_STAGE, b"parked" if offset else b"consume-handler"),
        (HEADER_DLQ_REASON, b"why"),
        (HEADER_DLQ_ERROR, b"ValueError"),
        (HEADER_CONSUMER_TOPIC, b"shop.prices"),
        (HEADER_CONSUMER_PARTITION, b"2"),
        (HEADER_CONSUMER_OFFSET, str(offset).encode()),
        (HEADER_CONSUMER_GROUP, group.encode()),
    ]
    return Msg(key, b"v%d" % offset, ORIGINAL + ours + ([(PARKED_HEADER, b"1")] if parked else []))


def test_a_parked_record_gives_back_its_original_key_value_and_headers() -> None:
    event = parked_event_of(dead(0))
    assert event is not None
    assert (event.group, event.topic, event.partition, event.offset) == ("g", "shop.prices", 2, 0)
    assert (event.key, event.value, event.headers) == (b"k1", b"v0", ORIGINAL)
    assert (event.stage, event.reason) == ("consume-handler", "why")


def test_records_that_are_not_a_groups_parked_ones_are_ignored() -> None:
    assert parked_event_of(dead(0, parked=False)) is None  # dead-lettered, not parked
    assert parked_event_of(Msg(b"k", b"v", ORIGINAL)) is None  # too few headers of ours
    translator_parked = [*ORIGINAL[:1]] * 8 + [(PARKED_HEADER, b"1")]
    assert parked_event_of(Msg(b"k", b"v", translator_parked)) is None  # no group header


def test_a_keys_parked_events_in_order_each_once_past_a_given_offset() -> None:
    ref = ("g", "shop.prices", 2, b"k1")
    messages = [
        dead(3),
        dead(1),
        dead(2, key=b"k2"),  # another key
        dead(4, group="other"),  # another group
        dead(3),  # parked twice (a crash before the commit)
        dead(0),
        dead(5),
    ]
    assert [e.offset for e in parked_events(messages, ref, -1)] == [0, 1, 3, 5]
    assert [e.offset for e in parked_events(messages, ref, 1)] == [3, 5]
