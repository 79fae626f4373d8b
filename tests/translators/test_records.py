"""What the cores take and give (:mod:`bizevents.translators.records`): a dead-letter
record keeps its source whole, and gives it back."""

from __future__ import annotations

from bizevents.contracts.business import HEADER_DLQ_REASON, HEADER_DLQ_STAGE
from bizevents.translators.records import Counts, SourceRecord, dead_letter, dead_letter_source
from tests.translators.test_parking import FakeMessage


def test_a_dead_letter_gives_its_source_back() -> None:
    source = SourceRecord("s.store.orders", 2, 40, b"k", b"v", [("h", b"1")])
    extra = [("x", b"y")]
    out = dead_letter(source, "dlq", "translate", "bad", "ValueError", "orders@3", extra)
    headers = dict(out.headers)
    assert (out.topic, out.key, out.value, out.dead_letter) == ("dlq", b"k", b"v", True)
    assert headers[HEADER_DLQ_STAGE] == b"translate" and headers[HEADER_DLQ_REASON] == b"bad"
    appended = len(out.headers) - len(source.headers)  # its own headers come first
    back = dead_letter_source(FakeMessage(out.key, out.value, out.headers), appended)
    assert back == SourceRecord("s.store.orders", 2, 40, b"k", b"v", [("h", b"1")])


def test_counts_add_up() -> None:
    total = Counts(consumed=1, emitted=2, seconds=0.5)
    total.add(Counts(consumed=3, dropped=1, parked=2, seconds=0.25))
    assert total == Counts(consumed=4, emitted=2, dropped=1, parked=2, seconds=0.75)
