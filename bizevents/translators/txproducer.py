"""The transaction worker's clients: its reader (:func:`transaction_reader`, each batch
read by :func:`read_held`, which leaves out what ``txpacing`` holds back), and its
producers. At least once: one for everything. Exactly once:
one transactional producer per owned virtual partition, whose id names the partition,
so that the partition's next owner fences the previous one (docs/reliability.md); all
made anew at each rebuild (aiokafka's transactional producer is done for once fenced:
its state ``FATAL_ERROR``, ``_txn_manager``: private, aiokafka 0.14)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

import structlog

from bizevents.plumbing.errors import TransientError
from bizevents.translators.assembly import Assembler
from bizevents.translators.metrics import WorkerStats
from bizevents.translators.produce import Send, send_batches
from bizevents.translators.settings import RuntimeSettings, TransactionSettings
from bizevents.translators.txpacing import Frontier

__all__ = [
    "Producers",
    "Routed",
    "read_held",
    "send_routed",
    "transaction_producer",
    "transaction_reader",
]

log = structlog.get_logger("transactions")

#: Records to send with one producer (exactly once, an owned partition's).
Routed = tuple[Any, Sequence[Send]]


def transaction_reader(settings: RuntimeSettings) -> Any:
    """The member's reader: assign mode, no group (it places itself at checkpoints)."""
    from aiokafka import AIOKafkaConsumer

    t = settings.translate
    return AIOKafkaConsumer(
        **settings.kafka.aiokafka(),
        group_id=None,
        enable_auto_commit=False,
        # an empty fetch held long delays what arrives meanwhile on the embedded
        # broker (docs/broker.md)
        fetch_max_wait_ms=t.fetch_max_wait_ms,
        max_partition_fetch_bytes=t.max_fetch_bytes,
    )


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
        self._by_partition: dict[int, Any] = {}

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
        transaction, before the checkpoints are read (at every rebuild: after a
        rebalance, and after a failure, when what the old ones held is read again). Its
        start aborts what the partition's previous producer held open and fences it,
        this member's own or another's (a member paused past its session, or cut off by
        a broker fault, that lost the partition meanwhile)."""
        if not self.exactly_once:
            return
        old, self._by_partition = self._by_partition, {}
        timeout = self._tx.request_timeout_s
        for producer in old.values():
            with suppress(Exception):  # fenced, or the broker gone: nothing to keep
                # not the request timeout: what it still holds is aborted by the new one
                await asyncio.wait_for(producer.stop(), 5.0)
        made = {v: self._make(v) for v in sorted(owned)}
        try:
            await asyncio.gather(*(producer.start() for producer in made.values()))
            for producer in made.values():
                await producer.begin_transaction()
        except BaseException:
            for producer in made.values():
                with suppress(Exception):
                    await asyncio.wait_for(producer.stop(), timeout)
            raise
        self._by_partition = made
        # which producer epoch holds each partition: a fenced member's log shows a lower one
        epochs = {v: p._txn_manager.producer_epoch for v, p in made.items()}
        log.info("partition producers started", epochs=epochs)

    async def commit(self) -> None:
        """Commit each partition's transaction and begin the next."""
        for producer in self._by_partition.values():
            await producer.commit_transaction()
            await producer.begin_transaction()

    async def stop(self) -> None:
        producers = [self._shared, *self._by_partition.values()]
        for producer in producers:
            if producer is not None:
                with suppress(Exception):
                    await producer.stop()

    def _make(self, v: int) -> Any:
        name = f"{self._tx.group_id}.assembly.{v}"
        return transaction_producer(self._settings, self._tx, name)


async def send_routed(routed: Sequence[Routed]) -> asyncio.Future[Any]:
    """Each producer's items appended to one batch per topic and partition, in order
    (one call per producer: two batches in flight to one partition left their failures
    unread in aiokafka when the broker paused); the future of the broker's
    acknowledgement of them all.

    Exactly once, a partition's transaction may be gone (the broker aborted it past its
    timeout, or an error left the producer out of it), and aiokafka then refuses the send
    with ``IllegalOperation``, not a Kafka error: it is a :class:`TransientError`, which
    the member answers by reading again from its checkpoints under new producers, as for
    a producer fenced (it exited with a traceback before)."""
    from aiokafka.errors import IllegalOperation

    merged: dict[int, tuple[Any, list[Send]]] = {}
    for producer, items in routed:
        merged.setdefault(id(producer), (producer, []))[1].extend(items)
    try:
        sent = [await send_batches(p, items, "a producer batch") for p, items in merged.values()]
    except IllegalOperation as exc:
        raise TransientError(f"a partition's transaction is gone: {exc}") from exc
    return asyncio.gather(*(f for futures in sent for f in futures))


async def read_held(
    reader: Any, frontier: Frontier, assembler: Assembler | None, stats: WorkerStats, limit: int
) -> dict[Any, Sequence[Any]]:
    """The member's next batch from ``reader`` (at most ``limit`` records), of every
    partition assigned but those ``frontier`` holds back (past the oldest open
    transaction while many are open: a worker catching up); ``stats`` shows both."""
    assigned = reader.assignment()
    read, most = frontier.turn(assembler, assigned, limit)
    stalled = frontier.stalled(assembler, time.monotonic())
    if stalled is not None:
        log.warning("a transaction holds up its partitions", waiting=stalled[0], for_s=stalled[1])
    stats.tx_open = 0 if assembler is None else assembler.open_transactions
    stats.tx_held = 0 if read is None else len(assigned) - len(read)
    if read is None:
        return await reader.getmany(timeout_ms=200, max_records=most)  # type: ignore[no-any-return]
    return await reader.getmany(*read, timeout_ms=200, max_records=most)  # type: ignore[no-any-return]
