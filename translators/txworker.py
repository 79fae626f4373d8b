"""The transaction worker: whole committed transactions through transaction translators.

``bizevents translate --transactions`` runs two stages, each its own aiokafka consumer
group (start several processes to share or take over the work):

1. **merge** (group ``<group_id>.merge``): copies every record of the technical topics
   the pinned transaction translators read, and of the transaction topic, into one log,
   the one-partition repartition topic, with headers naming where each came from. Its
   offsets are committed once the copies are acknowledged; a restart copies the
   uncommitted ones again (the assembler drops the duplicates).
2. **assemble** (group ``<group_id>.assemble``; one member holds the log's partition,
   the others stand by): decodes each part, assembles transactions
   (:mod:`bizevents.translators.assembly`), translates the complete ones in commit order
   (:mod:`bizevents.translators.txcore`), produces the events and dead letters, records the
   released position in the state topic, and commits the log's offset **up to the first
   part of the oldest transaction still open**. A worker killed or a partition moved
   mid-transaction: the next owner reads that transaction's parts again from the log
   and releases it once, with the same event ids (at least once: a crash between the
   produce and the state record repeats the same events, same ids).

The pending state is thus the log itself from the committed offset on, not a changelog:
nothing else needs to survive. The price is one partition for the assembly (one active
assembler per group), which also gives commit order to every event.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Final

import structlog

from bizevents.contracts.envelope import ChangeEvent, Tombstone
from bizevents.contracts.exceptions import Coordinates, DecodeError
from bizevents.contracts.technical.transaction import TransactionDecoder, transaction_topic
from bizevents.plumbing.errors import ConfigError, TransientError
from bizevents.plumbing.kafka import ensure_topics, partition_for
from bizevents.translators.assembly import Assembler, AssemblyLimits, Checkpoint, Outcome, Part
from bizevents.translators.pipeline import OutRecord, SourceRecord
from bizevents.translators.settings import RuntimeSettings, TransactionSettings
from bizevents.translators.transaction_api import TransactionTranslator
from bizevents.translators.txcore import TransactionCore

__all__ = ["TxPlan", "TxWorker", "prepare_transactions", "run_transactions"]

log = structlog.get_logger("transactions")

HEADER_ORIGIN_TOPIC: Final = "bizevents.origin.topic"
HEADER_ORIGIN_PARTITION: Final = "bizevents.origin.partition"
HEADER_ORIGIN_OFFSET: Final = "bizevents.origin.offset"
_ORIGIN: Final = (HEADER_ORIGIN_TOPIC, HEADER_ORIGIN_PARTITION, HEADER_ORIGIN_OFFSET)


@dataclass
class TxPlan:
    """What start-up resolved."""

    translators: list[TransactionTranslator]
    sources: list[str]
    #: Every partition of the sources (the assembler waits for all of them).
    source_partitions: list[tuple[str, int]]
    transaction_topic: str
    repartition_topic: str
    state_topic: str
    core: TransactionCore
    decoder: Any
    tx_decoder: TransactionDecoder
    limits: AssemblyLimits


def prepare_transactions(settings: RuntimeSettings, tx: TransactionSettings) -> TxPlan:
    """Resolve the pinned transaction translators, their topics and contracts."""
    from confluent_kafka.admin import AdminClient

    from bizevents.contracts.serde import BusinessSerializer
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.plumbing.registry import registry_client, schema_lookup, wait_for_registry
    from bizevents.translators.registry import discover
    from bizevents.translators.topology import check_contracts, technical_topics

    t = settings.translate
    pinned = discover(names=settings.translators).pinned(settings.translators)
    translators = [item for item in pinned if isinstance(item, TransactionTranslator)]
    if not translators:
        raise ConfigError(
            "no transaction translator is pinned ([translators] names only row translators); "
            "run `bizevents translate` for those"
        )
    admin = AdminClient({**settings.kafka.librdkafka(), "log.connection.close": False})
    try:
        metadata = admin.list_topics(timeout=15).topics
        existing = set(metadata)
    except Exception as exc:
        raise TransientError(
            f"cannot list the topics of {settings.kafka.bootstrap_servers}: {exc}"
        ) from exc
    sources = technical_topics(list(translators), t, existing)
    if tx.transaction_topic:
        tx_topic = tx.transaction_topic
    elif t.topic_prefix:
        tx_topic = transaction_topic(t.topic_prefix)
    else:
        raise ConfigError("set transactions.transaction_topic or translate.topic_prefix")
    missing = [name for name in [*sources, tx_topic] if name not in existing]
    if missing:
        raise ConfigError(
            f"the topic{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"{'do' if len(missing) > 1 else 'does'} not exist on "
            f"{settings.kafka.bootstrap_servers}: start the capture first (with "
            "transaction_metadata on) or check translate.topic_prefix"
        )
    url, wait_s = settings.registry.url, t.registry_wait_s
    wait_for_registry(
        settings.registry,
        wait_s,
        lambda: log.info("waiting for the registry", url=url, up_to_s=wait_s),
    )
    client = registry_client(settings.registry)
    serializer = BusinessSerializer(client, t.subject_strategy, t.auto_register)
    check_contracts(list(translators), client, serializer.subject, t.auto_register)
    outputs = {c.contract_topic() for item in translators for c in item.emits}
    ensure_topics(admin, sorted(outputs | {t.dead_letter_topic}), t.output_partitions)
    ensure_topics(admin, [tx.repartition(), tx.state()], 1)
    lookup = schema_lookup(client)
    return TxPlan(
        translators,
        sources,
        [(t, p) for t in sources for p in sorted(metadata[t].partitions)],
        tx_topic,
        tx.repartition(),
        tx.state(),
        TransactionCore(translators, serializer, dead_letter_topic=t.dead_letter_topic),
        AutoDecoder(lookup),
        TransactionDecoder(lookup),
        AssemblyLimits(tx.max_open, tx.max_changes, tx.max_wait, tx.remembered),
    )


class TxWorker:
    """The two stages of one worker process (see the module doc)."""

    def __init__(self, settings: RuntimeSettings, tx: TransactionSettings, plan: TxPlan) -> None:
        self.settings = settings
        self.tx = tx
        self.plan = plan
        self._stop = asyncio.Event()
        self._partitions: dict[str, int] = {}
        self.assembler: Assembler | None = None
        self._reassigned = False

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Both stages until :meth:`stop`; the first stage that fails stops the other."""
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(**self.settings.kafka.aiokafka(), acks="all")
        await producer.start()
        try:
            tasks = [
                asyncio.ensure_future(self._merge(producer)),
                asyncio.ensure_future(self._assemble(producer)),
            ]
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            self._stop.set()
            for task in pending:
                await task
            for task in done:
                task.result()
        finally:
            with suppress(Exception):
                await producer.stop()

    def _consumer(self, topics: Sequence[str], group: str, listener: Any = None) -> Any:
        from aiokafka import AIOKafkaConsumer

        t = self.settings.translate
        consumer = AIOKafkaConsumer(
            **self.settings.kafka.aiokafka(),
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # never latest: ListOffsets is wrong on Tansu
            session_timeout_ms=int(t.session_timeout_s * 1000),
            heartbeat_interval_ms=int(t.heartbeat_interval_s * 1000),
            rebalance_timeout_ms=int(t.rebalance_timeout_s * 1000),
        )
        consumer.subscribe(list(topics), listener=listener)
        return consumer

    # -- stage 1: merge ----------------------------------------------------------------

    async def _merge(self, producer: Any) -> None:
        from aiokafka.errors import CommitFailedError

        plan = self.plan
        consumer = self._consumer(
            [*plan.sources, plan.transaction_topic], f"{self.tx.group_id}.merge"
        )
        await consumer.start()
        try:
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=200, max_records=self.tx.max_records)
                if not batches:
                    continue
                futures = []
                offsets = {}
                for tp, records in batches.items():
                    for r in records:
                        if r.value is None:
                            continue  # a tombstone: compaction's marker, not a change
                        headers = [(k, v) for k, v in (r.headers or ()) if k not in _ORIGIN]
                        headers += [
                            (HEADER_ORIGIN_TOPIC, r.topic.encode()),
                            (HEADER_ORIGIN_PARTITION, str(r.partition).encode()),
                            (HEADER_ORIGIN_OFFSET, str(r.offset).encode()),
                        ]
                        futures.append(
                            await producer.send(
                                plan.repartition_topic,
                                value=r.value,
                                key=r.key,
                                headers=headers,
                                partition=0,
                            )
                        )
                    offsets[tp] = records[-1].offset + 1
                if futures:
                    await asyncio.gather(*futures)
                try:
                    await consumer.commit(offsets)
                except CommitFailedError as exc:
                    log.warning("merge: commit refused after a rebalance", error=str(exc))
        finally:
            with suppress(Exception):
                await consumer.stop()

    # -- stage 2: assemble -------------------------------------------------------------

    async def _read_checkpoint(self) -> Checkpoint:
        """The last record of the state topic (read to the end of a Fetch)."""
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition

        consumer = AIOKafkaConsumer(
            **self.settings.kafka.aiokafka(), enable_auto_commit=False, group_id=None
        )
        await consumer.start()
        last: bytes | None = None
        try:
            tp = TopicPartition(self.plan.state_topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while True:
                batch = await consumer.getmany(tp, timeout_ms=500, max_records=10_000)
                records = batch.get(tp, [])
                if records:
                    last = records[-1].value
                high = consumer.highwater(tp)
                if high is not None and await consumer.position(tp) >= high:
                    break
        finally:
            with suppress(Exception):
                await consumer.stop()
        if not last:
            return Checkpoint()
        data = json.loads(last)
        return Checkpoint(data.get("position"), tuple(data.get("released", ())))

    async def _write_checkpoint(self, producer: Any, assembler: Assembler) -> None:
        point = assembler.checkpoint()
        # PostgreSQL ids are covered by the position; only other ids need remembering
        others = [i for i in point.released if ":" not in i or not i.split(":")[-1].isdigit()]
        body = json.dumps({"position": point.position, "released": others}).encode()
        await producer.send_and_wait(self.plan.state_topic, body, key=b"checkpoint", partition=0)

    async def _assemble(self, producer: Any) -> None:
        from aiokafka import ConsumerRebalanceListener
        from aiokafka.errors import CommitFailedError
        from aiokafka.structs import OffsetAndMetadata, TopicPartition

        worker = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                worker.assembler = None

            async def on_partitions_assigned(self, assigned: Any) -> None:
                worker._reassigned = True

        plan = self.plan
        tp = TopicPartition(plan.repartition_topic, 0)
        consumer = self._consumer(
            [plan.repartition_topic], f"{self.tx.group_id}.assemble", Listener()
        )
        await consumer.start()
        try:
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=200, max_records=self.tx.max_records)
                if self._reassigned or (self.assembler is None and tp in consumer.assignment()):
                    # (re)gained the log: rebuild from the committed offset and the state
                    self._reassigned = False
                    self.assembler = Assembler(
                        plan.core.reads,
                        plan.limits,
                        await self._read_checkpoint(),
                        sources=plan.source_partitions,
                    )
                    if tp in consumer.assignment():
                        # the batch just read is dropped: read again from the committed
                        # offset, or from the log's start when the group never committed
                        # (seek_to_committed would leave the position after that batch,
                        # and its parts would be lost to this assembler)
                        committed = await consumer.committed(tp)
                        consumer.seek(tp, committed if committed is not None else 0)
                    log.info("assembling", log=plan.repartition_topic)
                    continue
                records = batches.get(tp, [])
                assembler = self.assembler
                if not records or assembler is None:
                    continue
                outcomes: list[Outcome] = []
                bad: list[OutRecord] = []
                for r in records:
                    part = self._part(r)
                    if isinstance(part, OutRecord):
                        bad.append(part)
                    elif part is not None:
                        outcomes += assembler.feed(part)
                result = plan.core.process(outcomes)
                out = [*result.records, *bad]
                for record in out:
                    if record.dead_letter:
                        headers = dict(record.headers)
                        log.warning(
                            "dead-lettered",
                            reason=(headers.get("bizevents.dlq.reason") or b"").decode(),
                            topic=record.topic,
                        )
                await self._produce(producer, out)
                if outcomes:
                    await self._write_checkpoint(producer, assembler)
                commit = assembler.commit_offset(records[-1].offset + 1)
                try:
                    await consumer.commit({tp: OffsetAndMetadata(commit, "")})
                except CommitFailedError as exc:
                    log.warning("assemble: commit refused after a rebalance", error=str(exc))
                    self.assembler = None
        finally:
            with suppress(Exception):
                await consumer.stop()

    def _part(self, r: Any) -> Part | OutRecord | None:
        """The log record as a part (``None`` for a tombstone), or its dead letter."""
        headers = list(r.headers or ())
        found = {k: v for k, v in headers if k in _ORIGIN}
        try:
            topic = (found[HEADER_ORIGIN_TOPIC] or b"").decode()
            partition = int(found[HEADER_ORIGIN_PARTITION] or b"-1")
            offset = int(found[HEADER_ORIGIN_OFFSET] or b"-1")
        except (KeyError, ValueError):
            topic, partition, offset = self.plan.repartition_topic, 0, r.offset
        origin = SourceRecord(
            topic,
            partition,
            offset,
            r.key,
            r.value,
            [(k, v) for k, v in headers if k not in _ORIGIN],
        )
        where = Coordinates(topic, partition, offset)
        try:
            if topic == self.plan.transaction_topic:
                return Part(r.offset, origin, record=self.plan.tx_decoder.decode(r.value, where))
            decoded = self.plan.decoder.decode(r.key, r.value, where, origin.headers)
        except DecodeError as exc:
            dead = Part(r.offset, origin)
            (record,) = self.plan.core.dead_letters([dead], "decode", exc.reason, exc, "")
            return record
        if isinstance(decoded, Tombstone):
            return None
        assert isinstance(decoded, ChangeEvent)
        return Part(r.offset, origin, change=decoded)

    async def _produce(self, producer: Any, records: Sequence[OutRecord]) -> None:
        futures = []
        for out in records:
            count = self._partitions.get(out.topic)
            if count is None:
                count = self._partitions[out.topic] = len(await producer.partitions_for(out.topic))
            futures.append(
                await producer.send(
                    out.topic,
                    value=out.value,
                    key=out.key,
                    headers=out.headers,
                    partition=partition_for(out.key, count),
                )
            )
        if futures:
            await asyncio.gather(*futures)


def run_transactions(settings: RuntimeSettings, tx: TransactionSettings) -> None:
    """Start-up checks, then both stages until SIGTERM/SIGINT."""
    plan = prepare_transactions(settings, tx)
    log.info(
        "translating transactions",
        translators=[t.ref for t in plan.translators],
        topics=plan.sources,
        transaction_topic=plan.transaction_topic,
        group=tx.group_id,
    )
    worker = TxWorker(settings, tx, plan)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        await worker.run()

    asyncio.run(main())
