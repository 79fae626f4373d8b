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
dead-letter topic; the partition goes on. With ``on_error="park"`` (the default) it also
parks its key: the key's later events go to the dead-letter topic behind it, marked
parked, without a handler call, until ``bizevents dlq redrive --consumer GROUP`` asks
the member that owns the key's partition to hand them to the (fixed) handler in order
and unpark the key (docs/parking.md). The parked keys live in a compacted topic of the
group's, restored whenever the group assigns partitions; batches, re-drives and those
restores take turns (one lock), so a rebalance never splits one of them.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import replace
from typing import Any, TypeVar

import structlog

from bizevents.consumers.delivery import ConsumerStats, Delivery, Handler, is_snapshot
from bizevents.consumers.parking import (
    HEADER_CONSUMER_GROUP,
    HEADER_CONSUMER_OFFSET,
    HEADER_CONSUMER_PARTITION,
    HEADER_CONSUMER_TOPIC,
    parked_events,
)
from bizevents.consumers.window import EventWindow, Verdict
from bizevents.contracts.business import (
    HEADER_DLQ_ERROR,
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    BusinessEvent,
)
from bizevents.contracts.exceptions import DecodeError
from bizevents.contracts.serde import BusinessDeserializer
from bizevents.plumbing.errors import ConfigError, TerminalError, TransientError
from bizevents.plumbing.kafka import (
    broker_traits,
    ensure_topics,
    traits_of,
)
from bizevents.plumbing.member import Partitions, leave_group, rebalance_listener, restore_parked
from bizevents.plumbing.parking import (
    PARKED_MARK,
    STAGE_PARKED,
    OnError,
    ParkedKeys,
    Ref,
    Request,
    ref_key,
)
from bizevents.plumbing.parkingio import read_requests, read_to_end
from bizevents.plumbing.registry import registry_client
from bizevents.plumbing.settings import KafkaSettings, RegistrySettings

__all__ = ["BusinessConsumer", "ConsumerFailedError", "consume"]

E = TypeVar("E", bound=BusinessEvent)
#: (stage, reason, error type) of a record that failed
Failure = tuple[str, str, str]

log = structlog.get_logger("consumer")


class ConsumerFailedError(TerminalError):
    """A record failed with ``on_error="fail"``: the consumer stops."""


class BusinessConsumer:
    """Reads business topics as a member of ``group_id`` and calls ``handler`` per event.

    ``contracts`` are the models the topics may carry. ``dedup_window`` ids are
    remembered (0: no deduplication). A handler that raises is called again up to
    ``attempts`` times in all, ``retry_backoff_s`` apart; then, as for a record that does
    not decode, ``on_error`` says what happens: ``"park"`` (its key is parked, see the
    module's doc; ``parked_topic``, default ``<group_id>.parked``, at most
    ``max_parked_keys`` keys), ``"dead-letter"`` (the record goes to
    ``dead_letter_topic``, default ``<group_id>.dead-letter``, and the key's later events
    are handled) or ``"fail"`` (:class:`ConsumerFailedError`). At start an unreachable
    cluster is waited for up to ``broker_wait_s``. With ``metrics_port`` (0: a free
    port), :meth:`run` serves the member's counts and parked keys in the Prometheus text
    format on ``metrics_host`` (:mod:`bizevents.consumers.metrics`; ``metrics_url``
    says where).
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
        on_error: OnError = "park",
        parked_topic: str | None = None,
        max_parked_keys: int = 10_000,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
    ) -> None:
        if not topics:
            raise ValueError("name at least one business topic to consume")
        if not contracts:
            raise ValueError("name the contracts the topics carry")
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {attempts}")
        if on_error not in ("park", "dead-letter", "fail"):
            raise ValueError(f'on_error is "park", "dead-letter" or "fail", not {on_error!r}')
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
        self.on_error: OnError = on_error
        self.parked_topic = parked_topic or f"{group_id}.parked"
        #: the group's parked keys (the group stands where a translator's name stands)
        self.parking = ParkedKeys(max_parked_keys, "consumer group", "max_parked_keys")
        #: re-drive and discard requests (id -> the latest record of it)
        self.requests: dict[str, Request] = {}
        self.stats = ConsumerStats()
        #: the (topic, partition)s the group assigned to this member (the metrics count
        #: the parked keys of these)
        self.owned: frozenset[tuple[str, int]] = frozenset()
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        #: where :meth:`run` serves the metrics (None: not serving)
        self.metrics_url: str | None = None
        self._stop = asyncio.Event()
        self._is_async = inspect.iscoroutinefunction(handler)
        # Batches, re-drives and restores take turns: a revoke waits for the one in hand,
        # so the partitions' next owner restores every park this member wrote.
        self._turn = asyncio.Lock()
        #: from a revoke until the restore after the assignment: batches wait (are held)
        self._stale = True
        self._held: list[dict[Any, list[Any]]] = []
        self._failed: BaseException | None = None
        #: request id -> (last parked offset re-driven, how many) of an unfinished re-drive
        self._progress: dict[str, tuple[int, int]] = {}

    def stop(self) -> None:
        """Finish the batch in hand, commit it, and return from :meth:`run`."""
        self._stop.set()

    async def run(self) -> None:
        """Consume until :meth:`stop` (SIGTERM and SIGINT call it under :func:`consume`),
        serving the metrics meanwhile when asked to."""
        if self.metrics_port is None:
            await self._consume()
            return
        from bizevents.consumers.metrics import serve_metrics

        host = self.metrics_host
        try:
            server, port = serve_metrics(self, host, self.metrics_port)
        except OSError as exc:
            raise ConfigError(
                f"consumer group {self.group_id} cannot serve its metrics on "
                f"{host}:{self.metrics_port}: {exc.strerror or exc}"
            ) from None
        self.metrics_url = f"http://{host}:{port}/metrics"
        log.info("metrics endpoint", group=self.group_id, url=self.metrics_url)
        try:
            await self._consume()
        finally:
            self.metrics_url = None
            await asyncio.to_thread(server.shutdown)  # waits for its loop's next turn
            server.server_close()

    async def _consume(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

        await self._wait_for_broker()
        conf = self.kafka.aiokafka()
        traits = broker_traits(self.kafka.bootstrap_servers, self.kafka.security_protocol)
        consumer = AIOKafkaConsumer(
            **conf,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # never latest: ListOffsets is wrong on Tansu
            # a worker's aborted transactions are skipped where the broker has them
            # (exactly once, docs/reliability.md); aiokafka's default reads them
            isolation_level="read_committed" if traits.transactions else "read_uncommitted",
        )
        consumer.subscribe(
            list(self.topics), listener=rebalance_listener(self._revoked, self._assigned)
        )
        # not idempotent: aiokafka's InitProducerId fails on Tansu (docs/broker.md)
        producer = AIOKafkaProducer(**conf, acks="all")
        try:
            await consumer.start()
            await producer.start()
            traits_of(consumer)  # probed now: its stop may come while the broker is paused
        except KafkaError as exc:
            await _stop_quietly(consumer, producer)
            raise TransientError(
                f"cannot reach Kafka at {self.kafka.bootstrap_servers}: {exc}"
            ) from exc
        bound = log.bind(group=self.group_id)
        requests: _RequestReader | None = None
        try:
            requests = _RequestReader(self.kafka.librdkafka(), self.parked_topic)
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=200, max_records=self.max_records)
                async with self._turn:
                    if self._failed is not None:
                        raise self._failed
                    if batches:
                        self._held.append(batches)
                    if self._stale:
                        continue  # until the restore after the assignment
                    owned = consumer.assignment()
                    held, self._held = self._held, []
                    for batch in held:
                        mine = {tp: records for tp, records in batch.items() if tp in owned}
                        if not mine:
                            continue
                        offsets = await self._batch(mine, producer, bound)
                        try:
                            await consumer.commit(offsets)
                            self.stats.commits += 1
                        except (CommitFailedError, IllegalStateError) as exc:
                            # A rebalance took the partitions: their new owner reads them again.
                            bound.warning("commit refused after a rebalance", error=str(exc))
                    for request in await requests.news(self.requests):
                        if (request.topic, request.partition) in {
                            (tp.topic, tp.partition) for tp in owned
                        }:
                            await self._carry_out(request, producer, bound)
        finally:
            if requests is not None:
                requests.close()
            await leave_group(consumer, (("consumer", consumer), ("producer", producer)))

    async def _batch(self, batches: dict[Any, list[Any]], producer: Any, bound: Any) -> Any:
        """Handle one fetched batch; its offsets to commit, once every record was handled
        and its dead-letter and parked-topic records are acknowledged."""
        pending: list[asyncio.Future[Any]] = []
        offsets = {}
        for tp, records in batches.items():
            for record in records:
                pending += await self._one(record, producer, bound)
            offsets[tp] = records[-1].offset + 1
        if pending:
            await asyncio.gather(*pending)
        return offsets

    async def _revoked(self, taken: Partitions) -> None:
        async with self._turn:  # after the batch or re-drive in hand
            self._stale = True
            self.owned = frozenset()

    async def _assigned(self, given: Partitions) -> None:
        await self._restore()
        self.owned = given

    async def _restore(self) -> None:
        """After an assignment: the group's parked keys and pending requests, read whole
        from the parked topic (the last record of each key wins, as compaction leaves
        it). A failure stops :meth:`run` (aiokafka would only log it)."""
        async with self._turn:
            try:
                conf = self.kafka.librdkafka()
                await restore_parked(conf, self.parked_topic, self.parking, self.requests)
            except Exception as exc:
                self._failed = exc
                return
            self._progress.clear()
            self._stale = False
            log.info("parked keys restored", group=self.group_id, keys=len(self.parking.parked))

    async def _wait_for_broker(self) -> None:
        """The dead-letter and parked topics, waiting up to ``broker_wait_s`` for an
        unreachable cluster: a consumer (re)started while Kafka is briefly away starts
        once it is back, as the worker does, instead of exiting."""
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
        """The dead-letter topic and the parked topic (compacted), created (one partition
        each) when missing."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.kafka.librdkafka(), "log.connection.close": False})
        ensure_topics(admin, [self.dead_letter_topic], 1, timeout_s=15)
        compacted = {"cleanup.policy": "compact"}
        ensure_topics(admin, [self.parked_topic], 1, config=compacted, timeout_s=15)

    async def _one(self, record: Any, producer: Any, bound: Any) -> list[asyncio.Future[Any]]:
        """Handle one live record; the futures of what it wrote."""
        where = bound.bind(topic=record.topic, partition=record.partition, offset=record.offset)
        if record.topic in self.parking.watched:  # else nothing is parked there: no lookup
            ref: Ref = (self.group_id, record.topic, record.partition, record.key or b"")
            state = self.parking.parked.get(ref)
            if state is not None:
                reason = f"key parked since offset {state.first}"
                return await self._park(record, producer, ref, (STAGE_PARKED, reason, "Parked"))
            if self.parking.skipped(ref, record.offset):
                return []  # re-driven already, read again after a crash or a rebalance
        failure = await self._handle(record, where)
        if failure is None:
            return []
        stage, reason, _ = failure
        if self.on_error == "fail":
            raise ConsumerFailedError(
                f"consumer group {self.group_id} stops at {record.topic}[{record.partition}] "
                f'offset {record.offset} ({stage}): {reason} (on_error = "fail")'
            )
        if self.on_error == "park":
            where.warning("parked", stage=stage, reason=reason, topic=self.dead_letter_topic)
            ref = (self.group_id, record.topic, record.partition, record.key or b"")
            return await self._park(record, producer, ref, failure)
        where.warning("dead-lettered", stage=stage, reason=reason, topic=self.dead_letter_topic)
        self.stats.dead_lettered += 1
        return [await self._dead_letter(record, producer, failure)]

    async def _handle(self, record: Any, where: Any) -> Failure | None:
        """Decode ``record``, judge it against the window and call the handler (up to
        ``attempts`` times); what failed, or None (handled, or skipped as a repeat)."""
        try:
            if record.value is None:
                raise DecodeError("the record has no value (a business event is never null)")
            event = self._decode(record.value, record.topic)
        except DecodeError as exc:
            return "consume-decode", exc.reason, type(exc).__name__
        lineage = event.lineage
        snapshot = is_snapshot(record.headers)
        key = (record.topic, record.key)
        verdict = Verdict.NEW if self.window is None else self.window.judge(lineage, key, snapshot)
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
            snapshot=snapshot,
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
        # a parked event is not remembered: its re-drive must reach the handler
        if self.window is not None and (failure is None or self.on_error == "dead-letter"):
            self.window.remember(lineage, key)
        if failure is not None:
            reason = f"the handler raised {type(failure).__name__}: {failure}"
            return "consume-handler", reason, type(failure).__name__
        self.stats.delivered += 1
        if delivery.supersedes:
            self.stats.corrections += 1
        return None

    async def _park(
        self, record: Any, producer: Any, ref: Ref, failure: Failure
    ) -> list[asyncio.Future[Any]]:
        """Park ``record`` (the one that failed, or one behind its key's park): its
        dead-letter record marked parked, and the key's state on the parked topic."""
        stage, reason, _ = failure
        state = self.parking.park(ref, record.offset, stage, reason)
        self.stats.parked += 1
        dead = await self._dead_letter(record, producer, failure, (PARKED_MARK,))
        kept = await self._keep(producer, ref_key(ref), state)
        return [dead, kept]

    async def _keep(self, producer: Any, key: bytes, value: bytes) -> asyncio.Future[Any]:
        """A record of the parked topic (one partition)."""
        future: asyncio.Future[Any] = await producer.send(
            self.parked_topic, value=value, key=key, partition=0
        )
        return future

    async def _dead_letter(
        self,
        record: Any,
        producer: Any,
        failure: Failure,
        extra: Sequence[tuple[str, bytes]] = (),
    ) -> asyncio.Future[Any]:
        stage, reason, error = failure
        headers = [
            *(record.headers or ()),
            (HEADER_DLQ_STAGE, stage.encode()),
            (HEADER_DLQ_REASON, reason.encode()),
            (HEADER_DLQ_ERROR, error.encode()),
            (HEADER_CONSUMER_TOPIC, record.topic.encode()),
            (HEADER_CONSUMER_PARTITION, str(record.partition).encode()),
            (HEADER_CONSUMER_OFFSET, str(record.offset).encode()),
            (HEADER_CONSUMER_GROUP, self.group_id.encode()),
            *extra,
        ]
        future: asyncio.Future[Any] = await producer.send(
            self.dead_letter_topic, value=record.value, key=record.key, headers=headers
        )
        return future

    async def _carry_out(self, request: Request, producer: Any, bound: Any) -> None:
        """Carry out a request for a key of a partition this member owns, and write its
        answer (an unfinished re-drive stays pending, and goes on after the next batch)."""
        where = bound.bind(request=request.id, kind=request.kind, topic=request.topic)
        try:
            answer = await self._redrive(request, producer, where)
        except TerminalError:  # past the bound: the consumer stops with its sentence
            raise
        except Exception as exc:  # the request fails, the consumer goes on
            answer = "failed", f"{type(exc).__name__}: {exc}"
        if answer is None:
            return
        status, message = answer
        self._progress.pop(request.id, None)
        done = replace(request, status=status, message=message)  # type: ignore[arg-type]
        self.requests[request.id] = done
        where.info("request answered", status=status, message=message)
        await (await self._keep(producer, request.record_key(), done.record()))

    async def _redrive(self, request: Request, producer: Any, where: Any) -> tuple[str, str] | None:
        """The request's (status, message); None: not finished yet."""
        ref = request.ref
        state = self.parking.parked.get(ref)
        if state is None:
            return self.parking.answer_unparked(ref, request.id)
        running = [i for i, r in self.requests.items() if i in self._progress and r.ref == ref]
        if running and running[0] != request.id:
            return "refused", f"the key is already being re-driven (request {running[0]})"
        if request.kind == "discard":
            record = self.parking.unpark(ref, state.last, f"discarded: {request.reason}")
            await (await self._keep(producer, ref_key(ref), record))
            return "done", f"discarded {state.count} parked events up to offset {state.last}"
        conf = self.kafka.librdkafka()
        messages = await asyncio.to_thread(read_to_end, conf, self.dead_letter_topic)
        done, count = self._progress.get(request.id, (state.first - 1, 0))
        for parked in parked_events(messages, ref, done):
            failure = await self._handle(parked, where)
            if failure is not None:
                again = self.parking.failed_again(ref, parked.offset, failure[1])
                if again is not None:
                    await (await self._keep(producer, ref_key(ref), again))
                return "failed", (
                    f"the handler failed again at offset {parked.offset} ({failure[1]}); "
                    f"{count} events re-driven, the key stays parked from there"
                )
            done, count = parked.offset, count + 1
            self.stats.redriven += 1
            self._progress[request.id] = done, count
        if done < state.last:
            # the latest parked events are not on the dead-letter topic (a crash before
            # they were acknowledged): the live records park them again, then this goes on
            self._progress[request.id] = done, count
            return None
        # nothing of the key is handled live before this unpark (batches wait their turn)
        how = f"redriven (request {request.id})"
        await (await self._keep(producer, ref_key(ref), self.parking.unpark(ref, done, how)))
        return "done", f"{count} parked events re-driven through the handler"


class _RequestReader:
    """Follows the parked topic for the requests ``bizevents dlq`` writes: one kept
    consumer (assigned, no group), polled without waiting between batches."""

    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self._consumer = Consumer(
            {
                **conf,
                "group.id": "bizevents-parked-follower",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        self._consumer.assign([TopicPartition(topic, 0, 0)])

    async def news(self, requests: dict[str, Request]) -> list[Request]:
        """Fold what arrived into ``requests``; the pending ones, oldest first."""
        batch = await asyncio.to_thread(self._consumer.consume, 500, 0)
        read_requests([m for m in batch if m.error() is None], requests)
        return [r for r in requests.values() if r.status == "pending"]

    def close(self) -> None:
        self._consumer.close()


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
