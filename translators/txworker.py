"""The transaction worker: whole committed transactions through transaction translators.

``bizevents translate --transactions`` runs three stages, each its own aiokafka consumer
group (start several processes to share or take over the work):

1. **merge** (group ``<group_id>.merge``): copies every record of the technical topics
   the pinned transaction translators read, and of the transaction topic, into one log,
   the one-partition repartition topic, with headers naming where each came from. Its
   offsets are committed once the copies are acknowledged; a restart copies the
   uncommitted ones again (the assemblers drop the duplicates).
2. **route** (group ``<group_id>.route``; one member holds the merge log, the others
   stand by): decodes each part and assembles transactions
   (:mod:`bizevents.translators.assembly`), releases the complete ones in commit order
   and copies each, parts and END as they were, to the partitions of the **assembly
   log** that its business keys hash to (:mod:`bizevents.translators.routing`);
   dead-letters what cannot be assembled. It commits the merge log **up to the first
   part of the oldest transaction still open**, and records the released position in
   the state topic.
3. **assemble** (group ``<group_id>.assemble``; the assembly log's partitions are spread
   over the members): per partition, assembles the transactions again (they arrive
   whole, in commit order), translates them (:mod:`bizevents.translators.txcore`) and
   produces the events of the business keys the partition owns, with the same commit
   rule and a checkpoint per partition.

A worker killed or a partition moved mid-transaction: the next owner reads that
transaction's parts again from its log and releases it once, with the same event ids
(at least once: a crash between the produce and the state record repeats the same
events, same ids). The pending state is the logs themselves from their committed
offsets on. Every transaction of one business key goes to one assembly partition, in
commit order, so that key's events keep commit order; transactions of different keys
are assembled in parallel, and their relative order is given up (docs/transactions.md).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Final

import structlog

from bizevents.contracts.envelope import ChangeEvent, Tombstone
from bizevents.contracts.exceptions import Coordinates, DecodeError
from bizevents.contracts.technical.transaction import TransactionDecoder, transaction_topic
from bizevents.plumbing.errors import ConfigError
from bizevents.plumbing.kafka import ensure_topics, partition_for
from bizevents.translators.api import Translator
from bizevents.translators.assembly import (
    Assembler,
    AssemblyLimits,
    Checkpoint,
    Outcome,
    Part,
    Ready,
    commit_position,
)
from bizevents.translators.metrics import WorkerStats
from bizevents.translators.pipeline import OutRecord, SourceRecord
from bizevents.translators.routing import owner, partitions_of
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
    assembly_topic: str
    assembly_partitions: int
    #: Partitions of every topic the worker writes events or dead letters to.
    partitions: dict[str, int]
    core: TransactionCore
    decoder: Any
    tx_decoder: TransactionDecoder
    limits: AssemblyLimits


def prepare_transactions(
    settings: RuntimeSettings,
    tx: TransactionSettings,
    pinned: Sequence[Translator] | None = None,
) -> TxPlan:
    """Resolve the pinned transaction translators (among ``pinned``, else discovered),
    their topics and contracts."""
    from confluent_kafka.admin import AdminClient

    from bizevents.contracts.technical import AutoDecoder
    from bizevents.plumbing.registry import schema_lookup
    from bizevents.translators.registry import discover
    from bizevents.translators.topology import (
        business_serializer,
        check_contracts,
        list_topics,
        technical_topics,
    )

    t = settings.translate
    if pinned is None:
        pinned = discover(names=settings.translators).pinned(settings.translators)
    translators = [item for item in pinned if isinstance(item, TransactionTranslator)]
    if not translators:
        raise ConfigError(
            "no transaction translator is pinned ([translators] names only row translators); "
            "run `bizevents translate` for those"
        )
    admin = AdminClient({**settings.kafka.librdkafka(), "log.connection.close": False})
    metadata = list_topics(admin, settings.kafka.bootstrap_servers, t.broker_wait_s)
    existing = set(metadata)
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
    client, serializer = business_serializer(settings.registry, t)
    check_contracts(list(translators), client, serializer.subject, t.auto_register)
    outputs = sorted({c.contract_topic() for item in translators for c in item.emits})
    ensure_topics(admin, [*outputs, t.dead_letter_topic], t.output_partitions)
    ensure_topics(admin, [tx.repartition(), tx.state()], 1)
    ensure_topics(admin, [tx.assembly()], tx.assembly_partitions)
    written = list_topics(admin, settings.kafka.bootstrap_servers, t.broker_wait_s)
    partitions = {name: len(written[name].partitions) for name in [*outputs, t.dead_letter_topic]}
    assembly = len(written[tx.assembly()].partitions)
    lookup = schema_lookup(client)
    return TxPlan(
        translators,
        sources,
        [(t, p) for t in sources for p in sorted(metadata[t].partitions)],
        tx_topic,
        tx.repartition(),
        tx.state(),
        tx.assembly(),
        assembly,
        partitions,
        TransactionCore(translators, serializer, dead_letter_topic=t.dead_letter_topic),
        AutoDecoder(lookup),
        TransactionDecoder(lookup),
        AssemblyLimits(tx.max_open, tx.max_changes, tx.max_wait, tx.remembered),
    )


_Send = tuple[str, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]


class TxWorker:
    """The three stages of one worker process (see the module doc)."""

    def __init__(
        self,
        settings: RuntimeSettings,
        tx: TransactionSettings,
        plan: TxPlan,
        stats: WorkerStats | None = None,
    ) -> None:
        self.settings = settings
        self.tx = tx
        self.plan = plan
        #: The worker's metrics, shared with the row translators of the same process.
        self.stats = stats or WorkerStats(tx.group_id)
        self._stop = asyncio.Event()
        #: The route stage's assembler (``None`` while it does not hold the merge log).
        self.assembler: Assembler | None = None
        #: The assemble stage's, per assembly-log partition it holds.
        self.assemblers: dict[int, Assembler] = {}

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """The stages until :meth:`stop`; the first stage that fails stops the others."""
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(**self.settings.kafka.aiokafka(), acks="all")
        await producer.start()
        try:
            tasks = [
                asyncio.ensure_future(self._merge(producer)),
                asyncio.ensure_future(self._route(producer)),
                asyncio.ensure_future(self._assemble(producer)),
            ]
            try:
                done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            except asyncio.CancelledError:  # the Faust worker stops (the one runtime)
                self._stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
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
            # an empty fetch held long delays what arrives meanwhile on the embedded
            # broker (docs/broker.md); every stage but the merge reads a log being written
            fetch_max_wait_ms=t.fetch_max_wait_ms,
            max_partition_fetch_bytes=t.max_fetch_bytes,
        )
        consumer.subscribe(list(topics), listener=listener)
        return consumer

    async def _send(self, producer: Any, items: Sequence[_Send]) -> None:
        """Append ``items`` to one batch per topic and partition, in order, and wait
        until the broker acknowledged them all."""
        builders: dict[tuple[str, int], Any] = {}
        futures = []
        for topic, partition, key, value, headers in items:
            slot = (topic, partition)
            batch = builders.get(slot)
            if batch is None:
                batch = builders[slot] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                futures.append(await producer.send_batch(batch, topic, partition=partition))
                batch = builders[slot] = producer.create_batch()
                if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                    raise ConfigError(f"a record for {topic} is larger than a producer batch")
        for (topic, partition), batch in builders.items():
            futures.append(await producer.send_batch(batch, topic, partition=partition))
        if futures:
            await asyncio.gather(*futures)

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
                copies: list[_Send] = []
                offsets = {}
                for tp, records in batches.items():
                    for r in records:
                        if r.value is None:
                            continue  # a tombstone: compaction's marker, not a change
                        headers = [(k, v) for k, v in (r.headers or ()) if k not in _ORIGIN]
                        headers += _origin_headers(r.topic, r.partition, r.offset)
                        copies.append((plan.repartition_topic, 0, r.key, r.value, headers))
                    offsets[tp] = records[-1].offset + 1
                await self._send(producer, copies)
                try:
                    await consumer.commit(offsets)
                except CommitFailedError as exc:
                    log.warning("merge: commit refused after a rebalance", error=str(exc))
        finally:
            with suppress(Exception):
                await consumer.stop()

    # -- the logs' checkpoints ---------------------------------------------------------

    async def _read_checkpoints(self) -> dict[bytes, Checkpoint]:
        """The last record of each key of the state topic (read to the end of a Fetch)."""
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition

        consumer = AIOKafkaConsumer(
            **self.settings.kafka.aiokafka(), enable_auto_commit=False, group_id=None
        )
        await consumer.start()
        last: dict[bytes, bytes] = {}
        try:
            tp = TopicPartition(self.plan.state_topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while True:
                batch = await consumer.getmany(tp, timeout_ms=500, max_records=10_000)
                for record in batch.get(tp, []):
                    if record.value:
                        last[record.key or b""] = record.value
                high = consumer.highwater(tp)
                if high is not None and await consumer.position(tp) >= high:
                    break
        finally:
            with suppress(Exception):
                await consumer.stop()
        out = {}
        for key, value in last.items():
            data = json.loads(value)
            out[key] = Checkpoint(data.get("position"), tuple(data.get("released", ())))
        return out

    def _checkpoint(self, key: bytes, assembler: Assembler) -> _Send:
        point = assembler.checkpoint()
        # PostgreSQL ids are covered by the position; only other ids need remembering
        others = [i for i in point.released if commit_position(i) is None]
        body = json.dumps({"position": point.position, "released": others}).encode()
        return (self.plan.state_topic, 0, key, body, [])

    def _parts(self, records: Sequence[Any], log_topic: str) -> tuple[list[Part], list[OutRecord]]:
        """The log's records as parts, and the dead letters of those that do not decode."""
        parts: list[Part] = []
        bad: list[OutRecord] = []
        for r in records:
            part = self._part(r, log_topic)
            if isinstance(part, OutRecord):
                bad.append(part)
            elif part is not None:
                parts.append(part)
        return parts, bad

    async def _log_stage(
        self,
        producer: Any,
        topic: str,
        group: str,
        handle: Any,
        on_assigned: Any,
    ) -> None:
        """Consume a log of parts in group ``group``: after each (re)assignment every
        held partition restarts from its committed offset with ``on_assigned(tps)``;
        ``handle(tp, records)`` returns what to send and the offset to commit."""
        from aiokafka import ConsumerRebalanceListener
        from aiokafka.errors import CommitFailedError, IllegalStateError
        from aiokafka.structs import OffsetAndMetadata

        rebalanced = [False]

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                rebalanced[0] = True

            async def on_partitions_assigned(self, assigned: Any) -> None:
                rebalanced[0] = True

        consumer = self._consumer([topic], group, Listener())
        await consumer.start()
        try:
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=200, max_records=self.tx.max_records)
                if rebalanced[0]:
                    # (re)gained partitions: every one rebuilds from its committed offset
                    # and the state; the batch just read is dropped and read again (a
                    # partition the group never committed restarts at the log's start)
                    rebalanced[0] = False
                    held = sorted(consumer.assignment(), key=lambda tp: tp.partition)
                    try:
                        await on_assigned(held)
                        for tp in held:
                            committed = await consumer.committed(tp)
                            consumer.seek(tp, committed if committed is not None else 0)
                    except IllegalStateError:  # the assignment changed again meanwhile
                        rebalanced[0] = True
                        continue
                    log.info("assembling", log=topic, partitions=[tp.partition for tp in held])
                    continue
                for tp, records in batches.items():
                    if rebalanced[0]:
                        break  # what is left is read again, by whoever holds it now
                    if not records or tp not in consumer.assignment():
                        continue
                    sends, commit = handle(tp, records)
                    await self._send(producer, sends)
                    if rebalanced[0]:
                        break  # the partition may have moved: its new owner reads it again
                    try:
                        await consumer.commit({tp: OffsetAndMetadata(commit, "")})
                    except (CommitFailedError, IllegalStateError) as exc:
                        log.warning(f"{group}: commit refused after a rebalance", error=str(exc))
                        rebalanced[0] = True
                        continue
                    if topic == self.plan.assembly_topic:
                        self.stats.acked(len(records), time.time())
                        stamp = records[-1].timestamp
                        if stamp and stamp > 0:
                            self.stats.observe_latency(max(time.time() - stamp / 1000.0, 0.0))
        finally:
            with suppress(Exception):
                await consumer.stop()

    # -- stage 2: route ----------------------------------------------------------------

    async def _route(self, producer: Any) -> None:
        plan = self.plan

        async def assigned(held: Sequence[Any]) -> None:
            self.assembler = None
            if held:
                checkpoint = (await self._read_checkpoints()).get(_ROUTE_KEY, Checkpoint())
                self.assembler = Assembler(
                    plan.core.reads, plan.limits, checkpoint, sources=plan.source_partitions
                )

        def handle(tp: Any, records: Sequence[Any]) -> tuple[list[_Send], int]:
            assembler = self.assembler
            assert assembler is not None
            parts, bad = self._parts(records, plan.repartition_topic)
            outcomes: list[Outcome] = []
            for part in parts:
                outcomes += assembler.feed(part)
            sends: list[_Send] = []
            dead = list(bad)
            for outcome in outcomes:
                if isinstance(outcome, Ready):
                    sends += self._routed(outcome)
                else:
                    dead += plan.core.process([outcome]).records
            sends += self._outputs(dead)
            if outcomes:
                sends.append(self._checkpoint(_ROUTE_KEY, assembler))
            return sends, assembler.commit_offset(records[-1].offset + 1)

        await self._log_stage(
            producer, plan.repartition_topic, f"{self.tx.group_id}.route", handle, assigned
        )

    def _routed(self, ready: Ready) -> list[_Send]:
        """``ready``'s parts and END, as they were in the merge log, to each assembly
        partition of its business keys (:mod:`bizevents.translators.routing`)."""
        plan = self.plan
        parts = [*ready.parts, *([ready.end] if ready.end is not None else [])]
        sends: list[_Send] = []
        for partition in partitions_of(ready, plan.translators, plan.assembly_partitions):
            for part in parts:
                o = part.origin
                headers = [*o.headers, *_origin_headers(o.topic, o.partition, o.offset)]
                sends.append((plan.assembly_topic, partition, o.key, o.value, headers))
        return sends

    # -- stage 3: assemble -------------------------------------------------------------

    async def _assemble(self, producer: Any) -> None:
        plan = self.plan

        async def assigned(held: Sequence[Any]) -> None:
            self.assemblers = {}
            if held:
                checkpoints = await self._read_checkpoints()
                for tp in held:
                    point = checkpoints.get(_assembly_key(tp.partition), Checkpoint())
                    self.assemblers[tp.partition] = Assembler(plan.core.reads, plan.limits, point)

        def handle(tp: Any, records: Sequence[Any]) -> tuple[list[_Send], int]:
            assembler = self.assemblers[tp.partition]
            parts, bad = self._parts(records, plan.assembly_topic)
            outcomes: list[Outcome] = []
            for part in parts:
                outcomes += assembler.feed(part)
            count, mine = plan.assembly_partitions, int(tp.partition)

            def owns(translator: TransactionTranslator, part: Part) -> bool:
                return owner(translator, part, count) == mine

            result = plan.core.process(outcomes, owns)
            stats = self.stats
            if not stats.first_block_at:
                stats.first_block_at = time.time()
            stats.add(plan.assembly_topic, result.counts, len(bad))
            sends = self._outputs([*result.records, *bad])
            if outcomes:
                sends.append(self._checkpoint(_assembly_key(tp.partition), assembler))
            return sends, assembler.commit_offset(records[-1].offset + 1)

        await self._log_stage(
            producer, plan.assembly_topic, f"{self.tx.group_id}.assemble", handle, assigned
        )

    def _outputs(self, records: Sequence[OutRecord]) -> list[_Send]:
        """Events and dead letters to their topics' partitions (``crc32(key) % n``)."""
        sends: list[_Send] = []
        for out in records:
            if out.dead_letter:
                headers = dict(out.headers)
                log.warning(
                    "dead-lettered",
                    reason=(headers.get("bizevents.dlq.reason") or b"").decode(),
                    topic=out.topic,
                )
            count = self.plan.partitions[out.topic]
            sends.append(
                (out.topic, partition_for(out.key, count), out.key, out.value, out.headers)
            )
        return sends

    def _part(self, r: Any, log_topic: str) -> Part | OutRecord | None:
        """The log record as a part (``None`` for a tombstone), or its dead letter."""
        headers = list(r.headers or ())
        found = {k: v for k, v in headers if k in _ORIGIN}
        try:
            topic = (found[HEADER_ORIGIN_TOPIC] or b"").decode()
            partition = int(found[HEADER_ORIGIN_PARTITION] or b"-1")
            offset = int(found[HEADER_ORIGIN_OFFSET] or b"-1")
        except (KeyError, ValueError):
            topic, partition, offset = log_topic, r.partition, r.offset
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


_ROUTE_KEY: Final = b"checkpoint"


def _assembly_key(partition: int) -> bytes:
    return f"assembly:{partition}".encode()


def _origin_headers(topic: str, partition: int, offset: int) -> list[tuple[str, bytes | None]]:
    return [
        (HEADER_ORIGIN_TOPIC, topic.encode()),
        (HEADER_ORIGIN_PARTITION, str(partition).encode()),
        (HEADER_ORIGIN_OFFSET, str(offset).encode()),
    ]


def run_transactions(
    settings: RuntimeSettings,
    tx: TransactionSettings,
    plan: TxPlan | None = None,
    stats: WorkerStats | None = None,
) -> None:
    """Start-up checks (unless ``plan`` is given), then the three stages until
    SIGTERM/SIGINT; used by the one runtime when no row translator is pinned."""
    plan = plan or prepare_transactions(settings, tx)
    log.info(
        "translating transactions",
        translators=[t.ref for t in plan.translators],
        topics=plan.sources,
        transaction_topic=plan.transaction_topic,
        group=tx.group_id,
    )
    worker = TxWorker(settings, tx, plan, stats)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        await worker.run()

    asyncio.run(main())
