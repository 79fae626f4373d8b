"""``send_confirmed``: a command's records written and acknowledged, or one sentence."""

from __future__ import annotations

from typing import Any

import pytest

from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import DeliveryError, send_confirmed


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
