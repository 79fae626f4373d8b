"""A test plugin for the exactly-once row worker (tests/integration/test_exactly_once.py):
``cancelorders@1`` is the store's ``orders@2``, except that its first call in a process
on the change that pays order :data:`CANCELLED_ORDER` raises ``asyncio.CancelledError``,
as a task cancelled inside a block's transaction would. The transaction aborts and
Faust restarts the agent: the worker goes on. Installed for the worker by an entry point
the test writes (a ``.dist-info`` folder on its ``PYTHONPATH``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from bizevents_store.translators import ORDER_COLUMNS, ORDER_EVENTS, orders_v2

from bizevents import translator
from bizevents.contracts.business import BusinessEvent
from bizevents.contracts.change import Change

#: The order whose payment cancels the block that holds it, once.
CANCELLED_ORDER = 700
_cancelled = False


@translator(
    name="cancelorders",
    version=1,
    sources=["store.orders"],
    emits=ORDER_EVENTS,
    snapshots="skip",
    deletes="skip",
    columns=ORDER_COLUMNS,
    ops=("c", "u"),
    changes=("status",),
)
def cancelorders_v1(change: Change) -> Iterator[BusinessEvent]:
    global _cancelled
    paid = change.is_update and change.new("status") == "paid"
    if paid and change.new("id") == CANCELLED_ORDER and not _cancelled:
        _cancelled = True
        raise asyncio.CancelledError
    return orders_v2.func(change) or iter(())
