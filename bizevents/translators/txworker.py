"""The transaction worker: whole committed transactions through transaction translators.

``bizevents translate --transactions`` (and ``bizevents translate``, beside the row
translators) runs it; docs/transactions.md tells the design. :class:`TxWorker` is one
member's loop: every member reads every partition of the technical topics and the
transaction topic itself (assign mode), assembles every transaction
(:mod:`~bizevents.translators.assembly`), and translates and publishes only what it owns;
with ``transactions.by_partition`` a member owns technical partitions, reads only those,
the transaction topic and its exchange partitions, and forwards the slices of
transactions across partitions (:mod:`~bizevents.translators.txexchange`).
Its rooms:

* :mod:`~bizevents.translators.txplan`: what start-up resolves (:func:`prepare_transactions`);
* ownership: the consumer group ``<group_id>.assemble`` over the assembly topic, whose
  assigned partitions are the *virtual partitions* a member owns
  (:mod:`bizevents.plumbing.member`); what it publishes of them:
  :mod:`~bizevents.translators.txshare`, pure;
* :mod:`~bizevents.translators.txcheckpoint`: the checkpoints in the state topic (where to
  read again, what was released), read back at each rebuild after a change of ownership;
* :mod:`~bizevents.translators.txversions`: promotions and shadows per virtual partition;
* :mod:`~bizevents.translators.txparking` and :mod:`~bizevents.translators.txredrive`:
  parked business keys, and the re-drives the loop carries out between two batches;
* :mod:`~bizevents.translators.produce`: the one producer path of both workers.

A worker killed or a partition moved mid-transaction: the next owner reads that
transaction's parts again from the technical topics and releases it once, with the same
event ids (at least once: a crash between the produce and the checkpoint repeats the
same events, same ids). With ``translate.processing_guarantee = "exactly_once"`` each
owned virtual partition's outputs since its last checkpoint and that checkpoint go in
one Kafka transaction of the partition's own producer
(:mod:`~bizevents.translators.txproducer`), and the checkpoints are read
``read_committed``: what a killed member sent after its last checkpoint is aborted, a
member that lost a partition while paused is fenced by the next owner, and a
``read_committed`` reader sees each event once. Every transaction of one business key
is published by one member, in commit order.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Sequence
from contextlib import suppress
from typing import Any

import structlog

from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import traits_of
from bizevents.plumbing.member import Partitions, leave_group, rebalance_listener
from bizevents.plumbing.process import settle_collector
from bizevents.translators.assembly import Assembler, Outcome, Part
from bizevents.translators.metrics import WorkerStats
from bizevents.translators.produce import Send
from bizevents.translators.records import OutRecord, Result
from bizevents.translators.settings import RuntimeSettings, TransactionSettings
from bizevents.translators.txcheckpoint import (
    POINT,
    TP,
    Point,
    Progress,
    read_checkpoints,
    start_offsets,
)
from bizevents.translators.txexchange import GivenUp
from bizevents.translators.txpacing import Frontier
from bizevents.translators.txplan import TxPlan
from bizevents.translators.txproducer import (
    Producers,
    Routed,
    read_held,
    send_routed,
    transaction_reader,
)
from bizevents.translators.txredrive import RedriveTools, TxRedriver
from bizevents.translators.txshare import Share
from bizevents.translators.txversions import TxVersions

__all__ = ["TxWorker"]

log = structlog.get_logger("transactions")


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
        #: The ownership changed: rebuild from the checkpoints before the next batch.
        self._changed = False
        #: Held while a batch is handled, so that a rebalance waits for its checkpoint.
        self._lock = asyncio.Lock()
        self.assembler: Assembler | None = None
        #: Where this member has read since its last rebuild.
        self._read = Progress({})
        #: What this member has read of each partition, by commit position (catching up).
        self._frontier = Frontier((), tx.max_open)
        self._checkpointed = 0.0
        #: A batch was handled since the last checkpoint (an idle member records it).
        self._unrecorded = False
        #: Batches whose outputs the broker has not acknowledged yet: (their
        #: acknowledgement, records read, the newest record's timestamp if it published,
        #: the checkpoint records to send once they are acknowledged, by producer).
        self._inflight: deque[tuple[asyncio.Future[Any], int, int, list[Routed]]] = deque()
        #: Made when the loop runs (aiokafka's clients belong to the running loop).
        self._producer: Producers
        #: The core of each set of versions (promotions, shadows: docs/shadow.md), the
        #: translator each name is routed by (the configured one: every version of a
        #: name routes by the same keys), and the end of the transaction topic read.
        self.versions = TxVersions(settings, tx.group_id, plan, self.stats)
        #: The virtual partitions this member owns and what it publishes of them.
        self.share = Share(plan, self.versions)
        #: The reader (its fetches' high watermarks place a hand-over).
        self._read_with: Any = None
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

    @property
    def owned(self) -> frozenset[int]:
        """The virtual partitions this member owns (the group's assignment)."""
        return self.share.owned

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Read, assemble, translate and publish until :meth:`stop`."""

        producer = self._producer = Producers(self.settings, self.tx, self._exactly_once)
        group = self._ownership()
        reader = transaction_reader(self.settings)
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
            # closing the clients is bounded too
            clients = (("ownership", group), ("reader", reader), ("producer", producer))
            await leave_group(group, clients, self.tx.stop_timeout_s)

    async def _start_then_loop(
        self, producer: Producers, group: Any, reader: Any, tasks: list[asyncio.Future[None]]
    ) -> None:
        """Start the clients, then the loop. Joining waits until the group gives this
        member its share, which a rebalance that does not end can hold for ever: a stop
        meanwhile ends it at once (the fault suite found a member that did not stop
        within 60 s of SIGTERM, its last words "translating transactions")."""
        await producer.start()
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

    async def _loop(self, producer: Producers, reader: Any) -> None:
        from aiokafka.errors import KafkaError
        from aiokafka.structs import TopicPartition
        from confluent_kafka import KafkaException

        reader.assign([TopicPartition(t, p) for t, p in self.plan.read_of(self.owned)])
        while not self._stop.is_set():
            try:
                await self._turn(producer, reader)
            except (KafkaError, KafkaException, TransientError) as exc:
                # a send not acknowledged in time, or a topic not read to its end in
                # time at a rebuild (a broker paused or overloaded): what the turn held
                # may or may not be written, and nothing after it was recorded; start
                # again from the checkpoints, as after a rebalance (what comes again
                # has the same ids), instead of exiting
                # (exactly once, the rebuild's new producers abort what the old ones held)
                self._give_up_inflight()
                self._changed = True
                log.warning(
                    "the broker did not answer in time; reading again from the checkpoints",
                    reason=f"{type(exc).__name__}: {exc}",
                )
                await asyncio.sleep(1.0)
        async with self._lock:
            if self.owned and self.assembler is not None and not self._changed:
                try:
                    await self._checkpoint(producer)
                except (KafkaError, TransientError) as exc:  # the next owner reads from before
                    log.warning("last checkpoint not recorded", reason=str(exc))

    async def _turn(self, producer: Producers, reader: Any) -> None:
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
        reading = read_held(reader, self._frontier, self.assembler, self.stats, self.tx.max_records)
        batches = await reading
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

    # A rebuild in hand published nothing yet: the group need not wait for it (it gives
    # up at its next step). A rebalance waits for every member's revocation, and the
    # embedded broker with no deadline (docs/broker.md): one waiting behind a rebuild
    # that did not end held the whole group.
    async def _revoked(self, taken: Partitions) -> None:
        self._revoking = True  # a re-drive in hand stops at its next transaction
        if self._rebuilding:
            self._owning(frozenset())
            return
        async with self._lock:
            try:
                if self.owned and self.assembler is not None and not self._changed:
                    await self._checkpoint(self._producer)
            finally:  # fenced (this member lost its partitions before): nothing to record
                self._owning(frozenset())

    async def _assigned(self, given: Partitions) -> None:
        self._revoking = False
        owned = frozenset(partition for _, partition in given)
        if self._rebuilding:
            self._owning(owned)
            return
        async with self._lock:
            self._owning(owned)

    def _ownership(self) -> Any:
        """The consumer whose assignment in ``<group_id>.assemble`` is what this member
        owns; a revocation waits for the batch in hand and records its checkpoint."""
        from aiokafka import AIOKafkaConsumer

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
        consumer.subscribe(
            [self.plan.assembly_topic], listener=rebalance_listener(self._revoked, self._assigned)
        )
        return consumer

    def _owning(self, owned: frozenset[int]) -> None:
        """The group's new assignment: rebuild from the checkpoints before the next batch
        (the lock held, or a rebuild in hand, which gives up at its next step)."""
        self.share.owned = owned
        self._changed = True

    async def _keep_membership(self, group: Any) -> None:
        """Poll the ownership consumer (its topic holds no records): a member that does
        not poll leaves the group after ``max_poll_interval``."""
        while not self._stop.is_set():
            await group.getmany(timeout_ms=500)

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
            # exactly once: each owned partition's producer started before its checkpoint
            # is read (what a previous owner held open is aborted, and it is fenced)
            await self._producer.own(self.owned)
            if owned and not self._changed:
                points = await read_checkpoints(
                    self.settings.kafka.aiokafka(),
                    plan.state_topic,
                    self._exactly_once,
                    self.tx.request_timeout_s,
                )
                if self._changed:
                    return
                await self.versions.read(self.owned)
                if self._parked is not None:
                    # every park of these partitions is acknowledged (their previous
                    # owners settled before they let go): read them before translating
                    await self._parked.restore()
                start = await asyncio.to_thread(
                    start_offsets,
                    self.settings.kafka.librdkafka(),
                    self.tx.start_group(),
                    plan.read_of(self.owned),
                )
                if self._changed:
                    return
                self._assemble_from(reader, {v: points.get(v, Point()) for v in owned}, start)
            log.info(
                "assembling",
                log=plan.assembly_topic,
                partitions=owned,
                took_s=round(time.monotonic() - began, 3),
            )
        finally:
            self._rebuilding = False

    def _assemble_from(self, reader: Any, mine: dict[int, Point], start: dict[TP, int]) -> None:
        """A new assembler, and the reader placed at the oldest of ``mine``'s checkpoints."""
        from aiokafka.structs import TopicPartition

        self.assembler, offsets = self.share.start(mine, start)
        if self.plan.by_partition:  # a member reads only what it owns
            reader.assign([TopicPartition(t, p) for t, p in offsets])
        for (topic, partition), offset in offsets.items():
            reader.seek(TopicPartition(topic, partition), offset)
        self._read = Progress(offsets, self._read.seq)
        paced = [*self.plan.sources_of(self.owned), (self.plan.transaction_topic, 0)]
        self._frontier = Frontier(paced, self.tx.max_open)
        self._checkpointed = time.monotonic()

    # -- a batch -------------------------------------------------------------------

    async def _handle(self, producer: Producers, batches: dict[Any, Sequence[Any]]) -> None:
        """Decode and assemble the batch; translate what this member owns; publish; then
        (at most every ``commit_interval_s``) record the checkpoints."""
        assembler = self.assembler
        assert assembler is not None
        plan = self.plan
        if plan.pins is not None and plan.pins.promotions:
            await self._hand_over(producer)
        outcomes: list[Outcome] = []
        #: per home virtual partition, the dead letters of records that do not decode
        bad: dict[int, list[OutRecord]] = {}
        count = 0
        newest = 0
        for tp, records in batches.items():
            where: TP = (tp.topic, tp.partition)
            if not records or where not in self._read.next:
                continue  # fetched before the reader was assigned anew
            if tp.topic == plan.transaction_topic:
                self.versions.tx_end = max(self.versions.tx_end, records[-1].offset + 1)
            for r in records:
                seq = self._read.arrived(where, r.offset)
                part = self.share.part(r, seq)
                if isinstance(part, OutRecord):
                    home = self.share.home_of_record(r)
                    if home in self.owned:
                        bad.setdefault(home, []).append(part)
                elif isinstance(part, GivenUp):
                    outcomes += self.share.hear(part, assembler)
                elif part is not None and self.share.take(part):
                    outcomes += assembler.feed(part)
            if isinstance(part, Part):  # the last part read there (commit order)
                self._frontier.read(where, part.tx_id)
            self._read.next[where] = records[-1].offset + 1
            count += len(records)
            newest = max(newest, records[-1].timestamp or 0)
        if self._exactly_once:  # each partition's outputs in its own transaction
            results, published = self.share.translate_each(outcomes)
        else:
            result, published = self.share.translate(outcomes)
            results = {min(self.owned): result}
        stats = self.stats
        if not stats.first_block_at:
            stats.first_block_at = time.time()
            # as the row worker's first block does: without it every full collection
            # walked all of start-up's objects (about 90 ms each, a dozen in
            # bench/latency.py's 20 s: the p99) and a young one ran every 700 allocations
            settle_collector()
        stats.add(plan.transaction_topic, {}, sum(map(len, bad.values())))
        routed: list[Routed] = []
        forwards = self.share.forwards(outcomes)  # outputs of this batch (txexchange)
        for v in sorted({*results, *bad, *forwards}):
            records = [*(results[v].records if v in results else ()), *bad.get(v, ())]
            stats.add(plan.transaction_topic, results[v].counts if v in results else {})
            routed.append((producer.of(v), [*self.share.outputs(records), *forwards.get(v, ())]))
        # the next batch is read while this one's acknowledgements are outstanding
        sent = await send_routed(routed)
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
            self._inflight.append((await send_routed(points), 0, 0, []))

    async def _checkpoint(self, producer: Producers) -> None:
        """Once every outstanding output is acknowledged, record the checkpoints (each
        partition's with its producer); exactly once, commit their transactions."""
        while self._inflight:
            await self._settle_oldest()
        await (await send_routed(self._checkpoints()))
        if self.plan.shadows:
            # the shadows' figures of the virtual partitions, for `bizevents shadow report`
            # and for the next owner of a partition (docs/shadow.md)
            with self.stats._lock:
                records = self.stats.shadows.dirty()
            topic = self.settings.translate.shadows()
            await self._send(
                producer.first(), [(topic, 0, key, value, []) for key, value in records]
            )
        await producer.commit()

    async def _requests(self, producer: Producers) -> None:
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

        async def send(records: Sequence[OutRecord]) -> None:
            await self._send(producer.first(), self.share.outputs(records))

        def counted(result: Result) -> None:
            self.stats.add(self.plan.transaction_topic, result.counts)

        # partitions going, or the member stopping: the request stays pending for the
        # next owner, which carries it out from the start
        tools = RedriveTools.of(
            self.plan, send, counted, lambda: self._revoking or self._stop.is_set()
        )
        await parked.carry_out_all(pending, tools)

    # -- versions: shadows and promotions (docs/shadow.md) --------------------------------

    async def _hand_over(self, producer: Producers) -> None:
        """Owned virtual partitions handed over to promoted versions (:class:`TxVersions`)."""
        from aiokafka.structs import TopicPartition

        promotions = self.settings.translate.promotions()

        async def send(key: bytes, value: bytes) -> None:
            await self._send(producer.first(), [(promotions, 0, key, value, [])])

        where = TopicPartition(self.plan.transaction_topic, 0)
        await self.versions.hand_over(send, self.owned, lambda: self._read_with.highwater(where))

    def _follow_promotions(self) -> asyncio.Future[None] | None:
        """Follow the promotions topic into the plan's pins, for ever (a task); a failure
        stops the worker, as the row path's does."""
        if self.plan.pins is None:
            return None

        async def follow() -> None:
            try:
                await self.versions.follow()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # no promotion would be followed
                self._failed = exc
                self._stop.set()

        return asyncio.ensure_future(follow())

    def _checkpoints(self) -> list[Routed]:
        """Each owned virtual partition's checkpoint: per technical partition the first
        record read since the oldest open transaction began (else the next to read)."""
        assembler = self.assembler
        assert assembler is not None
        offsets = self._read.offsets(assembler.commit_offset(self._read.seq + 1))
        released = assembler.checkpoint()
        self._checkpointed = time.monotonic()
        self._unrecorded = False
        # the partitions the assembler was built for (the owned ones, unless a new
        # assignment waits for its rebuild)
        return [
            (
                self._producer.of(v),
                [(self.plan.state_topic, 0, POINT + str(v).encode(), point.encode(), [])],
            )
            for v, point in self.share.points_after(offsets, released).items()
        ]

    async def _send(self, producer: Any, items: Sequence[Send]) -> None:
        """Send ``items`` and wait until the broker acknowledged them all."""
        await (await send_routed([(producer, items)]))
