"""The story's pure parts: events in words, and agreement with the database by event id."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from bizevents.story import OrderBook, Seen, describe


def _seen(contract: str, event_id: str, offset: int, replay: bool = False, **fields: Any) -> Seen:
    record = {
        "lineage": {
            "event_id": event_id,
            "translator": "orders@2" if replay else "orders@1",
            "source_partition": 0,
            "source_offset": offset,
            "replay": replay,
        },
        **fields,
    }
    return Seen.from_record(contract, record)


def test_describe_writes_the_business_content() -> None:
    placed = _seen(
        "OrderPlaced",
        "e1",
        1,
        order_id=5812,
        customer_id=17,
        total=Decimal("129.9"),
        currency="EUR",
        placed_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert describe(placed) == "OrderPlaced #5812 · customer 17 · 129.90 EUR"
    with_items = Seen.from_record(
        "OrderPlaced",
        {
            "order_id": 5812,
            "items": [{"sku": "a"}] * 3,
            "total": Decimal("129.90"),
            "currency": "EUR",
        },
    )
    assert describe(with_items) == "OrderPlaced #5812 · 3 items · 129.90 EUR"
    changed = _seen(
        "OrderStatusChanged", "e2", 2, order_id=5812, old_status="PENDING", new_status="PAID"
    )
    assert describe(changed) == "OrderStatusChanged #5812 · PENDING → PAID"
    assert describe(_seen("OrderShipped", "e3", 3, order_id=9, tracking_number=None)) == (
        "OrderShipped #9"
    )
    assert placed.translator == "orders@1" and placed.event_id == "e1"


def test_the_latest_event_per_order_is_compared_and_a_replay_supersedes_by_event_id() -> None:
    book = OrderBook()
    book.add(_seen("OrderPlaced", "p1", 10, order_id=1))
    book.add(_seen("OrderPlaced", "p2", 11, order_id=2))
    # orders@1's bug: paid comes out as PENDING
    book.add(_seen("OrderStatusChanged", "s1", 12, order_id=1, new_status="PENDING"))
    database = {1: "paid", 2: "pending", 3: "pending"}
    before = book.agreement(database)
    assert (before.agree, before.disagree, before.unseen) == (1, 1, 1)
    assert before.percent == 50.0 and not before.complete
    # the replay re-emits every event with the same ids; only s1's content changes
    book.add(_seen("OrderPlaced", "p1", 10, replay=True, order_id=1))
    book.add(_seen("OrderStatusChanged", "s1", 12, replay=True, order_id=1, new_status="PAID"))
    book.add(_seen("OrderPlaced", "p3", 13, order_id=3))
    after = book.agreement(database)
    assert after.complete and after.percent == 100.0
    assert book.corrected == {"s1"}


def test_an_older_event_arriving_late_does_not_hide_the_latest() -> None:
    book = OrderBook()
    book.add(_seen("OrderStatusChanged", "s2", 20, order_id=1, new_status="SHIPPED"))
    book.add(_seen("OrderStatusChanged", "s1", 15, order_id=1, new_status="PAID"))
    assert book.status(1) == "SHIPPED"
    assert book.agreement({}).total == 0 and book.agreement({}).percent == 100.0


def test_the_sparkline_spans_the_whole_run() -> None:
    from bizevents.demo.view import _sparkline

    history = [15.0] * 100 + [60.0] * 100 + [100.0] * 10
    line = _sparkline(history, width=21)
    assert len(line) == 21 and line[0] == "▁" and line[-1] == "█" and "▄" in line
    assert _sparkline([0.0, 100.0]) == " █"


def test_the_latest_order_placed_states_the_total_a_correction_brings() -> None:
    """orders@1's OrderPlaced says 0.00; orders@3's replayed one, with the same id, the
    true total: the totals agree with the database once it arrived, not before."""
    book = OrderBook()
    book.add(_seen("OrderPlaced", "p1", 10, order_id=1, total=Decimal("0.00")))
    book.add(_seen("OrderPlaced", "p2", 11, order_id=2, total=Decimal("0.00")))
    database = {1: Decimal("129.90"), 2: Decimal("0.00"), 3: Decimal("4.59")}
    before = book.totals_agreement(database)
    assert (before.agree, before.disagree, before.unseen) == (1, 1, 1)
    book.add(_seen("OrderPlaced", "p1", 10, replay=True, order_id=1, total=Decimal("129.90")))
    book.add(_seen("OrderPlaced", "p3", 12, replay=True, order_id=3, total=Decimal("4.59")))
    after = book.totals_agreement(database)
    assert after.complete and book.corrected == {"p1"}
