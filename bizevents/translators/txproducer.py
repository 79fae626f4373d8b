"""The transaction worker's producers. At least once: one for everything. Exactly once:
one transactional producer per owned virtual partition, whose id names the partition,
so that the partition's next owner fences the previous one (docs/reliability.md); each
is renewed in place when the broker fenced it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

import structlog

from bizevents.translators.produce import Send
from bizevents.translators.settings import RuntimeSettings, TransactionSettings

__all__ = ["Producers", "Renewable", "Routed", "transaction_producer"]

log = structlog.get_logger("transactions")

#: Records to send with one producer (exactly once, an owned partition's).
Routed = tuple[Any, Sequence[Send]]


def transaction_producer(
    settings: RuntimeSettings, tx: TransactionSettings, transactional_id: str | None
) -> Any:
    """A new producer; with ``transactional_id`` a transactional one: its start
    (``InitProducerId``) aborts what an earlier producer of that id left open and
    fences it."""
    from aiokafka import AIOKafkaProducer

    transactional: dict[str, Any] = {}
    if transactional_id is not None:
        transactional = {
            "transactional_id": transactional_id,
            "transaction_timeout_ms": int(tx.transaction_timeout_s * 1000),
        }
    return AIOKafkaProducer(
        **settings.kafka.aiokafka(),
        acks="all",
        request_timeout_ms=int(tx.request_timeout_s * 1000),
        **transactional,
    )


class Renewable:
    """A producer, renewed in place. aiokafka's transactional producer is done for once
    fenced (its state ``FATAL_ERROR``, ``_txn_manager``: private, aiokafka 0.14): it can
    neither abort nor send again."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self.current = make()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.current, name)

    async def renew(self) -> None:
        """A new producer of the same id started in the old one's place."""
        old, self.current = self.current, self._make()
        with suppress(Exception):  # fenced: what it held is aborted anyway
            await old.stop()
        await self.current.start()


class Producers:
    """A member's producers. Exactly once, one per owned virtual partition, its
    transactional id ``<group_id>.assembly.<v>`` (as Kafka Streams' first exactly-once
    design had one per task): a member that lost a partition while it was paused or cut
    off from the cluster cannot commit what it held once the next owner started its
    producer. At least once, one producer serves every partition."""

    def __init__(
        self, settings: RuntimeSettings, tx: TransactionSettings, exactly_once: bool
    ) -> None:
        self._settings = settings
        self._tx = tx
        self.exactly_once = exactly_once
        self._shared: Any = None if exactly_once else transaction_producer(settings, tx, None)
        self._by_partition: dict[int, Renewable] = {}

    def of(self, v: int) -> Any:
        """The producer of virtual partition ``v`` (owned)."""
        return self._shared if self._shared is not None else self._by_partition[v]

    def first(self) -> Any:
        """The producer of what belongs to no one partition (hand-overs, re-drives, the
        shadows' figures): the lowest owned partition's."""
        if self._shared is not None:
            return self._shared
        return self._by_partition[min(self._by_partition)]

    async def start(self) -> None:
        if self._shared is not None:
            await self._shared.start()

    async def own(self, owned: frozenset[int]) -> None:
        """Exactly once: a new producer for each partition of ``owned``, each in a new
        transaction, before the checkpoints are read. Its start aborts what the
        partition's previous owner held open and fences that one, even where this
        member owned the partition before (another may have owned it meanwhile, while
        this one was paused); the producers of partitions not owned are stopped."""
        if not self.exactly_once:
            return
        old, self._by_partition = self._by_partition, {}
        for producer in old.values():
            with suppress(Exception):  # fenced already, or the broker gone: nothing to keep
                await producer.stop()
        made = {v: Renewable(self._maker(v)) for v in sorted(owned)}
        await asyncio.gather(*(producer.current.start() for producer in made.values()))
        for producer in made.values():
            await producer.begin_transaction()
        self._by_partition = made
        # which producer epoch owns each partition: a fenced member's log shows a lower one
        epochs = {v: p.current._txn_manager.producer_epoch for v, p in made.items()}
        log.info("partition producers started", epochs=epochs)

    async def commit(self) -> None:
        """Commit each partition's transaction and begin the next."""
        for producer in self._by_partition.values():
            await producer.commit_transaction()
            await producer.begin_transaction()

    async def abort(self) -> None:
        """Abort each partition's open transaction and begin the next. A transaction the
        broker aborted itself (open past ``transaction_timeout_s`` while the cluster
        restarted or the member was paused), or another owner's start, left its producer
        fenced for good: a new one of the same id takes over (if the partition has
        another owner now, the two fence each other until this member learns from the
        group that it lost it, and each reads again from the checkpoints)."""
        from aiokafka.errors import ProducerFenced
        from aiokafka.producer.transaction_manager import TransactionState

        timeout = self._tx.request_timeout_s
        for producer in self._by_partition.values():
            state = producer.current._txn_manager.state
            try:
                if state in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR):
                    await asyncio.wait_for(producer.abort_transaction(), timeout)
                elif state is not TransactionState.READY:
                    # fenced, or a commit that never ended (the next start ends it)
                    raise ProducerFenced()
            except ProducerFenced:
                log.warning("the broker aborted the open transaction; a new producer takes over")
                await asyncio.wait_for(producer.renew(), timeout)
            await producer.begin_transaction()

    async def stop(self) -> None:
        producers = [self._shared, *self._by_partition.values()]
        for producer in producers:
            if producer is not None:
                with suppress(Exception):
                    await producer.stop()

    def _maker(self, v: int) -> Callable[[], Any]:
        name = f"{self._tx.group_id}.assembly.{v}"
        return lambda: transaction_producer(self._settings, self._tx, name)
