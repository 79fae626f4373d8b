"""The transaction worker's producer: transactional under exactly once with an id of its
own, and renewed in place once the broker fenced it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiokafka.producer.transaction_manager import TransactionState

from bizevents.translators.settings import RuntimeSettings, TransactionSettings
from bizevents.translators.txproducer import Renewable, transaction_producer


class Producer:
    """A producer as the member holds it: started, stopped, and its transaction state."""

    made = 0

    def __init__(self, stop_fails: bool = False) -> None:
        Producer.made += 1
        self.name = f"producer {Producer.made}"
        self.events: list[str] = []
        self.stop_fails = stop_fails
        self._txn_manager: Any = SimpleNamespace(state=TransactionState.READY)

    async def start(self) -> None:
        self.events.append("start")

    async def stop(self) -> None:
        self.events.append("stop")
        if self.stop_fails:
            raise RuntimeError("fenced")


def test_a_renewed_producer_replaces_the_fenced_one_in_place() -> None:
    made: list[Producer] = []

    def make() -> Producer:
        made.append(Producer(stop_fails=not made))  # the first, fenced, cannot stop cleanly
        return made[-1]

    renewable = Renewable(make)
    first = renewable.current
    assert renewable.name == first.name  # the member calls it as the producer itself
    assert not renewable.fenced()
    first._txn_manager.state = TransactionState.FATAL_ERROR
    assert renewable.fenced()
    asyncio.run(renewable.renew())
    assert renewable.current is made[1] and renewable.name == made[1].name
    assert (first.events, made[1].events) == (["stop"], ["start"])
    assert not renewable.fenced()


def test_a_producer_without_transactions_is_never_fenced() -> None:
    plain = Producer()
    plain._txn_manager = None
    assert not Renewable(lambda: plain).fenced()


def test_exactly_once_gives_each_producer_a_transactional_id_of_its_own() -> None:
    tx = TransactionSettings(group_id="tx-group", transaction_timeout_s=7)

    async def made() -> tuple[Any, Any, Any]:
        settings = RuntimeSettings()
        return (
            transaction_producer(settings, tx, exactly_once=True),
            transaction_producer(settings, tx, exactly_once=True),
            transaction_producer(settings, tx, exactly_once=False),
        )

    first, second, plain = asyncio.run(made())
    ids = [p._txn_manager.transactional_id for p in (first, second)]
    assert all(i.startswith("tx-group.") for i in ids) and ids[0] != ids[1]
    assert first._txn_manager.transaction_timeout_ms == 7000
    assert plain._txn_manager is None
