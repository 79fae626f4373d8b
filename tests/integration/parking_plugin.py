"""A test plugin for parking (tests/integration/test_parking.py): ``parkorders@1`` is
the store's ``orders@2`` with a planted bug, it raises on an order whose tracking
number is ``POISON``; ``parkorders@2`` is the fix, ``@3`` the fix made slow, ``@4`` a
"fix" that fails again. All have one name, so their events
from one change have one id. Installed for the workers by an entry point the test
writes (a ``.dist-info`` folder on their ``PYTHONPATH``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from bizevents_store.translators import ORDER_CHANGES, ORDER_COLUMNS, ORDER_EVENTS, orders_v2

from bizevents import translator
from bizevents.contracts.business import BusinessEvent
from bizevents.contracts.change import Change

POISON = "POISON"
#: How long parkorders@3 takes per change.
SLOW_S = 0.05


#: The store's orders@2 declaration, with a change of tracking number giving an event too.
OPTIONS: dict[str, Any] = {
    "sources": ["store.orders"],
    "emits": ORDER_EVENTS,
    "snapshots": "skip",
    "deletes": "skip",
    "columns": ORDER_COLUMNS,
    "ops": ("c", "u"),
    "changes": (*ORDER_CHANGES, "tracking_number"),
}


@translator(name="parkorders", version=1, **OPTIONS)
def parkorders_v1(change: Change) -> Iterator[BusinessEvent]:
    if change.is_update and change.new("tracking_number") == POISON:
        raise ValueError(f"order {change.new('id')} has a poisoned tracking number")
    return orders_v2.func(change) or iter(())


@translator(name="parkorders", version=2, **OPTIONS)
def parkorders_v2(change: Change) -> Iterator[BusinessEvent]:
    return orders_v2.func(change) or iter(())


@translator(name="parkorders", version=3, **OPTIONS)
def parkorders_v3(change: Change) -> Iterator[BusinessEvent]:
    """The fix, slow (a test's stand-in for a long re-drive: it can be killed mid-way)."""
    time.sleep(SLOW_S)
    return orders_v2.func(change) or iter(())


@translator(name="parkorders", version=4, **OPTIONS)
def parkorders_v4(change: Change) -> Iterator[BusinessEvent]:
    """A "fix" that fails again, with another reason."""
    if change.is_update and change.new("tracking_number") == POISON:
        raise RuntimeError("still broken")
    return orders_v2.func(change) or iter(())


PARKORDERS = [parkorders_v1, parkorders_v2, parkorders_v3, parkorders_v4]
