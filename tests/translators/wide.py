"""A legacy-wide table (40 columns) whose translator reads 5: for tests and benches."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Final

from bizevents import Timestamp, condecimal, translator
from bizevents.contracts.business import BusinessEvent
from bizevents.contracts.change import Change
from bizevents.contracts.envelope import ChangeEvent, PgPosition, Source
from bizevents.contracts.logical import ColumnType, Field, Kind
from bizevents.contracts.technical import TableSchema

if TYPE_CHECKING:
    Money = Decimal
else:
    Money = condecimal(max_digits=12, decimal_places=2)

_KINDS: Final = (
    ColumnType(Kind.STRING),
    ColumnType(Kind.INT64),
    ColumnType(Kind.DECIMAL, scale=2, precision=12),
    ColumnType(Kind.ZONED_TIMESTAMP),
    ColumnType(Kind.BOOLEAN),
    ColumnType(Kind.FLOAT64),
    ColumnType(Kind.BYTES),
    ColumnType(Kind.ARRAY, items=ColumnType(Kind.STRING)),
)
#: Columns the translator reads; the other 35 are filler of every kind above.
READ: Final = ("id", "state", "amount", "changed_at", "owner")
WIDE_VALUE: Final = (
    Field("id", ColumnType(Kind.INT64), optional=False),
    Field("state", ColumnType(Kind.ENUM, labels=("open", "won", "lost")), optional=False),
    Field("amount", ColumnType(Kind.DECIMAL, scale=2, precision=12)),
    Field("changed_at", ColumnType(Kind.ZONED_TIMESTAMP), optional=False),
    Field("owner", ColumnType(Kind.STRING)),
    *(Field(f"legacy_{i:02d}", _KINDS[i % len(_KINDS)]) for i in range(35)),
)
WIDE = TableSchema(
    "legacy",
    "crm",
    "deals",
    (Field("id", ColumnType(Kind.INT64), optional=False),),
    WIDE_VALUE,
)
_T0: Final = datetime(2024, 5, 1, tzinfo=UTC)


class DealClosed(BusinessEvent):
    deal_id: int
    won: bool
    amount: Money | None
    owner: str | None
    closed_at: Timestamp

    class Meta:
        namespace = "test.deals"


def deal_closed(change: Change) -> DealClosed:
    """The deal the change's row closes."""
    return DealClosed(
        deal_id=change.new("id"),
        won=change.new("state") == "won",
        amount=change.new("amount"),
        owner=change.new("owner"),
        closed_at=change.new("changed_at"),
    )


def _deals(change: Change) -> Iterator[BusinessEvent]:
    if change.is_update and change.changed("state") and change.new("state") != "open":
        yield deal_closed(change)


@translator(
    name="deals",
    version=1,
    sources=["crm.deals"],
    emits=[DealClosed],
    columns=READ,
    ops=["u"],
)
def deals(change: Change) -> Iterator[BusinessEvent]:
    return _deals(change)


@translator(name="deals", version=1, sources=["crm.deals"], emits=[DealClosed])
def deals_undeclared(change: Change) -> Iterator[BusinessEvent]:
    """The same function without a declaration: every column of every change."""
    return _deals(change)


def _filler(i: int, n: int) -> object:
    kind = _KINDS[i % len(_KINDS)].kind
    if kind is Kind.STRING:
        return f"legacy text {n} " * 3
    if kind is Kind.INT64:
        return n * 7919
    if kind is Kind.DECIMAL:
        return Decimal(n) / 100
    if kind is Kind.ZONED_TIMESTAMP:
        return _T0 + timedelta(seconds=n)
    if kind is Kind.BOOLEAN:
        return n % 2 == 0
    if kind is Kind.FLOAT64:
        return n / 3
    if kind is Kind.BYTES:
        return n.to_bytes(8, "big")
    return [f"tag{n}", "x"]


def row(n: int, state: str) -> dict[str, object]:
    out: dict[str, object] = {
        "id": n,
        "state": state,
        "amount": Decimal(n) / 4,
        "changed_at": _T0 + timedelta(minutes=n),
        "owner": f"owner-{n % 13}",
    }
    out.update({f"legacy_{i:02d}": _filler(i, n) for i in range(35)})
    return out


def changes(count: int) -> Iterator[ChangeEvent]:
    """Deals opened, then touched, then closed: one change in four gives an event."""
    for n in range(count):
        deal, step = divmod(n, 4)
        source = Source(
            "postgresql",
            "legacy",
            "crm",
            "crm",
            "deals",
            1_714_564_800_000 + n,
            position=PgPosition(lsn=1_000 + n, tx_id=n),
        )
        if step == 0:
            yield ChangeEvent("c", source, None, row(deal, "open"), {"id": deal}, 1)
        elif step in (1, 2):
            touched = {**row(deal, "open"), "legacy_00": f"touched {step}"}
            yield ChangeEvent("u", source, row(deal, "open"), touched, {"id": deal}, 1)
        else:
            closed = row(deal, "won" if deal % 3 else "lost")
            yield ChangeEvent("u", source, row(deal, "open"), closed, {"id": deal}, 1)
