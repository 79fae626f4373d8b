"""The transaction worker's producer under exactly once, renewed in place when the broker
fenced it (docs/reliability.md: a transaction open past its timeout while the cluster
restarted is aborted by the broker, and the producer that held it can do nothing more)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from bizevents.translators.settings import RuntimeSettings, TransactionSettings


def transaction_producer(
    settings: RuntimeSettings, tx: TransactionSettings, exactly_once: bool
) -> Any:
    """A new producer; under exactly once a transactional one with an id of its own: a
    restarted member's is new, so a killed one's open transaction ends at its timeout
    (the broker aborts it)."""
    from aiokafka import AIOKafkaProducer

    transactional: dict[str, Any] = {}
    if exactly_once:
        transactional = {
            "transactional_id": f"{tx.group_id}.{uuid.uuid4().hex}",
            "transaction_timeout_ms": int(tx.transaction_timeout_s * 1000),
        }
    return AIOKafkaProducer(
        **settings.kafka.aiokafka(),
        acks="all",
        request_timeout_ms=int(tx.request_timeout_s * 1000),
        **transactional,
    )


class Renewable:
    """The producer, renewed in place (the member's clients and listeners hold this one
    object). aiokafka's transactional producer is done for once fenced (its state
    ``FATAL_ERROR``, ``_txn_manager``: private, aiokafka 0.14): it can neither abort nor
    send again."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self.current = make()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.current, name)

    def fenced(self) -> bool:
        from aiokafka.producer.transaction_manager import TransactionState

        manager = self.current._txn_manager
        return manager is not None and manager.state is TransactionState.FATAL_ERROR

    async def renew(self) -> None:
        """A new producer (a new transactional id) started in the old one's place."""
        old, self.current = self.current, self._make()
        with suppress(Exception):  # fenced: what it held is aborted anyway
            await old.stop()
        await self.current.start()
