"""The consumer kit's parked events read back from its dead-letter records."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    """A dead-letter record as confluent-kafka hands it over."""

    offset: int
    key_: bytes | None = b"k1"
    group: bytes = b"g"
    own: list[tuple[str, bytes]] = field(default_factory=lambda: [("trace", b"t-1")])
    parked: bytes = b"1"

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes:
        return b"v%d" % self.offset

    def headers(self) -> list[tuple[str, bytes]]:
        return [
            *self.own,
            (HEADER_DLQ_STAGE, b"handle"),
            (HEADER_DLQ_REASON, b"boom"),
            (HEADER_DLQ_ERROR, b"ValueError"),
            (HEADER_CONSUMER_TOPIC, b"store.order-placed"),
            (HEADER_CONSUMER_PARTITION, b"2"),
            (HEADER_CONSUMER_OFFSET, str(self.offset).encode()),
            (HEADER_CONSUMER_GROUP, self.group),
            (PARKED_HEADER, self.parked),
        ]


REF = ("g", "store.order-placed", 2, b"k1")


def test_a_parked_record_gives_its_own_headers_and_where_it_was_read() -> None:
    parked = parked_event_of(Msg(40, own=[("trace", b"t-1"), (PARKED_HEADER, b"1")]))
    assert parked is not None
    assert (parked.group, parked.topic, parked.partition, parked.offset) == (
        "g",
        "store.order-placed",
        2,
        40,
    )
    assert (parked.stage, parked.reason) == ("handle", "boom")
    # the original's own headers, even one named like ours, stay the original's
    assert parked.headers == [("trace", b"t-1"), (PARKED_HEADER, b"1")]
    assert (parked.key, parked.value) == (b"k1", b"v40")


def test_a_record_that_is_not_a_parked_one_is_none() -> None:
    assert parked_event_of(Msg(1, parked=b"0")) is None

    class Bare(Msg):
        def headers(self) -> list[tuple[str, bytes]]:
            return [(PARKED_HEADER, b"1")]

    assert parked_event_of(Bare(1)) is None


def test_parked_events_of_a_ref_in_offset_order_each_once_past_the_mark() -> None:
    messages = [
        Msg(12),
        Msg(10),
        Msg(12),  # parked twice by a crash
        Msg(11, key_=b"k2"),  # another key
        Msg(13, group=b"other"),  # another group
        Msg(9),  # at or before the mark
    ]
    assert [p.offset for p in parked_events(messages, REF, after=9)] == [10, 12]
