"""The translator worker: a Faust app whose agent runs the pinned translators live.

``bizevents translate`` calls :func:`run`, the one start-up of every pinned translator:
the row translators run in the Faust agent below, the transaction translators' worker
(:mod:`bizevents.translators.txworker`) in the same process and loop, as a task of the
app, counting into the same metrics. Start-up (:func:`prepare`) resolves
everything that can be wrong before the group is joined, and fails with a sentence
naming the plugin or the setting:

1. the pinned translators (``[translators] orders = 2``) from the entry points;
2. the technical topics they read, ``<topic_prefix>.<schema>.<table>`` for each
   source (a wildcard source matches the broker's existing topics), or
   ``translate.topics`` when set;
3. each emitted contract against the registry: registered under its subject when
   ``auto_register`` is on (the registry refuses an incompatible one), looked up
   otherwise; a registry that does not answer yet (one starting beside the worker)
   is waited for, up to ``translate.registry_wait_s``;
4. the business and dead-letter topics, created when missing, and the parked topic
   when a translator parks (``translate.on_error``, docs/parking.md);
5. ``processing_guarantee = "exactly_once"`` is refused with a sentence where the
   broker's traits say it has no transactions (the embedded broker).

Then the Faust worker joins the consumer group ``translate.group_id`` and its one
agent receives whole fetched blocks (see :mod:`bizevents.translators._faust`). Per block it
runs :class:`~bizevents.translators.pipeline.Pipeline`, appends the records to one aiokafka
batch per output partition, and acknowledges the block's offsets only when those
batches are acknowledged, strictly in fetch order; Faust commits acknowledged
offsets on its commit timer, on rebalance and on stop. So: at least once, and a
replayed block gives the same event ids. With ``processing_guarantee =
"exactly_once"`` each block's outputs and its next offset go in one Kafka transaction
of its input partition's producer (:func:`~bizevents.translators._faust.block_transaction`):
a ``read_committed`` reader sees each event once.

Partitioning: a business event is keyed by the source record's key and goes to
partition ``crc32(key) % partitions`` of its topic, librdkafka's default
(``consistent_random``) partitioner, so the replay's confluent-kafka producer picks
the same partition; every event of one row stays in order in one partition.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from bizevents.plumbing.errors import ConfigError, TransientError
from bizevents.plumbing.kafka import broker_traits, read_latest
from bizevents.plumbing.parking import ParkedKeys
from bizevents.plumbing.settings import KafkaSettings
from bizevents.translators._faust import (
    EXIT_AFTER_CRASH_S,
    TablelessManager,
    bulk_consumer,
    crash,
    stopped_sentence,
    timed_producer,
)
from bizevents.translators.api import Translator
from bizevents.translators.blocks import (
    QUEUED_BLOCKS,
    BlockProcessor,
    BlockRunner,
)
from bizevents.translators.metrics import WorkerStats
from bizevents.translators.parkingio import Redriver
from bizevents.translators.pipeline import Pipeline
from bizevents.translators.promoting import PromotionFollower, VersionedProcessor
from bizevents.translators.promotion import Pins
from bizevents.translators.settings import (
    RuntimeSettings,
    TransactionSettings,
    TranslateSettings,
)
from bizevents.translators.shadow import check_shadows
from bizevents.translators.startup import Kind, resolve
from bizevents.translators.topology import readers
from bizevents.translators.transaction_api import is_transactional
from bizevents.translators.txplan import TxPlan, prepare_transactions
from bizevents.translators.txworker import TxWorker

__all__ = [
    "ExactlyOnceUnavailableError",
    "Plan",
    "build_app",
    "check_exactly_once",
    "prepare",
    "run",
    "run_worker",
]

log = structlog.get_logger("translate")


class ExactlyOnceUnavailableError(ConfigError):
    """``processing_guarantee = "exactly_once"`` on a broker that cannot run it."""


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
    plan: Plan | None = None,
) -> Any:
    """The Faust app: one agent over ``topics`` that runs ``processor`` per block; with
    ``plan``, it follows the promotions topic and hands partitions over before their
    blocks (:mod:`bizevents.translators.promoting`), and, when its pipelines park, the
    parked keys' restore and re-drives run around it."""
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
        TableManager=TablelessManager,  # no tables: no 1 s pause before the join
    )
    app.transport.Consumer = bulk_consumer(frozenset(topics), t.fetch_max_wait_ms)
    app.transport.Producer = timed_producer(t.transaction_timeout_s)
    channel = app.topic(
        *topics,
        key_serializer="raw",
        value_serializer="raw",
        allow_empty=True,
        # blocks waiting for the agent; Faust's default (4096 items) would buffer the
        # whole topic in memory when translating is slower than fetching
        maxsize=QUEUED_BLOCKS,
    )
    shadows = t.shadows() if t.shadow else None
    follower = None
    if plan is not None:
        follower = PromotionFollower(
            app,
            kafka.aiokafka(),
            t.promotions(),
            plan.pins,
            plan.names(),
            lambda name, version: plan.versions.get((name, version)),
        )
        following = follower

        async def follow_promotions() -> None:
            try:
                await following.follow()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # no versions known: no block may be translated
                await crash(app, exc)

        app.task(follow_promotions)
    runner = BlockRunner(
        app,
        processor,
        stats,
        t.max_inflight_blocks,
        shadows,
        None if follower is None else follower.before,
    )
    if shadows is not None:
        app.timer(t.commit_interval_s)(runner.publish_shadows)

    async def translate(stream: Any) -> None:
        async for block in stream:
            await runner.handle(block)
        await runner.drain()

    app.agent(channel, name="translate", concurrency=1)(translate)

    async def assigned(sender: Any, assigned: set[Any], **kwargs: Any) -> None:
        held = [(tp.topic, tp.partition) for tp in assigned]
        stats.forget_partitions(held)
        if shadows is not None:
            # the partitions' comparisons so far, from whichever member counted them
            records = await asyncio.to_thread(
                read_latest, kafka.librdkafka(), shadows, f"{t.group_id}-shadows"
            )
            with stats._lock:  # (the transaction worker's virtual partitions are its own)
                stats.shadows.restore(records, held, frozenset(topics))
        log.info(
            "partitions assigned",
            partitions=sorted(f"{tp.topic}[{tp.partition}]" for tp in assigned),
        )

    app.on_partitions_assigned.connect(assigned)
    if plan is not None and plan.pipeline.parking is not None:
        _with_parking(app, settings, plan.pipeline, runner, stats)
    return app


def _with_parking(
    app: Any, settings: RuntimeSettings, pipeline: Pipeline, runner: BlockRunner, stats: WorkerStats
) -> None:
    """The parked keys restored on every assignment, before its partitions resume
    (:class:`TablelessManager`), the re-drives cancelled on a revoke (the next owner
    carries them out), and the parked topic followed for requests."""
    from bizevents.translators.registry import discover

    assert pipeline.parking is not None
    stats.parking = pipeline.parking
    redriver = Redriver(
        parking=pipeline.parking,
        pipeline=pipeline,
        conf=settings.kafka.librdkafka(),
        parked_topic=settings.translate.parked_topic,
        produce=runner.produce,
        owned=lambda: {(tp.topic, tp.partition) for tp in app.consumer.assignment()},
        partitions_of=runner.partition_count,
        load=lambda name, version: discover(names=[name]).get(name, version),
        on_counts=lambda topic, counts: stats.add(topic, counts),
    )

    async def revoked(sender: Any, revoked: set[Any], **kwargs: Any) -> None:
        await redriver.stop()

    app.tables.before_assignment = redriver.restore
    app.on_partitions_revoked.connect(revoked)
    app.task(redriver.follow)


@dataclass
class Plan:
    """What start-up resolved: the translators, the topics, the pipeline."""

    translators: list[Translator]
    topics: list[str]
    outputs: list[str]
    pipeline: Pipeline
    schema_ids: dict[str, int]
    shadows: list[Translator]
    #: The versions per partition and offset (configured, and promoted since).
    pins: Pins
    #: Every version this worker may translate with: ``(name, version) -> translator``.
    versions: dict[tuple[str, int], Translator]
    #: The pipeline of a set of live versions (and the shadows of the others).
    make: Callable[[Sequence[Translator]], Pipeline]

    def names(self) -> dict[str, tuple[str, ...]]:
        """``topic -> the names of the translators reading it``."""
        return {
            topic: tuple(sorted({item.name for item in self.translators if item.ref in refs}))
            for topic, refs in readers(self.translators, self.topics).items()
        }


def prepare(settings: RuntimeSettings, pinned: Sequence[Translator] | None = None) -> Plan:
    """Resolve and check everything before joining the group (see the module doc): the
    row translators among ``pinned`` (else discovered), the versions in their shadow, and
    every version the promotions topic may put live (docs/shadow.md)."""
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.plumbing.registry import schema_lookup

    t = settings.translate
    kind = Kind(
        # transaction translators (and their shadows) run in the transaction worker
        accepts=lambda item: not is_transactional(item),
        none_pinned="no row translator is pinned",
        called="a row translator",
        places="partitions",
        topic_word="technical topic",
        missing_advice=(
            f"check translate.topic_prefix ({t.topic_prefix!r}) or translate.topics against "
            "the capture's server name, or start the capture first (the worker never "
            "creates technical topics)"
        ),
    )
    found = resolve(settings, pinned, kind)
    translators, shadows = found.translators, found.shadows
    outputs = [*sorted({*found.outputs, t.dead_letter_topic}), *found.shadow_outputs]
    # one set of parked keys for every version's pipeline: a key parks by name
    parking = ParkedKeys(t.max_parked_keys) if found.parks else None
    decoder = AutoDecoder(schema_lookup(found.client))

    def make(chosen: Sequence[Translator]) -> Pipeline:
        live = {item.name: item.version for item in chosen}
        return Pipeline(
            chosen,
            decoder,
            found.serializer,
            dead_letter_topic=t.dead_letter_topic,
            parking=parking,
            parked_topic=t.parked_topic,
            on_error=t.on_error,
            shadows=[s for s in shadows if s.name in live and live[s.name] != s.version],
            shadow_output=t.shadow_output == "topic",
        )

    return Plan(
        translators,
        found.sources,
        outputs,
        make(translators),
        found.schema_ids,
        shadows,
        found.pins,
        found.versions,
        make,
    )


def check_exactly_once(kafka: KafkaSettings, translate: TranslateSettings) -> None:
    """Refuse ``processing_guarantee = "exactly_once"`` with a sentence where the broker's
    traits say its transactions do not hold (the embedded broker, docs/broker.md); a
    cluster that does not answer (restarting) is waited for, ``broker_wait_s`` at most."""
    if translate.processing_guarantee != "exactly_once":
        return
    traits = broker_traits(
        kafka.bootstrap_servers, kafka.security_protocol, wait_s=translate.broker_wait_s
    )
    if not traits.transactions:
        raise ExactlyOnceUnavailableError(
            'translate.processing_guarantee = "exactly_once" needs a broker with '
            f"transactions, and {kafka.bootstrap_servers} is the {traits.name} broker, which "
            "cannot start aiokafka's transactional producer nor hide aborted records "
            '(docs/broker.md): use "at_least_once" there, or Apache Kafka'
        )


def run(
    settings: RuntimeSettings,
    stats: WorkerStats | None = None,
    transactions: TransactionSettings | None = None,
    *,
    only_transactions: bool = False,
) -> None:
    """The one start-up of ``bizevents translate``: every pinned translator, row and
    transaction alike, until SIGTERM/SIGINT.

    The row translators run in the Faust agent; the transaction translators' worker
    (:mod:`bizevents.translators.txworker`) runs in the same process and event loop, as a
    task of the Faust app, sharing its metrics (``stats``). With only transaction
    translators pinned (or ``only_transactions``, ``translate --transactions``) there
    is no Faust agent, and the transaction worker runs alone.
    """
    from bizevents.translators.registry import discover

    for chatty in ("httpx", "httpx2"):  # one INFO line per registry request otherwise
        logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLogger().level))
    tx = transactions or TransactionSettings()
    check_exactly_once(settings.kafka, settings.translate)
    pinned = discover(names=settings.translators).pinned(settings.translators)
    whole = [item for item in pinned if is_transactional(item)]
    rows = [] if only_transactions else [item for item in pinned if not is_transactional(item)]
    if only_transactions and not whole:
        raise ConfigError(
            "no transaction translator is pinned ([translators] names only row translators); "
            "run `bizevents translate` for those"
        )
    # each kind's shadows are checked by its worker; a shadow of the other kind here
    check_shadows([discover(names=[ref]).resolve(ref) for ref in settings.translate.shadow], pinned)
    stats = stats or WorkerStats(settings.translate.group_id)
    tx_plan = prepare_transactions(settings, tx, whole) if whole else None
    if not rows:
        assert tx_plan is not None
        asyncio.run(_alone(_transaction_worker(settings, tx, tx_plan, stats)))
        return
    plan = prepare(settings, rows)
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
    processor = VersionedProcessor(
        plan.pins, plan.names(), lambda versions: plan.make([plan.versions[v] for v in versions])
    )
    app = build_app(settings, plan.topics, processor, stats, datadir, plan)
    if tx_plan is not None:
        worker = _transaction_worker(settings, tx, tx_plan, stats)

        async def transaction_worker() -> None:
            try:
                await worker.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # it failed: the whole worker stops, as a block would
                await crash(app, exc)

        app.task(transaction_worker)
    run_worker(app)


def _transaction_worker(
    settings: RuntimeSettings, tx: TransactionSettings, plan: TxPlan, stats: WorkerStats
) -> TxWorker:
    log.info(
        "translating transactions",
        translators=[t.ref for t in plan.translators],
        shadows=[t.ref for t in plan.shadows.values()],
        topics=plan.sources,
        transaction_topic=plan.transaction_topic,
        group=tx.group_id,
    )
    return TxWorker(settings, tx, plan, stats)


async def _alone(worker: TxWorker) -> None:
    """The transaction worker without a Faust app, until SIGTERM/SIGINT."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    await worker.run()


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
    app.exit_after_crash_s = EXIT_AFTER_CRASH_S  # this process is the worker's own
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        if app.crash_reason is not None:
            raise TransientError(stopped_sentence(app.crash_reason)) from app.crash_reason
        if exc.code not in (0, None):
            raise
