"""The transaction core without parking: ready transactions translated per translator
that reads them, abandoned and failing ones dead-lettered, snapshot reads skipped, counts
kept (parking, shadows and routing have their own tests)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bizevents_store.translators import ORDER_EVENTS, orders_v3

from bizevents.contracts.business import HEADER_DLQ_REASON, HEADER_DLQ_STAGE
from bizevents.transactions import TransactionChanges, transaction_translator
from bizevents.translators.assembly import Abandoned, Ready
from bizevents.translators.txcore import TransactionCore
from tests.translators.test_routing import _placing, _ready

DLQ = "test.dlq"


def serialize(event: Any, topic: str | None = None, lineage: bytes | None = None) -> bytes:
    return b"event"


@transaction_translator(
    name="orders", version=22, sources=["store.orders", "store.order_items"], emits=ORDER_EVENTS
)
def failing(tx: TransactionChanges) -> None:
    raise ValueError("no such product")


def core(*translators: Any) -> TransactionCore:
    return TransactionCore(list(translators), serialize, dead_letter_topic=DLQ)


def stages(records: Iterable[Any]) -> list[bytes | None]:
    return [dict(r.headers).get(HEADER_DLQ_STAGE) for r in records]


def test_a_transaction_gives_the_translators_events_and_is_counted() -> None:
    c = core(orders_v3)
    ready = _ready("9:100", _placing(7, 2))
    result = c.process([ready])
    assert [r.topic for r in result.records] == ["store.order-placed"]
    assert not result.records[0].dead_letter
    assert result.counts["orders@3"].consumed == 4 and result.counts["orders@3"].emitted == 1
    assert (c.counts.transactions, c.counts.changes, c.counts.events) == (1, 4, 1)


def test_an_abandoned_transaction_dead_letters_each_part_at_assembly() -> None:
    c = core(orders_v3)
    parts = _ready("9:101", _placing(8, 1)).parts
    result = c.process([Abandoned("9:101", parts, "its END never came")])
    assert [r.topic for r in result.records] == [DLQ] * len(parts)
    assert set(stages(result.records)) == {b"assemble"}
    assert dict(result.records[0].headers)[HEADER_DLQ_REASON] == b"its END never came"
    assert c.counts.dead_lettered == len(parts)


def test_a_failing_translator_dead_letters_its_parts_without_parking() -> None:
    c = core(failing)
    ready = _ready("9:102", _placing(9, 2))
    result = c.process([ready])
    assert [r.topic for r in result.records] == [DLQ] * 4
    assert set(stages(result.records)) == {b"translate"}
    assert b"no such product" in (dict(result.records[0].headers)[HEADER_DLQ_REASON] or b"")
    assert result.counts["orders@22"].dead_lettered == 4


def test_a_snapshot_read_is_skipped_by_a_translator_that_skips_snapshots() -> None:
    c = core(orders_v3)
    snapshot = Ready(None, _ready("9:103", _placing(10, 1)).parts)
    assert c.process([snapshot]).records == []


def test_the_tables_read_are_those_of_any_translator() -> None:
    c = core(orders_v3)
    assert c.reads("store.orders") and c.reads("store.order_items")
    assert not c.reads("store.customers")
