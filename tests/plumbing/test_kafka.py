"""Producing: ``produce`` waits out a full queue, the partition rule, and
``send_confirmed``: a command's records written and acknowledged, or one sentence."""

from __future__ import annotations

from typing import Any

import pytest

from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import DeliveryError, partition_for, produce, send_confirmed


class FakeProducer:
    """librdkafka's producer as far as ``send_confirmed`` uses it: delivery reports are
    served at flush, with ``error`` for each record (None: acknowledged); ``left``
    records stay unacknowledged; ``full`` produce calls raise BufferError first."""

    def __init__(self, error: Any = None, left: int = 0, full: int = 0) -> None:
        self.error = error
        self.left = left
        self.full = full
        self.sent: list[tuple[str, bytes | None, bytes | None, int]] = []
        self._reports: list[Any] = []

    def produce(self, topic: str, value: Any, key: Any, **kw: Any) -> None:
        if self.full:
            self.full -= 1
            raise BufferError("queue full")
        self.sent.append((topic, key, value, kw.get("partition", -1)))
        self._reports.append(kw["on_delivery"])

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        for report in self._reports[: len(self._reports) - self.left]:
            report(self.error, None)
        return self.left


def test_every_record_is_written_to_its_partition_and_acknowledged() -> None:
    producer = FakeProducer(full=2)
    send_confirmed(producer, "t", [(b"k", b"v", 0), (b"k2", None, -1)])
    assert producer.sent == [("t", b"k", b"v", 0), ("t", b"k2", None, -1)]


def test_a_refused_record_is_a_delivery_error_naming_the_first_error() -> None:
    with pytest.raises(DeliveryError) as caught:
        send_confirmed(FakeProducer(error="Broker: not leader"), "t", [(b"k", b"v", 0)])
    assert caught.value.reason == "Broker: not leader"
    assert str(caught.value) == "the broker did not take the records for t: Broker: not leader"
    assert isinstance(caught.value, TransientError)


def test_a_record_not_acknowledged_in_time_is_a_delivery_error() -> None:
    with pytest.raises(DeliveryError) as caught:
        send_confirmed(FakeProducer(left=1), "t", [(b"k", b"v", 0)], timeout_s=2.5)
    assert caught.value.reason == "no acknowledgement within 2.5 s"


class _FullThenFree:
    """A producer whose queue is full for the first ``full`` attempts."""

    def __init__(self, full: int) -> None:
        self.full = full
        self.sent: list[tuple[Any, ...]] = []
        self.polls = 0

    def produce(self, topic: str, value: Any, key: Any, **kwargs: Any) -> None:
        if self.full:
            self.full -= 1
            raise BufferError("queue full")
        self.sent.append((topic, value, key, kwargs))

    def poll(self, _timeout: float) -> int:
        self.polls += 1
        return 0


def test_produce_waits_out_a_full_queue() -> None:
    """BufferError is back-pressure: poll, then try again; the record goes once."""
    producer = _FullThenFree(full=3)
    produce(producer, "t", b"v", b"k", partition=2, headers=[("h", b"1")])
    assert producer.polls == 3
    assert producer.sent == [
        ("t", b"v", b"k", {"partition": 2, "headers": [("h", b"1")], "on_delivery": None})
    ]


def test_produce_without_a_partition_leaves_it_to_the_client() -> None:
    producer = _FullThenFree(full=0)
    produce(producer, "t", None, b"k")
    assert "partition" not in producer.sent[0][3]


@pytest.mark.parametrize(
    "key", [b"", b"order-1", b"\x00\x00\x00\x00\x01\x02", bytes(range(256))], ids=repr
)
def test_partition_rule_is_crc32_modulo(key: bytes) -> None:
    """librdkafka's consistent partitioner, which live and replay both use."""
    import zlib

    assert partition_for(key, 7) == zlib.crc32(key) % 7
    assert partition_for(None, 7) == 0
