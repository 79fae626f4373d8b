"""The transaction worker: whole committed transactions through transaction translators.

``bizevents translate --transactions`` (and ``bizevents translate``, beside the row
translators) runs it. Each change crosses Kafka once on its way in and its events once
on the way out; there is no intermediate log:

* **every member reads everything itself.** A reader in assign mode (no consumer
  group) reads every partition of the technical topics the pinned transaction
  translators read, and the transaction topic; each record is decoded once and every
  transaction is assembled (:mod:`bizevents.translators.assembly`), so each member
  sees every transaction whole and in commit order.
* **ownership is a consumer group.** The members join the group ``<group_id>.assemble``
  over the assembly topic (``transactions.assembly_partitions`` partitions, no records):
  the partitions a member is assigned are the *virtual partitions* it owns. A complete
  transaction is translated (:mod:`bizevents.translators.txcore`) only by the members
  owning a virtual partition of one of its business keys
  (:mod:`bizevents.translators.routing`), and each publishes only the events of its
  keys; the others drop it after assembling it, without translating or serializing.
* **checkpoints in the state topic.** After the events of a batch are acknowledged, a
  member records, per virtual partition it owns, where to read again (per technical
  partition, the first part of the oldest transaction still open) and what it released
  (the commit position; ids without one, such as MySQL GTIDs, remembered). When the
  ownership changes every member rebuilds from the checkpoints of the partitions it now
  owns; a new owner republishes nothing its predecessor recorded. A virtual partition
  never checkpointed starts at the committed offsets of the group ``<group_id>.start``
  (nobody joins it: an operator, or the demo, sets where a new group begins), else at
  the start of each partition.

* **parked business keys.** A transaction that fails parks the business keys of it
  this member owns (:mod:`bizevents.translators.txparking`, pure; docs/parking.md):
  their later transactions go to the dead-letter topic, untranslated for them, until a
  re-drive, which the loop carries out between two batches
  (:mod:`bizevents.translators.txredrive`). The parked keys are restored at each rebuild.

A worker killed or a partition moved mid-transaction: the next owner reads that
transaction's parts again from the technical topics and releases it once, with the same
event ids (at least once: a crash between the produce and the checkpoint repeats the
same events, same ids). With ``translate.processing_guarantee = "exactly_once"`` a
member's outputs since its last checkpoint and that checkpoint go in one Kafka
transaction, and the checkpoints are read ``read_committed``: what a killed member sent
after its last checkpoint is aborted, and a ``read_committed`` reader sees each event
once. Every transaction of one business key is published by one
member, in commit order, so that key's events keep commit order; transactions of
different keys are published by different members in parallel, and their relative
order is given up (docs/transactions.md).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import structlog

from bizevents.contracts.envelope import ChangeEvent, Tombstone
from bizevents.contracts.exceptions import Coordinates, DecodeError
from bizevents.contracts.technical.transaction import TransactionDecoder, transaction_topic
from bizevents.plumbing.errors import ConfigError, TransientError
from bizevents.plumbing.kafka import (
    ensure_topics,
    partition_for,
    stay_in_group_where_needed,
    traits_of,
)
from bizevents.plumbing.parking import ParkedKeys
from bizevents.plumbing.process import settle_collector
from bizevents.translators.api import Translator
from bizevents.translators.assembly import (
    Abandoned,
    Assembler,
    AssemblyLimits,
    Checkpoint,
    Outcome,
    Part,
    Ready,
    commit_position,
)
from bizevents.translators.exceptions import PluginError
from bizevents.translators.metrics import WorkerStats
from bizevents.translators.pipeline import SHADOW_SUFFIX, OutRecord, Result, SourceRecord
from bizevents.translators.promoting import PromotionFollower, Versions, merge_results
from bizevents.translators.promotion import Handover, Pins, encode
from bizevents.translators.routing import owner, partitions_of
from bizevents.translators.settings import RuntimeSettings, TransactionSettings
from bizevents.translators.transaction_api import TransactionTranslator
from bizevents.translators.txcore import TransactionCore
from bizevents.translators.txparking import HEADER_PARKED_KEY, TxParking
from bizevents.translators.txredrive import RedriveTools, TxRedriver

__all__ = ["TxPlan", "TxWorker", "prepare_transactions", "run_transactions"]

log = structlog.get_logger("transactions")

#: A technical partition, as the checkpoints name it.
_TP = tuple[str, int]


@dataclass
class TxPlan:
    """What start-up resolved."""

    translators: list[TransactionTranslator]
    sources: list[str]
    #: Every partition of the sources (the assembler waits for all of them).
    source_partitions: list[tuple[str, int]]
    transaction_topic: str
    state_topic: str
    assembly_topic: str
    assembly_partitions: int
    #: Partitions of every topic the worker writes events or dead letters to.
    partitions: dict[str, int]
    core: TransactionCore
    decoder: Any
    tx_decoder: TransactionDecoder
    limits: AssemblyLimits
    #: Versions in the shadow of the live ones (docs/shadow.md), by name.
    shadows: dict[str, TransactionTranslator] = field(default_factory=dict)
    #: The versions per virtual partition and END offset (configured, promoted since;
    #: docs/shadow.md): None when nothing was read (a plan made by hand).
    pins: Pins | None = None
    #: Every version this worker may translate with: ``(name, version) -> translator``.
    versions: dict[tuple[str, int], TransactionTranslator] = field(default_factory=dict)
    #: Whether a failing transaction may park its keys (docs/parking.md): the parked
    #: topic is then restored at each rebuild and followed for re-drive requests.
    parks: bool = False

    def versioned(self) -> bool:
        """Whether a transaction may be translated by other versions than ``core``'s,
        or beside a shadow: each is then translated per virtual partition's versions."""
        return bool(self.shadows) or (
            self.pins is not None
            and any(self.pins.referenced(t.name) - {t.version} for t in self.translators)
        )

    def make_core(self, versions: Versions) -> TransactionCore:
        """The core of a set of live versions, with the shadows of the others."""
        chosen = [self.versions[v] for v in versions]
        live = dict(versions)
        core = self.core
        return TransactionCore(
            chosen,
            core.serializer,
            dead_letter_topic=core.dead_letter_topic,
            shadows=[s for name, s in self.shadows.items() if live.get(name) != s.version],
            shadow_output=core.shadow_output,
            parking=core.parking,
        )

    @property
    def read(self) -> list[_TP]:
        """Every partition a member reads: the sources', then the transaction topic."""
        return [*self.source_partitions, (self.transaction_topic, 0)]


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
    from bizevents.translators.shadow import check_shadows
    from bizevents.translators.topology import (
        business_serializer,
        check_contracts,
        list_topics,
        technical_topics,
    )
    from bizevents.translators.worker import read_pins

    t = settings.translate
    registry = discover(names=settings.translators)
    if pinned is None:
        pinned = registry.pinned(settings.translators)
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
    # the shadows of transaction translators run here (the row worker runs the others')
    shadows = [
        item
        for item in (registry.resolve(ref) for ref in t.shadow)
        if isinstance(item, TransactionTranslator)
    ]
    check_shadows(shadows, translators)
    ensure_topics(admin, [t.promotions()], 1, config={"cleanup.policy": "compact"})
    pins = read_pins(settings, {item.name: item.version for item in translators})
    versions: dict[tuple[str, int], TransactionTranslator] = {
        (item.name, item.version): item for item in [*translators, *shadows]
    }
    for item in translators:
        for version in sorted(pins.referenced(item.name) - {item.version}):
            if (item.name, version) not in versions:
                try:
                    found = registry.get(item.name, version)
                except PluginError as exc:
                    raise ConfigError(
                        f"{item.name}@{version} is live on some virtual partitions by "
                        f"promotion ({t.promotions()}), but this worker cannot load it: {exc}"
                    ) from exc
                if not isinstance(found, TransactionTranslator):
                    raise ConfigError(
                        f"{found.ref} is live on some virtual partitions by promotion "
                        f"({t.promotions()}) but is not a transaction translator"
                    )
                versions[(item.name, version)] = found
    prepared = list(versions.values())
    client, serializer = business_serializer(settings.registry, t)
    check_contracts(list(prepared), client, serializer.subject, t.auto_register)
    outputs = sorted({c.contract_topic() for item in prepared for c in item.emits})
    if shadows and t.shadow_output == "topic":
        outputs += sorted(
            {c.contract_topic() + SHADOW_SUFFIX for item in shadows for c in item.emits}
        )
    # the partition counts as ensure_topics read them: a node other than the one that
    # created a topic may not know it yet (a transaction worker exited on a KeyError)
    partitions = ensure_topics(admin, [*outputs, t.dead_letter_topic], t.output_partitions)
    ensure_topics(admin, [tx.state()], 1)
    # a failing transaction parks its business keys unless every translator says otherwise
    parks = any(t.on_error.get(item.name, "park") == "park" for item in translators)
    if parks:
        ensure_topics(admin, [t.parked_topic], 1, config={"cleanup.policy": "compact"})
    assembly = ensure_topics(admin, [tx.assembly()], tx.assembly_partitions)[tx.assembly()]
    if shadows:
        ensure_topics(admin, [t.shadows()], 1, config={"cleanup.policy": "compact"})
    partitions[t.parked_topic] = 1
    guard = TxParking(
        ParkedKeys(t.max_parked_keys),
        tx.assembly(),
        assembly,
        t.parked_topic,
        t.dead_letter_topic,
        dict(t.on_error),
    )
    lookup = schema_lookup(client)
    return TxPlan(
        translators,
        sources,
        [(t, p) for t in sources for p in sorted(metadata[t].partitions)],
        tx_topic,
        tx.state(),
        tx.assembly(),
        assembly,
        partitions,
        TransactionCore(
            translators,
            serializer,
            dead_letter_topic=t.dead_letter_topic,
            shadows=shadows,
            shadow_output=t.shadow_output == "topic",
            parking=guard,
        ),
        AutoDecoder(lookup),
        TransactionDecoder(lookup),
        AssemblyLimits(tx.max_open, tx.max_changes, tx.max_wait, tx.remembered),
        {item.name: item for item in shadows},
        pins,
        versions,
        parks,
    )


_Send = tuple[str, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]


@dataclass(frozen=True, slots=True)
class _Point:
    """A virtual partition's checkpoint: where to read again, and what was released."""

    offsets: dict[_TP, int] = field(default_factory=dict)
    released: Checkpoint = field(default_factory=Checkpoint)
    ids: frozenset[str] = frozenset()

    def encode(self) -> bytes:
        others = [i for i in self.released.released if commit_position(i) is None]
        return json.dumps(
            {
                "offsets": [[t, p, o] for (t, p), o in sorted(self.offsets.items())],
                "position": self.released.position,
                # PostgreSQL ids are covered by the position; only other ids are listed
                "released": others,
            }
        ).encode()

    @staticmethod
    def decode(value: bytes) -> _Point:
        data = json.loads(value)
        offsets = {(str(t), int(p)): int(o) for t, p, o in data.get("offsets", ())}
        ids = tuple(str(i) for i in data.get("released", ()))
        return _Point(offsets, Checkpoint(data.get("position"), ids), frozenset(ids))

    def has(self, tx_id: str | None) -> bool:
        """Whether the transaction ``tx_id`` was released before this checkpoint."""
        if tx_id is None:
            return False
        position, done = commit_position(tx_id), self.released.position
        if position is not None:
            return done is not None and position <= done
        return tx_id in self.ids


class _Renewable:
    """The transaction worker's producer, renewed in place (the member's clients and
    listeners hold this one object). aiokafka's transactional producer is done for once
    fenced (its state ``FATAL_ERROR``, ``_txn_manager``: private, aiokafka 0.14): it
    can neither abort nor send again."""

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


class TxWorker:
    """One member of the transaction worker's group (see the module doc)."""

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
        #: Each turn's outputs and its checkpoint in one Kafka transaction (docs/reliability.md).
        self._exactly_once = settings.translate.processing_guarantee == "exactly_once"
        #: The virtual partitions this member owns (the group's assignment).
        self.owned: frozenset[int] = frozenset()
        #: The ownership changed: rebuild from the checkpoints before the next batch.
        self._changed = False
        #: Held while a batch is handled, so that a rebalance waits for its checkpoint.
        self._lock = asyncio.Lock()
        self.assembler: Assembler | None = None
        #: Per owned virtual partition, what was released before this member took it.
        self._points: dict[int, _Point] = {}
        #: Arrival sequence numbers (the assembler's offsets), and per technical
        #: partition the (sequence, offset) of the records read since the oldest open
        #: transaction's first part: where to read again after a restart.
        self._seq = 0
        self._seen: dict[_TP, deque[tuple[int, int]]] = {}
        self._next: dict[_TP, int] = {}
        self._checkpointed = 0.0
        #: A batch was handled since the last checkpoint (an idle member records it).
        self._unrecorded = False
        #: Batches whose outputs the broker has not acknowledged yet: (their
        #: acknowledgement, records read, the newest record's timestamp if it published,
        #: the checkpoint records to send once they are acknowledged).
        self._inflight: deque[tuple[asyncio.Future[Any], int, int, list[_Send]]] = deque()
        self._producer: Any = None
        #: The core of each set of versions (promotions, shadows: docs/shadow.md), the
        #: translator each name is routed by (the configured one: every version of a
        #: name routes by the same keys), and the end of the transaction topic read.
        self._cores: dict[Versions, TransactionCore] = {}
        self._route = {t.name: t for t in plan.translators}
        self._tx_end = 0
        #: The reader (its fetches' high watermarks place a hand-over).
        self._read_with: Any = None
        self._refused: set[tuple[str, int]] = set()
        #: Why the promotions' follower stopped (the worker stops with it).
        self._failed: Exception | None = None
        #: The group takes this member's partitions: a re-drive gives up (stays pending).
        self._revoking = False
        #: A rebuild is under way (holding the lock): a rebalance does not wait for it.
        self._rebuilding = False
        #: The clients started and the group gave this member its first share.
        self._started = False
        #: The parked business keys: restored at each rebuild, followed for requests,
        #: which the loop carries out between two batches (docs/parking.md).
        guard = plan.core.parking
        self._parked: TxRedriver | None = None
        if plan.parks and guard is not None:
            self._parked = TxRedriver(
                parking=guard.parking,
                conf=settings.kafka.librdkafka(),
                parked_topic=settings.translate.parked_topic,
                guard=guard,
            )
            self.stats.tx_parking = guard.parking

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Read, assemble, translate and publish until :meth:`stop`."""
        from aiokafka import AIOKafkaProducer

        def make() -> Any:
            transactional: dict[str, Any] = {}
            if self._exactly_once:
                # a producer's own id: a restarted member's is new, so a killed one's
                # open transaction ends at its timeout (the broker aborts it)
                transactional = {
                    "transactional_id": f"{self.tx.group_id}.{uuid.uuid4().hex}",
                    "transaction_timeout_ms": int(self.tx.transaction_timeout_s * 1000),
                }
            return AIOKafkaProducer(
                **self.settings.kafka.aiokafka(),
                acks="all",
                request_timeout_ms=int(self.tx.request_timeout_s * 1000),
                **transactional,
            )

        producer = self._producer = _Renewable(make)
        group = self._ownership(producer)
        reader = self._reader()
        tasks: list[asyncio.Future[None]] = []
        try:
            await self._until_stopped(self._start_then_loop(producer, group, reader, tasks))
            if self._failed is not None:
                raise self._failed
        except asyncio.CancelledError:  # the Faust worker stops (the one runtime)
            self._stop.set()
            raise
        finally:
            for task in tasks:
                task.cancel()
                with suppress(BaseException):
                    await task
            # closing the clients is bounded too; on the embedded broker the member does
            # not leave the group (stay_in_group): the broker evicts it after the
            # session timeout; on Kafka it leaves
            deadline = time.monotonic() + self.tx.stop_timeout_s
            stay_in_group_where_needed(group)
            for name, client in (("ownership", group), ("reader", reader), ("producer", producer)):
                try:
                    await asyncio.wait_for(client.stop(), max(deadline - time.monotonic(), 0.1))
                except TimeoutError:
                    log.warning("a client did not close in time; exiting without it", client=name)
                except Exception:  # closing: nothing left to do with it
                    pass

    async def _start_then_loop(
        self, producer: Any, group: Any, reader: Any, tasks: list[asyncio.Future[None]]
    ) -> None:
        """Start the clients, then the loop. Joining waits until the group gives this
        member its share, which a rebalance that does not end can hold for ever: a stop
        meanwhile ends it at once (the fault suite found a member that did not stop
        within 60 s of SIGTERM, its last words "translating transactions")."""
        await producer.start()
        if self._exactly_once:
            await producer.begin_transaction()
        await group.start()
        traits_of(group)  # probed now: its stop may come while the broker is paused
        await reader.start()
        self._read_with = reader
        tasks.append(asyncio.ensure_future(self._keep_membership(group)))
        follower = self._follow_promotions()
        if follower is not None:
            tasks.append(follower)
        if self._parked is not None:
            tasks.append(asyncio.ensure_future(self._parked.follow()))
        self._started = True
        await self._loop(producer, reader)

    async def _until_stopped(self, work: Awaitable[None]) -> None:
        """Run ``work`` (start-up, then the loop) until it ends. Once :meth:`stop` was
        called, a start-up in hand is cancelled at once; a loop has
        ``transactions.stop_timeout_s`` to end its turn and record its last checkpoint,
        past that it is cancelled: what it held is read again by the partitions' next
        owner from the last checkpoint, with the same ids."""
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done() and self._started:
                await asyncio.wait({task}, timeout=self.tx.stop_timeout_s)
            if not task.done():
                if self._started:
                    log.warning(
                        "stopping: the turn in hand did not end in time; cancelled (the "
                        "next owner reads again from the last checkpoint)",
                        timeout_s=self.tx.stop_timeout_s,
                    )
                else:
                    log.info("stopping before the group gave this member its share")
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
                return
            task.result()  # the loop's own failure, if it failed
        finally:
            stopped.cancel()
            if not task.done():  # cancelled from outside (the Faust worker stops)
                task.cancel()
                with suppress(BaseException):
                    await task

    async def _loop(self, producer: Any, reader: Any) -> None:
        from aiokafka.errors import KafkaError
        from aiokafka.structs import TopicPartition
        from confluent_kafka import KafkaException

        reader.assign([TopicPartition(t, p) for t, p in self.plan.read])
        while not self._stop.is_set():
            try:
                await self._turn(producer, reader)
            except (KafkaError, KafkaException, TransientError) as exc:
                # a send not acknowledged in time, or a topic not read to its end in
                # time at a rebuild (a broker paused or overloaded): what the turn held
                # may or may not be written, and nothing after it was recorded; start
                # again from the checkpoints, as after a rebalance (what comes again
                # has the same ids), instead of exiting
                self._give_up_inflight()
                if self._exactly_once:
                    await self._abort(producer)
                self._changed = True
                log.warning(
                    "the broker did not answer in time; reading again from the checkpoints",
                    reason=f"{type(exc).__name__}: {exc}",
                )
                await asyncio.sleep(1.0)
        async with self._lock:
            if self.owned and self.assembler is not None:
                try:
                    await self._checkpoint(producer)
                except KafkaError as exc:  # the next owner starts from the one before
                    log.warning("last checkpoint not recorded", reason=str(exc))

    async def _turn(self, producer: Any, reader: Any) -> None:
        """One turn of the loop: a rebuild when ownership changed, else one batch."""
        if self._changed:
            async with self._lock:
                await self._rebuild(reader)
        if not self.owned:
            await asyncio.sleep(0.1)  # nothing of ours to publish until the group assigns
            return
        if self._parked is not None and self._parked.due:
            async with self._lock:
                if not self._changed:
                    await self._requests(producer)
        batches = await reader.getmany(timeout_ms=200, max_records=self.tx.max_records)
        if not batches:
            if self._unrecorded or self._inflight:  # idle: record what was released
                async with self._lock:
                    if not self._changed:
                        await self._checkpoint(producer)
            return
        async with self._lock:
            if self._changed:
                return  # read again after the rebuild, from the checkpoints
            await self._handle(producer, batches)

    def _give_up_inflight(self) -> None:
        """Forget the outstanding batches: their outputs are read and sent again after
        the rebuild (their futures' outcomes are retrieved, so none is left unlooked at)."""
        while self._inflight:
            sent = self._inflight.popleft()[0]
            sent.add_done_callback(lambda f: f.cancelled() or f.exception())

    # -- membership ----------------------------------------------------------------

    def _ownership(self, producer: Any) -> Any:
        """The consumer whose assignment in ``<group_id>.assemble`` is what this member
        owns; a revocation waits for the batch in hand and records its checkpoint."""
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

        worker = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            # A rebuild in hand published nothing yet: the group need not wait for it
            # (it gives up at its next step). A rebalance waits for every member's
            # revocation, and the embedded broker with no deadline (docs/broker.md):
            # one waiting behind a rebuild that did not end held the whole group.
            async def on_partitions_revoked(self, revoked: Any) -> None:
                worker._revoking = True  # a re-drive in hand stops at its next transaction
                if worker._rebuilding:
                    worker._owning(frozenset())
                    return
                async with worker._lock:
                    if worker.owned and worker.assembler is not None and not worker._changed:
                        await worker._checkpoint(producer)
                    worker._owning(frozenset())

            async def on_partitions_assigned(self, assigned: Any) -> None:
                worker._revoking = False
                owned = frozenset(tp.partition for tp in assigned)
                if worker._rebuilding:
                    worker._owning(owned)
                    return
                async with worker._lock:
                    worker._owning(owned)

        t = self.settings.translate
        consumer = AIOKafkaConsumer(
            **self.settings.kafka.aiokafka(),
            group_id=f"{self.tx.group_id}.assemble",
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # never latest: ListOffsets is wrong on Tansu
            session_timeout_ms=int(t.session_timeout_s * 1000),
            heartbeat_interval_ms=int(t.heartbeat_interval_s * 1000),
            rebalance_timeout_ms=int(t.rebalance_timeout_s * 1000),
            fetch_max_wait_ms=t.fetch_max_wait_ms,
        )
        consumer.subscribe([self.plan.assembly_topic], listener=Listener())
        return consumer

    def _owning(self, owned: frozenset[int]) -> None:
        """The group's new assignment: rebuild from the checkpoints before the next batch
        (the lock held, or a rebuild in hand, which gives up at its next step)."""
        self.owned = owned
        self._changed = True

    async def _keep_membership(self, group: Any) -> None:
        """Poll the ownership consumer (its topic holds no records): a member that does
        not poll leaves the group after ``max_poll_interval``."""
        while not self._stop.is_set():
            await group.getmany(timeout_ms=500)

    def _reader(self) -> Any:
        from aiokafka import AIOKafkaConsumer

        t = self.settings.translate
        return AIOKafkaConsumer(
            **self.settings.kafka.aiokafka(),
            group_id=None,
            enable_auto_commit=False,
            # an empty fetch held long delays what arrives meanwhile on the embedded
            # broker (docs/broker.md)
            fetch_max_wait_ms=t.fetch_max_wait_ms,
            max_partition_fetch_bytes=t.max_fetch_bytes,
        )

    async def _rebuild(self, reader: Any) -> None:
        """Start again from the checkpoints of the virtual partitions now owned; given
        up at the next step if the ownership changes meanwhile (the next turn rebuilds)."""
        began = time.monotonic()
        self._changed = False
        self.assembler = None  # nothing is translated until this rebuild completes
        while self._inflight:  # what was sent before belongs to the old ownership
            await self._settle_oldest()
        self._rebuilding = True
        try:
            plan = self.plan
            owned = sorted(self.owned)
            if owned:
                points = await self._read_checkpoints()
                if self._changed:
                    return
                await self._read_promotions()
                if self._parked is not None:
                    # every park of these partitions is acknowledged (their previous
                    # owners settled before they let go): read them before translating
                    await self._parked.restore()
                start = await asyncio.to_thread(self._start_offsets)
                if self._changed:
                    return
                self._assemble_from(reader, {v: points.get(v, _Point()) for v in owned}, start)
            log.info(
                "assembling",
                log=plan.assembly_topic,
                partitions=owned,
                took_s=round(time.monotonic() - began, 3),
            )
        finally:
            self._rebuilding = False

    def _assemble_from(self, reader: Any, mine: dict[int, _Point], start: dict[_TP, int]) -> None:
        """A new assembler, and the reader placed at the oldest of ``mine``'s checkpoints."""
        from aiokafka.structs import TopicPartition

        plan = self.plan
        offsets = {
            tp: min((p.offsets.get(tp, start[tp]) for p in mine.values()), default=start[tp])
            for tp in plan.read
        }
        for (topic, partition), offset in offsets.items():
            reader.seek(TopicPartition(topic, partition), offset)
        # the assembler drops what every owned partition released; _translate the rest
        positions = [p.released.position for p in mine.values()]
        floor = min(positions) if positions and None not in positions else None  # type: ignore[type-var]
        known = [set(p.released.released) for p in mine.values()]
        shared = tuple(sorted(set.intersection(*known))) if known else ()
        self.assembler = Assembler(
            plan.core.reads, plan.limits, Checkpoint(floor, shared), sources=plan.source_partitions
        )
        self._points = mine
        self._seen = {tp: deque() for tp in plan.read}
        self._next = dict(offsets)
        self._checkpointed = time.monotonic()

    def _start_offsets(self) -> dict[_TP, int]:
        """Where a virtual partition never checkpointed starts: the committed offsets of
        the group ``<group_id>.start`` (nobody joins it), else each partition's start."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                **self.settings.kafka.librdkafka(),
                "group.id": self.tx.start_group(),
                "enable.auto.commit": False,
                "log_level": 0,
            }
        )
        try:
            found = consumer.committed([TopicPartition(t, p) for t, p in self.plan.read], 30)
        finally:
            consumer.close()
        return {(tp.topic, tp.partition): max(tp.offset, 0) for tp in found}

    async def _read_checkpoints(self) -> dict[int, _Point]:
        """The last checkpoint of each virtual partition in the state topic."""
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition

        consumer = AIOKafkaConsumer(
            **self.settings.kafka.aiokafka(),
            enable_auto_commit=False,
            group_id=None,
            # exactly once: only checkpoints whose outputs were committed with them
            isolation_level="read_committed" if self._exactly_once else "read_uncommitted",
        )
        await consumer.start()
        last: dict[bytes, bytes] = {}
        try:
            tp = TopicPartition(self.plan.state_topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            moved = time.monotonic()
            while True:
                batch = await consumer.getmany(tp, timeout_ms=500, max_records=10_000)
                for record in batch.get(tp, []):
                    moved = time.monotonic()
                    if record.value:
                        last[record.key or b""] = record.value
                high = (
                    consumer.last_stable_offset(tp)
                    if self._exactly_once
                    else consumer.highwater(tp)
                )
                position = await consumer.position(tp)
                if high is not None and position >= high:
                    break
                if time.monotonic() - moved > self.tx.request_timeout_s:
                    # a rebuild that waits for ever holds the member's partitions for ever
                    raise TransientError(
                        f"the state topic {tp.topic} was not read to its end: nothing "
                        f"came for {self.tx.request_timeout_s:g} s at offset {position} "
                        f"(end {high})"
                    )
        finally:
            with suppress(Exception):
                await consumer.stop()
        out = {}
        for key, value in last.items():
            if key.startswith(_POINT):
                with suppress(ValueError):
                    out[int(key[len(_POINT) :])] = _Point.decode(value)
        return out

    # -- a batch -------------------------------------------------------------------

    async def _handle(self, producer: Any, batches: dict[Any, Sequence[Any]]) -> None:
        """Decode and assemble the batch; translate what this member owns; publish; then
        (at most every ``commit_interval_s``) record the checkpoints."""
        assembler = self.assembler
        assert assembler is not None
        plan = self.plan
        if plan.pins is not None and plan.pins.promotions:
            await self._hand_over(producer)
        outcomes: list[Outcome] = []
        bad: list[OutRecord] = []
        count = 0
        newest = 0
        for tp, records in batches.items():
            if not records:
                continue
            where: _TP = (tp.topic, tp.partition)
            if tp.topic == plan.transaction_topic:
                self._tx_end = max(self._tx_end, records[-1].offset + 1)
            seen = self._seen[where]
            for r in records:
                self._seq += 1
                seen.append((self._seq, r.offset))
                part = self._part(r, self._seq)
                if isinstance(part, OutRecord):
                    if self._home_of_record(r) in self.owned:
                        bad.append(part)
                elif part is not None:
                    outcomes += assembler.feed(part)
            self._next[where] = records[-1].offset + 1
            count += len(records)
            newest = max(newest, records[-1].timestamp or 0)
        result, published = self._translate(outcomes)
        stats = self.stats
        if not stats.first_block_at:
            stats.first_block_at = time.time()
            # as the row worker's first block does: without it every full collection
            # walked all of start-up's objects (about 90 ms each, a dozen in
            # bench/latency.py's 20 s: the p99) and a young one ran every 700 allocations
            settle_collector()
        stats.add(plan.transaction_topic, result.counts, len(bad))
        # the next batch is read while this one's acknowledgements are outstanding
        sent = await self._enqueue(producer, self._outputs([*result.records, *bad]))
        self._unrecorded = True
        # the checkpoint of the state after this batch goes out once this batch's
        # outputs (and so every earlier one's) are acknowledged, without stopping the
        # loop meanwhile: waiting here for every acknowledgement and then the state
        # topic's held the next batch 13 ms (median; 39 at most) each second
        due = time.monotonic() - self._checkpointed >= self.settings.translate.commit_interval_s
        points = self._checkpoints() if due and not self._exactly_once else []
        self._inflight.append((sent, count, newest if published else 0, points))
        if due and self._exactly_once:
            await self._checkpoint(producer)  # the outputs and their checkpoint: one transaction
        while len(self._inflight) > self.settings.translate.max_inflight_blocks:
            await self._settle_oldest()

    async def _settle_oldest(self) -> None:
        """Wait for the oldest outstanding batch's acknowledgements; then send the
        checkpoint it carries (its acknowledgement is awaited as a batch's)."""
        sent, count, newest, points = self._inflight.popleft()
        await sent
        now = time.time()
        self.stats.acked(count, now)
        if newest > 0:
            self.stats.observe_latency(max(now - newest / 1000.0, 0.0))
        if points:
            self._inflight.append((await self._enqueue(self._producer, points), 0, 0, []))

    async def _checkpoint(self, producer: Any) -> None:
        """Once every outstanding output is acknowledged, record the checkpoints."""
        while self._inflight:
            await self._settle_oldest()
        await self._send(producer, self._checkpoints())
        if self.plan.shadows:
            # the shadows' figures of the virtual partitions, for `bizevents shadow report`
            # and for the next owner of a partition (docs/shadow.md)
            with self.stats._lock:
                records = self.stats.shadows.dirty()
            topic = self.settings.translate.shadows()
            await self._send(producer, [(topic, 0, key, value, []) for key, value in records])
        if self._exactly_once:
            await producer.commit_transaction()
            await producer.begin_transaction()

    async def _abort(self, producer: _Renewable) -> None:
        """Abort the open transaction (what it held is read again from the checkpoints)
        and begin the next. A transaction the broker aborted itself (open past
        ``transaction_timeout_s`` while the cluster restarted or the broker was paused)
        left the producer fenced for good: a new one, with a new id, takes over. A
        producer that cannot abort (the broker gone past ``request_timeout_s``) stops
        the member."""
        from aiokafka.errors import ProducerFenced

        try:
            if producer.fenced():  # it met the abort already: it cannot abort now
                raise ProducerFenced()
            await asyncio.wait_for(producer.abort_transaction(), self.tx.request_timeout_s)
        except ProducerFenced:
            log.warning("the broker aborted the open transaction; a new producer takes over")
            await asyncio.wait_for(producer.renew(), self.tx.request_timeout_s)
        await producer.begin_transaction()

    async def _requests(self, producer: Any) -> None:
        """Carry out the pending re-drive and discard requests of the keys this member
        owns, holding the reading (a turn between two batches): every output in flight
        acknowledged first, so every parked transaction is on the dead-letter topic."""
        parked = self._parked
        assert parked is not None
        pending = parked.pending(self.owned)
        if not pending:
            return
        while self._inflight:
            await self._settle_oldest()
        plan = self.plan

        async def send(records: Sequence[OutRecord]) -> None:
            await self._send(producer, self._outputs(records))

        tools = RedriveTools(
            send=send,
            decode=self._redriven_part,
            load=self._load,
            core_of=self._redrive_core,
            dead_letter_partitions=plan.partitions[self.settings.translate.dead_letter_topic],
            on_counts=lambda result: self.stats.add(plan.transaction_topic, result.counts),
            # partitions going, or the member stopping: the request stays pending for
            # the next owner, which carries it out from the start
            revoked=lambda: self._revoking or self._stop.is_set(),
        )
        started: dict[Any, str] = {}
        for request in pending:
            if request.ref in started:  # two at once: the second is refused
                message = f"the key is already being re-driven (request {started[request.ref]})"
                await self._send(
                    producer, self._outputs([parked.answer(request, "refused", message)])
                )
                continue
            started[request.ref] = request.id
            log.info(
                "carrying out a request",
                request=request.id,
                kind=request.kind,
                translator=f"{request.translator}@{request.version}",
                partition=request.partition,
            )

            try:
                answer = await parked.carry_out(request, tools)
            except Exception as exc:  # the request fails (not installed, ...); the worker goes on
                answer = "failed", f"{type(exc).__name__}: {exc}"
            if answer is None:  # the partitions go: their next owner carries it out
                log.info("request left to the next owner", request=request.id)
                return
            await self._send(producer, self._outputs([parked.answer(request, *answer)]))

    def _load(self, name: str, version: int) -> Any:
        from bizevents.translators.registry import discover

        found = self.plan.versions.get((name, version))
        return found if found is not None else discover(names=[name]).get(name, version)

    def _redrive_core(self, translator: TransactionTranslator) -> TransactionCore:
        """The core a re-drive translates with: the requested version alone, nothing
        parked (a failure is the re-drive's, which keeps the key parked)."""
        core = self.plan.core
        return TransactionCore(
            [translator], core.serializer, dead_letter_topic=core.dead_letter_topic
        )

    def _redriven_part(self, source: SourceRecord) -> Part:
        """A parked part decoded again, whole (DecodeError when it does not decode)."""
        where = Coordinates(source.topic, source.partition, source.offset)
        decoded = self.plan.decoder.decode(source.key, source.value, where, source.headers)
        if not isinstance(decoded, ChangeEvent):
            raise DecodeError(f"{source.topic}[{source.partition}]@{source.offset} is not a change")
        return Part(0, source, change=decoded)  # not assembled: no arrival sequence

    def _translate(self, outcomes: Sequence[Outcome]) -> tuple[Any, bool]:
        """The records this member publishes of ``outcomes``: the events of the business
        keys it owns (not released there before it took them), and its dead letters."""
        plan = self.plan
        n = plan.assembly_partitions
        #: per part (by identity) of a transaction translated here, the virtual
        #: partitions whose events this member publishes; None: all of its partitions
        live: dict[int, frozenset[int] | None] = {}
        mine: list[Outcome] = []
        #: per transaction translated here (by identity): the virtual partitions it is
        #: translated for (each may be on other versions: promotions, docs/shadow.md)
        shares: dict[int, frozenset[int]] = {}
        # versions that vary by virtual partition need each transaction's own partitions
        every_partition = len(self.owned) >= n and not plan.versioned()
        for outcome in outcomes:
            if isinstance(outcome, Ready):
                if every_partition and not any(p.has(outcome.tx_id) for p in self._points.values()):
                    # all of it is this member's (one worker, or one owning every
                    # virtual partition): no key to hash (a twentieth of its time)
                    belongs = wanted = self.owned
                else:
                    belongs = frozenset(partitions_of(outcome, plan.translators, n))
                    wanted = frozenset(
                        v
                        for v in belongs
                        if v in self.owned and not self._points[v].has(outcome.tx_id)
                    )
                if not wanted:
                    continue
                every = None if len(wanted) == len(belongs) else wanted
                live.update((id(p), every) for p in outcome.parts)
                shares[id(outcome)] = wanted
                mine.append(outcome)
            else:
                parts = tuple(p for p in outcome.parts if self._home(p) in self.owned)
                if parts:
                    mine.append(Abandoned(outcome.tx_id, parts, outcome.reason))

        def owns(translator: TransactionTranslator, part: Part) -> bool:
            wanted = live.get(id(part), self.owned)
            # every key of the transaction is this member's: no need to hash each part
            return wanted is None or owner(translator, part, n) in wanted

        if plan.versioned():
            return self._translate_versioned(mine, shares), bool(live)
        return plan.core.process(mine, owns), bool(live)

    # -- versions: shadows and promotions (docs/shadow.md) --------------------------------

    def _translate_versioned(
        self, mine: Sequence[Outcome], shares: dict[int, frozenset[int]]
    ) -> Result:
        """:meth:`_translate`'s records when versions vary: each transaction is translated,
        for each set of its virtual partitions on the same versions, by those versions
        (with their shadows), publishing the events of those partitions' keys; the
        shadows' comparison of it is counted to the first of them."""
        plan = self.plan
        n = plan.assembly_partitions
        route = self._route
        result = Result()
        for outcome in mine:
            if not isinstance(outcome, Ready):
                merge_results(result, plan.core.process([outcome]))
                continue
            end = outcome.end.origin.offset if outcome.end is not None else None
            groups: dict[Versions, set[int]] = {}
            for v in shares[id(outcome)]:
                groups.setdefault(self._versions_at(v, end), set()).add(v)
            for versions, share in groups.items():
                chosen = frozenset(share)

                def owns(
                    t: TransactionTranslator, p: Part, chosen: frozenset[int] = chosen
                ) -> bool:
                    return owner(route[t.name], p, n) in chosen

                part = Result()
                part.records += self._core(versions).translate(outcome, part, owns)
                if part.shadows:
                    self.stats.compared(plan.assembly_topic, min(chosen), part.shadows)
                    part.shadows = {}
                merge_results(result, part)
        return result

    def _versions_at(self, v: int, end: int | None) -> Versions:
        """The versions that translate, for virtual partition ``v``, the transaction
        whose END is at ``end`` in the transaction topic (a snapshot read, which has no
        END: the partition's current versions)."""
        pins = self.plan.pins
        topic = self.plan.assembly_topic
        at = _LAST if end is None else end
        return tuple(
            sorted(
                (t.name, t.version if pins is None else pins.version(t.name, topic, v, at))
                for t in self.plan.translators
            )
        )

    def _core(self, versions: Versions) -> TransactionCore:
        found = self._cores.get(versions)
        if found is None:
            configured = tuple(sorted((t.name, t.version) for t in self.plan.translators))
            found = self._cores[versions] = (
                self.plan.core if versions == configured else self.plan.make_core(versions)
            )
        return found

    async def _hand_over(self, producer: Any) -> None:
        """Hand each owned virtual partition whose translator was promoted over to the
        new version, before this batch is translated (docs/shadow.md, "The hand-over of
        a virtual partition"): every transaction whose END lies before the transaction
        topic's end as this member knows it (read, or the fetches' high watermark) is
        the old version's, every later one the new version's, recorded in the
        promotions topic and acknowledged before any of them is translated."""
        plan = self.plan
        pins = plan.pins
        assert pins is not None
        topic = plan.assembly_topic
        due = []
        for v in sorted(self.owned):
            for t in plan.translators:
                to = pins.pending(t.name, topic, v)
                if to is None:
                    continue
                if (t.name, to) not in plan.versions:
                    if (t.name, to) not in self._refused:
                        self._refused.add((t.name, to))
                        log.error(
                            "promotion not applied: the version is not installed on this worker",
                            translator=f"{t.name}@{to}",
                        )
                    continue
                due.append((t.name, to, v))
        if not due:
            return
        from aiokafka.structs import TopicPartition

        high = self._read_with.highwater(TopicPartition(plan.transaction_topic, 0))
        offset = max(self._tx_end, high or 0)
        at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        promotions = self.settings.translate.promotions()
        for name, to, v in due:
            previous = pins.version(name, topic, v, offset)
            handover = Handover(name, to, previous, topic, v, offset, at)
            key, value = encode(handover)
            await self._send(producer, [(promotions, 0, key, value, [])])
            pins.apply(handover)
            log.info(
                "virtual partition handed over",
                translator=f"{name}@{to}",
                previous=f"{name}@{previous}",
                topic=topic,
                partition=v,
                offset=offset,
            )

    def _follow_promotions(self) -> asyncio.Future[None] | None:
        """Follow the promotions topic into the plan's pins, for ever (a task)."""
        plan = self.plan
        if plan.pins is None:
            return None
        follower = PromotionFollower(
            None,
            self.settings.kafka.aiokafka(),
            self.settings.translate.promotions(),
            plan.pins,
            {plan.assembly_topic: tuple(t.name for t in plan.translators)},
            lambda name, version: plan.versions.get((name, version)),
        )

        async def follow() -> None:
            try:
                await follower.follow()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # no promotion would be followed: stop, as the row path
                self._failed = exc
                self._stop.set()

        return asyncio.ensure_future(follow())

    async def _read_promotions(self) -> None:
        """Before translating for newly owned partitions: the promotions topic read to its
        end (a previous owner's hand-overs, which the follower may not have read yet),
        and the shadows' figures of those partitions."""
        from bizevents.plumbing.kafka import read_latest
        from bizevents.translators.promotion import decode

        plan = self.plan
        t = self.settings.translate
        conf = self.settings.kafka.librdkafka()
        if plan.pins is not None:
            found = await asyncio.to_thread(
                read_latest, conf, t.promotions(), f"{self.tx.group_id}-promotions"
            )
            for key, value in found.items():
                if value is not None:
                    with suppress(ConfigError):  # not ours: the follower logs it
                        plan.pins.apply(decode(value, f"{t.promotions()} key {key!r}"))
        if plan.shadows:
            records = await asyncio.to_thread(
                read_latest, conf, t.shadows(), f"{self.tx.group_id}-shadows"
            )
            held = [(plan.assembly_topic, v) for v in self.owned]
            with self.stats._lock:
                self.stats.shadows.restore(records, held, {plan.assembly_topic})

    def _home(self, part: Part) -> int:
        """The virtual partition that dead-letters ``part``: its business key's (for the
        first translator reading it), else its transaction's."""
        n = self.plan.assembly_partitions
        if part.change is not None:
            table = part.change.source.qualified_table
            for translator in self.plan.translators:
                if translator.reads(table):
                    return owner(translator, part, n)
        return zlib.crc32((part.tx_id or "").encode()) % n

    def _home_of_record(self, r: Any) -> int:
        """The virtual partition that dead-letters a record that does not decode."""
        return zlib.crc32(f"{r.topic}:{r.partition}:{r.offset}".encode()) % (
            self.plan.assembly_partitions
        )

    def _checkpoints(self) -> list[_Send]:
        """Each owned virtual partition's checkpoint: per technical partition the first
        record read since the oldest open transaction began (else the next to read)."""
        assembler = self.assembler
        assert assembler is not None
        first = assembler.commit_offset(self._seq + 1)
        offsets: dict[_TP, int] = {}
        for tp, seen in self._seen.items():
            while seen and seen[0][0] < first:
                seen.popleft()
            offsets[tp] = seen[0][1] if seen else self._next[tp]
        # (self._points keeps the predecessors' checkpoints: what this member released
        # since, its assembler remembers)
        point = _Point(offsets, assembler.checkpoint())
        self._checkpointed = time.monotonic()
        self._unrecorded = False
        sends: list[_Send] = []
        for v in sorted(self.owned):
            sends.append((self.plan.state_topic, 0, _POINT + str(v).encode(), point.encode(), []))
        return sends

    async def _send(self, producer: Any, items: Sequence[_Send]) -> None:
        """Send ``items`` and wait until the broker acknowledged them all."""
        await (await self._enqueue(producer, items))

    async def _enqueue(self, producer: Any, items: Sequence[_Send]) -> asyncio.Future[Any]:
        """Append ``items`` to one batch per topic and partition, in order; the future of
        the broker's acknowledgement of them all."""
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
        return asyncio.gather(*futures)

    def _outputs(self, records: Sequence[OutRecord]) -> list[_Send]:
        """Events and dead letters to their topics' partitions (``crc32(key) % n``)."""
        sends: list[_Send] = []
        dead_letters = self.plan.core.dead_letter_topic
        for out in records:
            place = out.key
            if out.topic == dead_letters:
                headers = dict(out.headers)
                log.warning(
                    "dead-lettered",
                    reason=(headers.get("bizevents.dlq.reason") or b"").decode(),
                    topic=out.topic,
                )
                # a parked part goes to its key's dead-letter partition: one queue per key
                place = headers.get(HEADER_PARKED_KEY, out.key)
            count = self.plan.partitions[out.topic]
            sends.append((out.topic, partition_for(place, count), out.key, out.value, out.headers))
        return sends

    def _part(self, r: Any, seq: int) -> Part | OutRecord | None:
        """The record as a part (``None`` for a tombstone), or its dead letter."""
        if r.value is None:
            return None  # a tombstone: compaction's marker, not a change
        origin = SourceRecord(r.topic, r.partition, r.offset, r.key, r.value, list(r.headers or ()))
        where = Coordinates(r.topic, r.partition, r.offset)
        try:
            if r.topic == self.plan.transaction_topic:
                return Part(seq, origin, record=self.plan.tx_decoder.decode(r.value, where))
            decoded = self.plan.decoder.decode(r.key, r.value, where, origin.headers)
        except DecodeError as exc:
            dead = Part(seq, origin)
            (record,) = self.plan.core.dead_letters([dead], "decode", exc.reason, exc, "")
            return record
        if isinstance(decoded, Tombstone):
            return None
        assert isinstance(decoded, ChangeEvent)
        return Part(seq, origin, change=decoded)


#: The state topic's key of a virtual partition's checkpoint: ``assembly:<n>``.
_POINT: Final = b"assembly:"
#: An offset past every END: a partition's current versions.
_LAST: Final = 1 << 62


def run_transactions(
    settings: RuntimeSettings,
    tx: TransactionSettings,
    plan: TxPlan | None = None,
    stats: WorkerStats | None = None,
) -> None:
    """Start-up checks (unless ``plan`` is given), then the worker until
    SIGTERM/SIGINT; used by the one runtime when no row translator is pinned."""
    plan = plan or prepare_transactions(settings, tx)
    log.info(
        "translating transactions",
        translators=[t.ref for t in plan.translators],
        shadows=[t.ref for t in plan.shadows.values()],
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
