"""The transaction worker's producers: at least once, one for everything; exactly once,
one transactional producer per owned virtual partition, named for it, made anew at each
rebuild so that the partition's next owner fences the previous one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bizevents.translators import txproducer
from bizevents.translators.settings import RuntimeSettings, TransactionSettings
from bizevents.translators.txproducer import Producers, transaction_producer

TX = TransactionSettings(group_id="tx-group", transaction_timeout_s=7)


class Fake:
    """A producer as the member holds it: what was done to it, in order."""

    def __init__(self, transactional_id: str | None) -> None:
        self.transactional_id = transactional_id
        self.events: list[str] = []
        self._txn_manager = type("Txn", (), {"producer_epoch": 0})()

    async def start(self) -> None:
        self.events.append("start")

    async def begin_transaction(self) -> None:
        self.events.append("begin")

    async def commit_transaction(self) -> None:
        self.events.append("commit")

    async def stop(self) -> None:
        self.events.append("stop")


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Fake]:
    fakes: list[Fake] = []

    def make(_settings: Any, _tx: Any, transactional_id: str | None) -> Fake:
        fakes.append(Fake(transactional_id))
        return fakes[-1]

    monkeypatch.setattr(txproducer, "transaction_producer", make)
    return fakes


def test_exactly_once_gives_each_owned_partition_a_producer_named_for_it(
    made: list[Fake],
) -> None:
    producers = Producers(RuntimeSettings(), TX, exactly_once=True)
    assert made == []  # nothing shared
    asyncio.run(producers.own(frozenset({2, 0})))
    assert [p.transactional_id for p in made] == ["tx-group.assembly.0", "tx-group.assembly.2"]
    assert producers.of(2) is made[1] and producers.first() is made[0]
    assert all(p.events == ["start", "begin"] for p in made)
    asyncio.run(producers.commit())
    assert all(p.events == ["start", "begin", "commit", "begin"] for p in made)


def test_a_rebuild_stops_the_old_producers_and_makes_new_ones(made: list[Fake]) -> None:
    producers = Producers(RuntimeSettings(), TX, exactly_once=True)
    asyncio.run(producers.own(frozenset({0, 1})))
    old = list(made)
    asyncio.run(producers.own(frozenset({1, 3})))
    assert all(p.events[-1] == "stop" for p in old)
    new = made[2:]
    assert [p.transactional_id for p in new] == ["tx-group.assembly.1", "tx-group.assembly.3"]
    assert producers.of(1) is new[0]  # the same id, a new producer: it fences the old one
    with pytest.raises(KeyError):
        producers.of(0)


def test_at_least_once_one_producer_serves_every_partition(made: list[Fake]) -> None:
    producers = Producers(RuntimeSettings(), TX, exactly_once=False)
    asyncio.run(producers.start())
    asyncio.run(producers.own(frozenset({0, 1})))
    assert len(made) == 1 and made[0].transactional_id is None
    assert producers.of(0) is producers.of(1) is producers.first() is made[0]
    assert made[0].events == ["start"]


def test_a_transactional_producer_carries_its_id_and_the_transaction_timeout() -> None:
    async def both() -> tuple[Any, Any]:
        settings = RuntimeSettings()
        return (
            transaction_producer(settings, TX, "tx-group.assembly.5"),
            transaction_producer(settings, TX, None),
        )

    named, plain = asyncio.run(both())
    assert named._txn_manager.transactional_id == "tx-group.assembly.5"
    assert named._txn_manager.transaction_timeout_ms == 7000
    assert plain._txn_manager is None
