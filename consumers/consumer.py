"""The consumer of business topics: typed events, per-key order, commit after the handler.

One aiokafka consumer group member. Each fetched batch is handled partition by
partition, record by record in offset order, so every event of one key (one partition)
reaches the handler in the order it was produced. A record is decoded into its
contract's pydantic model (the writer schema's name picks the model among those given),
judged against the deduplication window (:mod:`bizevents.consumers.window`), and handed to the
handler with its coordinates and lineage. The batch's offsets are committed once the
handler returned for every record of it and the dead-letter records of it are
acknowledged: a crash re-delivers, never skips.

Poison: a record that does not decode (bad bytes, an unknown schema, a value that breaks
its contract), or whose handler raised ``attempts`` times, goes with its original key,
value and headers, plus the stage, reason and coordinates, to the consumer's
dead-letter topic; the partition goes on.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import structlog

from bizevents.consumers.window import EventWindow, Verdict
from bizevents.contracts.business import (
    HEADER_DLQ_ERROR,
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    BusinessEvent,
    Lineage,
)
from bizevents.contracts.exceptions import DecodeError
from bizevents.contracts.serde import BusinessDeserializer
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import ensure_topics
from bizevents.plumbing.registry import registry_client
from bizevents.plumbing.settings import KafkaSettings, RegistrySettings

__all__ = [
    "HEADER_CONSUMER_GROUP",
    "HEADER_CONSUMER_OFFSET",
    "HEADER_CONSUMER_PARTITION",
    "HEADER_CONSUMER_TOPIC",
    "BusinessConsumer",
    "ConsumerStats",
    "Delivery",
    "Handler",
    "consume",
]

E = TypeVar("E", bound=BusinessEvent)

#: Where a dead-lettered record was read (the lineage headers name its technical source).
HEADER_CONSUMER_TOPIC: Final = "bizevents.consumer.topic"
HEADER_CONSUMER_PARTITION: Final = "bizevents.consumer.partition"
HEADER_CONSUMER_OFFSET: Final = "bizevents.consumer.offset"
HEADER_CONSUMER_GROUP: Final = "bizevents.consumer.group"

log = structlog.get_logger("consumer")


@dataclass(frozen=True, slots=True)
class Delivery(Generic[E]):
    """One business event for the handler, with where it was read and what it is."""

    event: E
    key: bytes | None
    topic: str
    partition: int
    offset: int
    #: The same event id was handled before from a lower translator version (or live,
    #: and this comes from a replay): this event replaces that one.
    supersedes: bool = False

    @property
    def lineage(self) -> Lineage:
        return self.event.lineage

    @property
    def event_id(self) -> str:
        return self.event.lineage.event_id

    @property
    def replayed(self) -> bool:
        """A replay wrote it (a correction of an event possibly older than the window)."""
        return self.event.lineage.replay


Handler = Callable[[Delivery[Any]], Awaitable[None] | None]


@dataclass(slots=True)
class ConsumerStats:
    """What happened to the records read."""

    delivered: int = 0
    corrections: int = 0
    duplicates: int = 0
    stale: int = 0
    dead_lettered: int = 0
    commits: int = 0


class BusinessConsumer:
    """Reads business topics as a member of ``group_id`` and calls ``handler`` per event.

    ``contracts`` are the models the topics may carry. ``dedup_window`` ids are
    remembered (0: no deduplication). A handler that raises is called again up to
    ``attempts`` times in all, ``retry_backoff_s`` apart, then its record is
    dead-lettered to ``dead_letter_topic`` (default ``<group_id>.dead-letter``). At
    start an unreachable cluster is waited for up to ``broker_wait_s``.
    """

    def __init__(
        self,
        topics: Sequence[str],
        handler: Handler,
        *,
        contracts: Sequence[type[BusinessEvent]],
        group_id: str,
        kafka: KafkaSettings,
        registry: RegistrySettings | Any,
        dead_letter_topic: str | None = None,
        dedup_window: int = 100_000,
        attempts: int = 3,
        retry_backoff_s: float = 0.5,
        max_records: int = 500,
        broker_wait_s: float = 60.0,
    ) -> None:
        if not topics:
            raise ValueError("name at least one business topic to consume")
        if not contracts:
            raise ValueError("name the contracts the topics carry")
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {attempts}")
        self.topics = tuple(topics)
        self.handler = handler
        self.group_id = group_id
        self.kafka = kafka
        client = registry_client(registry) if isinstance(registry, RegistrySettings) else registry
        self._decode = BusinessDeserializer(client, *contracts)
        self.dead_letter_topic = dead_letter_topic or f"{group_id}.dead-letter"
        self.window = EventWindow(dedup_window) if dedup_window else None
        self.attempts = attempts
        self.retry_backoff_s = retry_backoff_s
        self.max_records = max_records
        self.broker_wait_s = broker_wait_s
        self.stats = ConsumerStats()
        self._stop = asyncio.Event()
        self._is_async = inspect.iscoroutinefunction(handler)

    def stop(self) -> None:
        """Finish the batch in hand, commit it, and return from :meth:`run`."""
        self._stop.set()

    async def run(self) -> None:
        """Consume until :meth:`stop` (SIGTERM and SIGINT call it under :func:`consume`)."""
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.errors import CommitFailedError, KafkaError

        await self._wait_for_broker()
        conf = self.kafka.aiokafka()
        consumer = AIOKafkaConsumer(
            *self.topics,
            **conf,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # never latest: ListOffsets is wrong on Tansu
        )
        # not idempotent: aiokafka's InitProducerId fails on Tansu (docs/broker.md)
        producer = AIOKafkaProducer(**conf, acks="all")
        try:
            await consumer.start()
            await producer.start()
        except KafkaError as exc:
            await _stop_quietly(consumer, producer)
            raise TransientError(
                f"cannot reach Kafka at {self.kafka.bootstrap_servers}: {exc}"
            ) from exc
        bound = log.bind(group=self.group_id)
        try:
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=200, max_records=self.max_records)
                if not batches:
                    continue
                pending: list[asyncio.Future[Any]] = []
                offsets = {}
                for tp, records in batches.items():
                    for record in records:
                        future = await self._one(record, producer, bound)
                        if future is not None:
                            pending.append(future)
                    offsets[tp] = records[-1].offset + 1
                if pending:
                    await asyncio.gather(*pending)
                try:
                    await consumer.commit(offsets)
                    self.stats.commits += 1
                except CommitFailedError as exc:
                    # A rebalance took the partitions: their new owner reads them again.
                    bound.warning("commit refused after a rebalance", error=str(exc))
        finally:
            await _stop_quietly(consumer, producer)

    async def _wait_for_broker(self) -> None:
        """The dead-letter topic, waiting up to ``broker_wait_s`` for an unreachable
        cluster: a consumer (re)started while Kafka is briefly away starts once it is
        back, as the worker does, instead of exiting."""
        deadline = time.monotonic() + self.broker_wait_s
        while True:
            try:
                await asyncio.to_thread(self._ensure_dead_letter_topic)
                return
            except TransientError as exc:
                if time.monotonic() > deadline or self._stop.is_set():
                    raise
                log.warning("waiting for the broker", group=self.group_id, error=str(exc))
                await asyncio.sleep(1)

    def _ensure_dead_letter_topic(self) -> None:
        """The dead-letter topic, created (one partition) when missing."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.kafka.librdkafka(), "log.connection.close": False})
        ensure_topics(admin, [self.dead_letter_topic], 1, timeout_s=15)

    async def _one(self, record: Any, producer: Any, bound: Any) -> asyncio.Future[Any] | None:
        where = bound.bind(topic=record.topic, partition=record.partition, offset=record.offset)
        try:
            if record.value is None:
                raise DecodeError("the record has no value (a business event is never null)")
            event = self._decode(record.value, record.topic)
        except DecodeError as exc:
            return await self._dead_letter(record, producer, "decode", exc.reason, exc, where)
        lineage = event.lineage
        verdict = Verdict.NEW if self.window is None else self.window.judge(lineage)
        if verdict is Verdict.DUPLICATE:
            self.stats.duplicates += 1
            return None
        if verdict is Verdict.STALE:
            self.stats.stale += 1
            where.info(
                "stale event skipped", event_id=lineage.event_id, translator=lineage.translator
            )
            return None
        delivery = Delivery(
            event,
            record.key,
            record.topic,
            record.partition,
            record.offset,
            supersedes=verdict is Verdict.CORRECTION,
        )
        failure: Exception | None = None
        for attempt in range(1, self.attempts + 1):
            try:
                result = self.handler(delivery)
                if self._is_async or inspect.isawaitable(result):
                    await result  # type: ignore[misc]
                failure = None
                break
            except Exception as exc:  # the handler's bug must not stop the partition
                failure = exc
                where.warning(
                    "handler failed", attempt=attempt, error=f"{type(exc).__name__}: {exc}"
                )
                if attempt < self.attempts:
                    await asyncio.sleep(self.retry_backoff_s * attempt)
        if self.window is not None:
            self.window.remember(lineage)
        if failure is not None:
            reason = f"the handler raised {type(failure).__name__}: {failure}"
            return await self._dead_letter(record, producer, "handler", reason, failure, where)
        self.stats.delivered += 1
        if delivery.supersedes:
            self.stats.corrections += 1
        return None

    async def _dead_letter(
        self, record: Any, producer: Any, stage: str, reason: str, exc: Exception, where: Any
    ) -> asyncio.Future[Any]:
        self.stats.dead_lettered += 1
        where.warning("dead-lettered", stage=stage, reason=reason, topic=self.dead_letter_topic)
        headers = [
            *(record.headers or ()),
            (HEADER_DLQ_STAGE, f"consume-{stage}".encode()),
            (HEADER_DLQ_REASON, reason.encode()),
            (HEADER_DLQ_ERROR, type(exc).__name__.encode()),
            (HEADER_CONSUMER_TOPIC, record.topic.encode()),
            (HEADER_CONSUMER_PARTITION, str(record.partition).encode()),
            (HEADER_CONSUMER_OFFSET, str(record.offset).encode()),
            (HEADER_CONSUMER_GROUP, self.group_id.encode()),
        ]
        future: asyncio.Future[Any] = await producer.send(
            self.dead_letter_topic, value=record.value, key=record.key, headers=headers
        )
        return future


async def _stop_quietly(*clients: Any) -> None:
    for client in clients:
        with suppress(Exception):
            await client.stop()


def consume(
    topics: Sequence[str],
    handler: Handler,
    *,
    contracts: Sequence[type[BusinessEvent]],
    group_id: str,
    kafka: KafkaSettings | None = None,
    registry: RegistrySettings | None = None,
    **options: Any,
) -> ConsumerStats:
    """Run a :class:`BusinessConsumer` until SIGTERM or SIGINT; its counts at the end.

    ``kafka`` and ``registry`` default to the settings' defaults (the dev stack);
    ``options`` are :class:`BusinessConsumer`'s.
    """
    consumer = BusinessConsumer(
        topics,
        handler,
        contracts=contracts,
        group_id=group_id,
        kafka=kafka or KafkaSettings(),
        registry=registry or RegistrySettings(),
        **options,
    )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, consumer.stop)
        await consumer.run()

    asyncio.run(main())
    return consumer.stats
