"""What the demo's story shows, as pure logic: business events in words, and whether
the business events agree with the database.

The demo's reader decodes each business event it sees into a :class:`Seen` (its
contract name, its fields, its lineage); :func:`describe` writes it as a line a
person reads (``OrderPlaced #5812 · customer 17 · 129.90 EUR``). :class:`OrderBook`
keeps, per order, the status its latest business event says, where an event that
arrives again with the same event id (a replayed correction) supersedes the earlier
one; :meth:`OrderBook.agreement` compares that with the status the database holds, and
:meth:`OrderBook.totals_agreement` the total its latest OrderPlaced states (orders@1 and
@2 say 0.00, orders@3 the true total) with the database's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

#: Contract name → the order status an event of it states (None: read ``new_status``).
STATUS_EVENTS: dict[str, str | None] = {"OrderPlaced": "PENDING", "OrderStatusChanged": None}


@dataclass(frozen=True, slots=True)
class Seen:
    """One business event as the demo's reader decoded it."""

    contract: str  # the record's name, e.g. OrderPlaced
    fields: dict[str, Any]  # the event's own fields, lineage removed
    event_id: str
    translator: str  # name@version
    source_partition: int
    source_offset: int
    replay: bool = False

    @classmethod
    def from_record(cls, contract: str, record: dict[str, Any]) -> Seen:
        lineage = record.get("lineage") or {}
        return cls(
            contract=contract,
            fields={k: v for k, v in record.items() if k != "lineage"},
            event_id=str(lineage.get("event_id", "")),
            translator=str(lineage.get("translator", "")),
            source_partition=int(lineage.get("source_partition", -1)),
            source_offset=int(lineage.get("source_offset", -1)),
            replay=bool(lineage.get("replay", False)),
        )


def _value(value: Any) -> str:
    if isinstance(value, Decimal):
        return f"{value:.2f}"
    if isinstance(value, datetime):
        return value.strftime("%H:%M:%S")
    return str(value)


def describe(seen: Seen) -> str:
    """The event's business content on one line: its contract, the entity it is about
    (``#id``), then what the contract holds, amounts with their currency and status
    changes as arrows."""
    fields = dict(seen.fields)
    parts = [seen.contract]
    key = next((k for k in fields if k.endswith("_id")), None)
    if key is not None:
        parts[0] += f" #{fields.pop(key)}"
    currency = fields.pop("currency", None)
    if "old_status" in fields or "new_status" in fields:
        old, new = fields.pop("old_status", None), fields.pop("new_status", None)
        parts.append(f"{old or '∅'} → {new}")
    plain, counted, amounts = [], [], []
    for name, value in fields.items():
        if value is None or name.endswith("_at"):
            continue  # absent values and timestamps say little on one line
        if isinstance(value, list):  # e.g. an order's items: how many (none: not said)
            if value:
                counted.append(f"{len(value)} {name}")
        elif isinstance(value, Decimal):
            amounts.append(_value(value) + ("" if currency is None else f" {currency}"))
        else:
            plain.append(f"{name.removesuffix('_id').replace('_', ' ')} {_value(value)}")
    parts += plain + counted + amounts
    return " · ".join(parts)


@dataclass(frozen=True, slots=True)
class Agreement:
    """Orders of this run whose latest business event states the database's status."""

    agree: int
    disagree: int
    unseen: int  # in the database, no business event read yet

    @property
    def total(self) -> int:
        return self.agree + self.disagree + self.unseen

    @property
    def percent(self) -> float:
        """Of the orders with a business event, how many state the database's status
        (an order whose first event is still on its way is counted apart, as unseen)."""
        seen = self.agree + self.disagree
        return 100.0 if seen == 0 else 100.0 * self.agree / seen

    @property
    def complete(self) -> bool:
        """Every order has an event and every event agrees."""
        return self.total > 0 and self.agree == self.total


@dataclass
class OrderBook:
    """Per order, the status its latest business event states; by event id, the events."""

    #: event id → (order id, status stated, source position)
    events: dict[str, tuple[int, str, tuple[int, int]]] = field(default_factory=dict)
    #: order id → the event id of its latest status-stating event
    latest: dict[int, str] = field(default_factory=dict)
    #: event id → the content it last had (any contract)
    content: dict[str, str] = field(default_factory=dict)
    #: event ids whose content a later event with the same id changed
    corrected: set[str] = field(default_factory=set)
    #: order id → the total its OrderPlaced states (the last seen: a correction replaces it)
    placed_totals: dict[int, Decimal] = field(default_factory=dict)

    def add(self, seen: Seen) -> None:
        content = repr(sorted(seen.fields.items()))
        if self.content.get(seen.event_id, content) != content:
            self.corrected.add(seen.event_id)
        self.content[seen.event_id] = content
        if seen.contract == "OrderPlaced" and isinstance(seen.fields.get("total"), Decimal):
            self.placed_totals[int(seen.fields["order_id"])] = seen.fields["total"]
        if seen.contract not in STATUS_EVENTS:
            return
        status = STATUS_EVENTS[seen.contract] or str(seen.fields.get("new_status"))
        order = int(seen.fields["order_id"])
        position = (seen.source_partition, seen.source_offset)
        self.events[seen.event_id] = (order, status, position)
        current = self.latest.get(order)
        if current is None or self.events[current][2] <= position:
            self.latest[order] = seen.event_id

    def status(self, order: int) -> str | None:
        event = self.latest.get(order)
        return None if event is None else self.events[event][1]

    def agreement(self, database: dict[int, str]) -> Agreement:
        """Compare with ``database`` (order id → its status label, any case)."""
        agree = disagree = unseen = 0
        for order, label in database.items():
            stated = self.status(order)
            if stated is None:
                unseen += 1
            elif stated == label.upper():
                agree += 1
            else:
                disagree += 1
        return Agreement(agree, disagree, unseen)

    def totals_agreement(self, database: dict[int, Decimal]) -> Agreement:
        """Compare the total each order's OrderPlaced states with ``database`` (order id →
        its total)."""
        agree = disagree = unseen = 0
        for order, total in database.items():
            stated = self.placed_totals.get(order)
            if stated is None:
                unseen += 1
            elif stated == total:
                agree += 1
            else:
                disagree += 1
        return Agreement(agree, disagree, unseen)
