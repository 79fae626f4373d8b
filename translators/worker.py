"""The translator worker: a Faust app whose agent runs the pinned translators live.

``bizevents translate`` calls :func:`run`. Start-up (:func:`prepare`) resolves
everything that can be wrong before the group is joined, and fails with a sentence
naming the plugin or the setting:

1. the pinned translators (``[translators] orders = 2``) from the entry points;
2. the technical topics they read, ``<topic_prefix>.<schema>.<table>`` for each
   source (a wildcard source matches the broker's existing topics), or
   ``translate.topics`` when set;
3. each emitted contract against the registry: registered under its subject when
   ``auto_register`` is on (the registry refuses an incompatible one), looked up
   otherwise;
4. the business and dead-letter topics, created when missing;
5. for ``processing_guarantee = "exactly_once"``, a transactional producer is
   initialised once, and refused with a sentence when the broker cannot do it.

Then the Faust worker joins the consumer group ``translate.group_id`` and its one
agent receives whole fetched blocks (see :mod:`translators._faust`). Per block it
runs :class:`~translators.pipeline.Pipeline`, appends the records to one aiokafka
batch per output partition, and acknowledges the block's offsets only when those
batches are acknowledged, strictly in fetch order; Faust commits acknowledged
offsets on its commit timer, on rebalance and on stop. So: at least once, and a
replayed block gives the same event ids.

Partitioning: a business event is keyed by the source record's key and goes to
partition ``crc32(key) % partitions`` of its topic, librdkafka's default
(``consistent_random``) partitioner, so the replay's confluent-kafka producer picks
the same partition; every event of one row stays in order in one partition.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import structlog
from faust.types import TP

from base.errors import ConfigError, TransientError
from base.kafka import ensure_topics, partition_for
from base.registry import RegistryUnavailableError
from base.settings import KafkaSettings
from contracts.business import (
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    HEADER_SOURCE_OFFSET,
    BusinessEvent,
)
from translators._faust import BlockAcker, RecordBlock, aiokafka_producer, bulk_consumer
from translators.api import Translator
from translators.exceptions import PluginError
from translators.metrics import WorkerStats
from translators.pipeline import (
    OutRecord,
    Pipeline,
    Result,
    SourceRecord,
)
from translators.settings import RuntimeSettings, TranslateSettings

__all__ = [
    "BlockProcessor",
    "ExactlyOnceUnavailableError",
    "PipelineProcessor",
    "Plan",
    "build_app",
    "check_contracts",
    "prepare",
    "readers",
    "run",
    "technical_topics",
]

log = structlog.get_logger("translate")

#: Records translated between two turns of the event loop (the producer sends meanwhile).
CHUNK: Final = 1000
#: Fetched blocks queued for the agent; more waits in the fetcher (bounded memory).
QUEUED_BLOCKS: Final = 2
#: How long a block is retried when the registry (or another peer) is unreachable.
RETRY_BACKOFF_S: Final = (0.5, 1.0, 2.0, 5.0)


class ExactlyOnceUnavailableError(ConfigError):
    """``processing_guarantee = "exactly_once"`` on a broker that cannot run it."""


# -- what to read ---------------------------------------------------------------------


def technical_topics(
    translators: Sequence[Translator],
    settings: TranslateSettings,
    existing: Iterable[str] = (),
) -> list[str]:
    """The technical topics the translators read, sorted.

    ``translate.topics`` wins when set. Otherwise each source ``schema.table``
    becomes ``<topic_prefix>.<schema>.<table>``; a source with shell wildcards
    matches the ``existing`` topics (new tables need a restart).
    """
    if settings.topics:
        return sorted(set(settings.topics))
    if not settings.topic_prefix:
        raise ConfigError(
            "set translate.topic_prefix (the capture's server name, as in "
            "<server>.<schema>.<table>) or list translate.topics"
        )
    prefix = settings.topic_prefix
    existing = sorted(existing)
    topics: set[str] = set()
    for item in translators:
        for source in item.sources:
            if not any(c in source for c in "*?["):
                topics.add(f"{prefix}.{source}")
                continue
            pattern = re.compile(re.escape(prefix + ".") + fnmatch.translate(source))
            found = [t for t in existing if pattern.fullmatch(t)]
            if not found:
                raise ConfigError(
                    f"translator {item.ref} reads {source!r}, but no topic "
                    f"{prefix}.{source} exists yet; start the capture first or list "
                    "translate.topics"
                )
            topics.update(found)
    return sorted(topics)


def readers(translators: Sequence[Translator], topics: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``topic -> translator refs`` reading it, by the topic's ``<schema>.<table>`` tail."""
    return {
        topic: tuple(
            item.ref for item in translators if item.reads(".".join(topic.split(".")[-2:]))
        )
        for topic in topics
    }


# -- contracts -------------------------------------------------------------------------


def check_contracts(
    translators: Sequence[Translator],
    client: Any,
    subject_of: Callable[[type[BusinessEvent]], str],
    auto_register: bool,
) -> dict[str, int]:
    """Register (or look up) every emitted contract; returns ``subject -> schema id``.

    A contract the registry refuses, or one that is missing with auto-registration
    off, fails with a :class:`PluginError` naming the translator and its plugin.
    """
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from contracts.serde import _UNREACHABLE

    ids: dict[str, int] = {}
    for item in translators:
        for contract in item.emits:
            subject = subject_of(contract)
            schema = Schema(contract.contract_schema_text(), "AVRO")
            plugin = f"translator {item.ref} (plugin {item.origin or '?'})"
            try:
                if auto_register:
                    ids[subject] = int(client.register_schema(subject, schema))
                else:
                    ids[subject] = int(client.lookup_schema(subject, schema).schema_id)
            except SchemaRegistryError as exc:
                if exc.http_status_code == 409:
                    why = f"is incompatible with what {subject} holds: {exc.error_message}"
                elif exc.http_status_code == 404 and not auto_register:
                    why = (
                        f"is not registered under {subject} (auto_register is off: run "
                        "`bizevents contracts register` first)"
                    )
                else:
                    why = (
                        f"was refused by the registry ({exc.http_status_code}): {exc.error_message}"
                    )
                raise PluginError(
                    f"{plugin} emits {contract.contract_fullname()}, which {why}"
                ) from exc
            except _UNREACHABLE as exc:
                raise RegistryUnavailableError(
                    f"cannot reach the schema registry to check the contracts of {plugin}: {exc}"
                ) from exc
    return ids


# -- block processing -------------------------------------------------------------------


class BlockProcessor(Protocol):
    """Records of one partition's block in, records to produce and counts out."""

    def __call__(self, topic: str, partition: int, records: Sequence[Any]) -> Result: ...


class PipelineProcessor:
    """The translation core, fed with aiokafka records."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def __call__(self, topic: str, partition: int, records: Sequence[Any]) -> Result:
        return self.pipeline.process(
            SourceRecord(
                topic,
                partition,
                r.offset,
                r.key,
                r.value,
                list(r.headers) if r.headers else [],
            )
            for r in records
        )


@dataclass
class _Inflight:
    block: RecordBlock
    task: asyncio.Future[None]


@dataclass
class BlockRunner:
    """What the agent does with each block: process, produce, acknowledge in order."""

    app: Any
    processor: BlockProcessor
    stats: WorkerStats
    max_inflight: int
    _chain: deque[asyncio.Future[None]] = field(default_factory=deque)
    _partitions: dict[str, int] = field(default_factory=dict)
    _acker: BlockAcker | None = None

    async def handle(self, block: RecordBlock) -> None:
        tp = block.tp
        if not self.stats.first_block_at:
            self.stats.first_block_at = time.time()
        bound = log.bind(
            topic=tp.topic,
            partition=tp.partition,
            offset=block.first_offset,
            last=block.last_offset,
        )
        futures: list[asyncio.Future[Any]] = []
        records = block.records
        for start in range(0, len(records), CHUNK):
            # a block is processed in chunks, each produced at once, so the producer
            # sends while the next chunk is translated (the work is CPU-bound)
            result = await self._process(tp, records[start : start + CHUNK], bound)
            self.stats.add(
                tp.topic, result.counts, result.undecodable, result.tombstones, result.unrouted
            )
            for out in result.records:
                if out.dead_letter:
                    self._log_dead_letter(out, bound)
            futures += await self._produce(result.records)
            await asyncio.sleep(0)
        highwater = self.app.consumer.highwater(tp)
        if highwater is not None:
            self.stats.set_lag(tp.topic, tp.partition, int(highwater) - block.last_offset - 1)
        previous = self._chain[-1] if self._chain else None
        stamp = block.records[-1].timestamp
        self._chain.append(asyncio.ensure_future(self._settle(previous, block, futures, stamp)))
        while len(self._chain) > self.max_inflight:
            await self._chain.popleft()
        while self._chain and self._chain[0].done():
            self._chain.popleft().result()

    async def drain(self) -> None:
        while self._chain:
            await self._chain.popleft()

    @staticmethod
    def _log_dead_letter(out: OutRecord, bound: Any) -> None:
        headers = dict(out.headers)
        bound.warning(
            "dead-lettered",
            offset=int(headers.get(HEADER_SOURCE_OFFSET) or b"-1"),
            translator=out.translator or None,
            stage=(headers.get(HEADER_DLQ_STAGE) or b"").decode(),
            reason=(headers.get(HEADER_DLQ_REASON) or b"").decode(errors="replace"),
        )

    async def _process(self, tp: TP, records: Sequence[Any], bound: Any) -> Result:
        """The processor's result; an unreachable peer (the registry) is retried."""
        attempt = 0
        while True:
            try:
                return self.processor(tp.topic, tp.partition, records)
            except TransientError as exc:
                delay = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
                attempt += 1
                bound.warning(
                    "block failed, retrying", error=str(exc), attempt=attempt, delay=delay
                )
                await asyncio.sleep(delay)

    async def _partition_count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            producer = aiokafka_producer(self.app)
            count = self._partitions[topic] = len(await producer.partitions_for(topic))
        return count

    async def _produce(self, records: Sequence[OutRecord]) -> list[asyncio.Future[Any]]:
        if not records:
            return []
        if self.app.in_transaction:
            return await self._produce_transactional(records)
        producer = aiokafka_producer(self.app)
        builders: dict[tuple[str, int], Any] = {}
        futures: list[asyncio.Future[Any]] = []
        for out in records:
            count = self._partitions.get(out.topic) or await self._partition_count(out.topic)
            partition = partition_for(out.key, count)
            slot = (out.topic, partition)
            batch = builders.get(slot)
            if batch is None:
                batch = builders[slot] = producer.create_batch()
            if (
                batch.append(key=out.key, value=out.value, timestamp=None, headers=out.headers)
                is None
            ):
                futures.append(await producer.send_batch(batch, out.topic, partition=partition))
                batch = builders[slot] = producer.create_batch()
                if (
                    batch.append(key=out.key, value=out.value, timestamp=None, headers=out.headers)
                    is None
                ):
                    raise ConfigError(
                        f"a record for {out.topic} is larger than translate.max_batch_bytes"
                    )
        for (topic, partition), batch in builders.items():
            futures.append(await producer.send_batch(batch, topic, partition=partition))
        return futures

    async def _produce_transactional(
        self, records: Sequence[OutRecord]
    ) -> list[asyncio.Future[Any]]:
        transactions = self.app.consumer.transactions
        futures = []
        for out in records:
            count = self._partitions.get(out.topic) or await self._partition_count(out.topic)
            partition = partition_for(out.key, count)
            futures.append(
                await transactions.send(out.topic, out.key, out.value, partition, None, out.headers)
            )
        return futures

    async def _settle(
        self,
        previous: asyncio.Future[None] | None,
        block: RecordBlock,
        futures: list[asyncio.Future[Any]],
        timestamp_ms: int | None,
    ) -> None:
        try:
            if previous is not None:
                await previous
            if futures:
                await asyncio.gather(*futures)
        except Exception as exc:
            log.error(
                "produce failed; stopping without committing the block",
                topic=block.tp.topic,
                partition=block.tp.partition,
                offset=block.first_offset,
                error=f"{type(exc).__name__}: {exc}",
            )
            await self.app.crash(exc)
            raise
        if self._acker is None:
            self._acker = BlockAcker(self.app.consumer)
        committable = self._acker.ack(block)
        now = time.time()
        if committable:  # not a block of an earlier generation (it is read again)
            self.stats.acked(len(block.records), now)
        if timestamp_ms is not None and timestamp_ms > 0:
            self.stats.observe_latency(max(now - timestamp_ms / 1000.0, 0.0))


# -- the app --------------------------------------------------------------------------------


def _credentials(kafka: KafkaSettings) -> Any:
    import faust

    conf = kafka.aiokafka()
    if kafka.security_protocol == "PLAINTEXT":
        return None
    if kafka.security_protocol == "SSL":
        return faust.SSLCredentials(conf["ssl_context"])
    if kafka.sasl_mechanism == "GSSAPI":
        return faust.GSSAPICredentials(ssl_context=conf.get("ssl_context"))
    if kafka.sasl_mechanism == "OAUTHBEARER":
        raise ConfigError(
            "kafka.sasl_mechanism=OAUTHBEARER is not supported by the translator worker"
        )
    return faust.SASLCredentials(
        username=conf["sasl_plain_username"],
        password=conf["sasl_plain_password"],
        ssl_context=conf.get("ssl_context"),
        mechanism=kafka.sasl_mechanism,
    )


def build_app(
    settings: RuntimeSettings,
    topics: Sequence[str],
    processor: BlockProcessor,
    stats: WorkerStats,
    datadir: Path | None = None,
) -> Any:
    """The Faust app: one agent over ``topics`` that runs ``processor`` per block."""
    import faust

    t = settings.translate
    kafka = settings.kafka
    app: Any = faust.App(
        t.group_id,
        broker=[f"kafka://{server.strip()}" for server in kafka.bootstrap_servers.split(",")],
        broker_credentials=_credentials(kafka),
        broker_client_id=kafka.client_id,
        datadir=str(datadir or settings.state_dir / "translate"),
        store="memory://",
        web_enabled=False,
        topic_disable_leader=True,
        topic_allow_declare=False,
        consumer_auto_offset_reset="earliest",  # never latest: ListOffsets is wrong on Tansu
        processing_guarantee=t.processing_guarantee,
        broker_session_timeout=t.session_timeout_s,
        broker_heartbeat_interval=t.heartbeat_interval_s,
        broker_rebalance_timeout=t.rebalance_timeout_s,
        broker_commit_interval=t.commit_interval_s,
        broker_max_poll_records=t.max_poll_records,
        consumer_max_fetch_size=t.max_fetch_bytes,
        producer_linger=t.linger_ms / 1000.0,
        producer_max_batch_size=t.max_batch_bytes,
        producer_max_request_size=max(t.max_batch_bytes, t.max_fetch_bytes),
        stream_wait_empty=True,
    )
    app.transport.Consumer = bulk_consumer(frozenset(topics), t.fetch_max_wait_ms)
    channel = app.topic(
        *topics,
        key_serializer="raw",
        value_serializer="raw",
        allow_empty=True,
        # blocks waiting for the agent; Faust's default (4096 items) would buffer the
        # whole topic in memory when translating is slower than fetching
        maxsize=QUEUED_BLOCKS,
    )
    runner = BlockRunner(app, processor, stats, t.max_inflight_blocks)

    async def translate(stream: Any) -> None:
        async for block in stream:
            await runner.handle(block)
        await runner.drain()

    app.agent(channel, name="translate", concurrency=1)(translate)

    async def assigned(sender: Any, assigned: set[Any], **kwargs: Any) -> None:
        stats.forget_partitions((tp.topic, tp.partition) for tp in assigned)
        log.info(
            "partitions assigned",
            partitions=sorted(f"{tp.topic}[{tp.partition}]" for tp in assigned),
        )

    app.on_partitions_assigned.connect(assigned)
    return app


# -- start-up ------------------------------------------------------------------------------


@dataclass
class Plan:
    """What start-up resolved: the translators, the topics, the pipeline."""

    translators: list[Translator]
    topics: list[str]
    outputs: list[str]
    pipeline: Pipeline
    schema_ids: dict[str, int]


def prepare(settings: RuntimeSettings) -> Plan:
    """Resolve and check everything before joining the group (see the module doc)."""
    from confluent_kafka.admin import AdminClient

    from base.registry import registry_client, schema_lookup
    from contracts.serde import BusinessSerializer
    from contracts.technical import AutoDecoder
    from translators.registry import discover

    t = settings.translate
    translators = discover(names=settings.translators).pinned(settings.translators)
    admin = AdminClient({**settings.kafka.librdkafka(), "log.connection.close": False})
    try:
        existing = set(admin.list_topics(timeout=15).topics)
    except Exception as exc:
        raise TransientError(
            f"cannot list the topics of {settings.kafka.bootstrap_servers}: {exc}"
        ) from exc
    topics = technical_topics(translators, t, existing)
    missing = [topic for topic in topics if topic not in existing]
    if missing:
        # Reading them would auto-create them empty on many brokers and wait there
        # silently: a mistyped prefix must be loud. Capture creates technical topics.
        raise ConfigError(
            f"the technical topic{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"{'do' if len(missing) > 1 else 'does'} not exist on "
            f"{settings.kafka.bootstrap_servers}: check translate.topic_prefix "
            f"({t.topic_prefix!r}) or translate.topics against the capture's server name, "
            "or start the capture first (the worker never creates technical topics)"
        )
    client = registry_client(settings.registry)
    serializer = BusinessSerializer(client, t.subject_strategy, t.auto_register)
    ids = check_contracts(translators, client, serializer.subject, t.auto_register)
    outputs = sorted(
        {c.contract_topic() for item in translators for c in item.emits} | {t.dead_letter_topic}
    )
    ensure_topics(admin, outputs, t.output_partitions)
    pipeline = Pipeline(
        translators,
        AutoDecoder(schema_lookup(client)),
        serializer,
        dead_letter_topic=t.dead_letter_topic,
    )
    return Plan(translators, topics, outputs, pipeline, ids)


def probe_exactly_once(settings: RuntimeSettings) -> None:
    """Initialise one aiokafka transactional producer, as Faust's exactly-once mode will."""
    from aiokafka import AIOKafkaProducer

    conf = settings.kafka.aiokafka()

    async def init() -> None:
        producer = AIOKafkaProducer(**conf, transactional_id=f"{settings.translate.group_id}-probe")
        try:
            await asyncio.wait_for(producer.start(), 30)
        finally:
            await producer.stop()

    try:
        asyncio.run(init())
    except Exception as exc:
        raise ExactlyOnceUnavailableError(
            'translate.processing_guarantee = "exactly_once" needs a broker that initialises '
            f"aiokafka's transactional producer, and {settings.kafka.bootstrap_servers} refused "
            f"it ({type(exc).__name__}: {exc}); the embedded Tansu broker cannot "
            '(docs/broker.md): use "at_least_once" there'
        ) from exc


def run(settings: RuntimeSettings, stats: WorkerStats | None = None) -> None:
    """Start-up checks, then the Faust worker until SIGTERM/SIGINT."""
    for chatty in ("httpx", "httpx2"):  # one INFO line per registry request otherwise
        logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLogger().level))
    plan = prepare(settings)
    if settings.translate.processing_guarantee == "exactly_once":
        probe_exactly_once(settings)
    stats = stats or WorkerStats(settings.translate.group_id)
    stats.readers = readers(plan.translators, plan.topics)
    log.info(
        "translating",
        translators=[item.ref for item in plan.translators],
        topics=plan.topics,
        group=settings.translate.group_id,
        guarantee=settings.translate.processing_guarantee,
    )
    datadir = settings.state_dir / "translate"
    datadir.mkdir(parents=True, exist_ok=True)
    app = build_app(settings, plan.topics, PipelineProcessor(plan.pipeline), stats, datadir)
    run_worker(app)


def run_worker(app: Any) -> None:
    """Run the Faust worker with our logging (structlog) left in place."""
    import faust

    worker = faust.Worker(
        app,
        loglevel="info",  # at WARN or above Faust's spinner sets the root logger to DEBUG
        override_logging=False,
        redirect_stdouts=False,
        quiet=True,
    )
    worker.spinner = None
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        if app.crash_reason is not None:
            raise TransientError(
                f"the translator worker stopped: {type(app.crash_reason).__name__}: "
                f"{app.crash_reason}"
            ) from app.crash_reason
        if exc.code not in (0, None):
            raise
