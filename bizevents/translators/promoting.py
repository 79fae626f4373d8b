"""The worker's side of a promotion (docs/shadow.md): it follows the promotions topic,
hands each partition over at one offset, and translates each record with the version
its offset belongs to.

- :class:`PromotionFollower` reads the compacted promotions topic from its start, into
  the worker's :class:`~bizevents.translators.promotion.Pins`; no block is translated
  before it has read to the topic's end once (the versions depend on it).
- :meth:`PromotionFollower.before` runs before each block: for every translator of the
  block's topic whose partition must be handed over, it waits until every earlier block
  of the worker is acknowledged, commits the block's first offset, writes the
  :class:`~bizevents.translators.promotion.Handover` and waits for the broker's
  acknowledgement; only then is the block translated, by the new version.
- :func:`fold_promotions` reads the topic to its end once, into pins: at start-up
  (:func:`read_pins`) and at a transaction worker's rebuild.
- :class:`VersionedProcessor` translates a block with the pipeline of the versions its
  offsets belong to, splitting a block that spans a hand-over (one read again after a
  kill).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

import structlog

from bizevents.plumbing.errors import ConfigError
from bizevents.plumbing.kafka import read_latest
from bizevents.translators._faust import aiokafka_producer, commit_through
from bizevents.translators.api import Translator
from bizevents.translators.pipeline import Pipeline
from bizevents.translators.promotion import Handover, Pins, Promotion, decode, encode
from bizevents.translators.records import Counts, Result
from bizevents.translators.settings import RuntimeSettings

log = structlog.get_logger("translate")

Versions = tuple[tuple[str, int], ...]


def fold_promotions(
    pins: Pins,
    conf: dict[str, Any],
    topic: str,
    group: str,
    *,
    strict: bool = True,
    wait_s: float | None = None,
) -> Pins:
    """The promotions ``topic`` read to its end (as ``group``) into ``pins``, through a
    restarting cluster for up to ``wait_s`` (:func:`read_latest`). ``strict``: a record
    that does not decode is a :class:`ConfigError`; else it is passed over (the follower
    logs it)."""
    found = read_latest(conf, topic, group, wait_s=wait_s)
    for key, value in found.items():
        if value is None:
            continue
        if strict:
            pins.apply(decode(value, f"{topic} key {key!r}"))
            continue
        with suppress(ConfigError):
            pins.apply(decode(value, f"{topic} key {key!r}"))
    return pins


def read_pins(settings: RuntimeSettings, configured: Mapping[str, int]) -> Pins:
    """The configured pins with the promotions topic folded in."""
    t = settings.translate
    return fold_promotions(
        Pins(configured),
        settings.kafka.librdkafka(),
        t.promotions(),
        f"{t.group_id}-promotions",
        wait_s=t.broker_wait_s,  # a restarting cluster, as for the topics' metadata
    )


def merge_results(into: Result, other: Result) -> None:
    """Add ``other``'s records and counts to ``into`` (records in order)."""
    into.records.extend(other.records)
    for ref, c in other.counts.items():
        into.counts.setdefault(ref, Counts()).add(c)
    into.undecodable += other.undecodable
    into.tombstones += other.tombstones
    into.unrouted += other.unrouted
    for ref, comparison in other.shadows.items():
        found = into.shadows.get(ref)
        if found is None:
            into.shadows[ref] = comparison
        else:
            found.merge(comparison)


class VersionedProcessor:
    """A block of one partition through the pipeline of the versions its offsets
    belong to (:meth:`Pins.version`); one pipeline per set of versions, made once."""

    def __init__(
        self,
        pins: Pins,
        names: Mapping[str, tuple[str, ...]],
        make: Callable[[Versions], Pipeline],
    ) -> None:
        self.pins = pins
        #: topic -> the names of the pinned translators reading it
        self.names = names
        self._make = make
        self._pipelines: dict[Versions, Pipeline] = {}

    def pipeline(self, versions: Versions) -> Pipeline:
        found = self._pipelines.get(versions)
        if found is None:
            found = self._pipelines[versions] = self._make(versions)
        return found

    def versions(self, topic: str, partition: int, offset: int) -> Versions:
        pins = self.pins
        return tuple(
            sorted(
                (name, pins.version(name, topic, partition, offset))
                for name in self.names.get(topic, ())
            )
        )

    def __call__(self, topic: str, partition: int, records: Sequence[Any]) -> Result:
        first = self.versions(topic, partition, int(records[0].offset))
        last = self.versions(topic, partition, int(records[-1].offset))
        if first == last:  # the usual case: no hand-over inside the block
            return self.pipeline(first).process_partition(topic, partition, records)
        result = Result()
        start = 0
        current = first
        for i in range(1, len(records) + 1):
            here = (
                self.versions(topic, partition, int(records[i].offset))
                if i < len(records)
                else None
            )
            if here != current:
                part = self.pipeline(current).process_partition(topic, partition, records[start:i])
                merge_results(result, part)
                start = i
                if here is not None:
                    current = here
        return result


class PromotionFollower:
    """Follows the promotions topic into ``pins`` and hands partitions over."""

    def __init__(
        self,
        app: Any,
        kafka: Mapping[str, Any],
        topic: str,
        pins: Pins,
        names: Mapping[str, tuple[str, ...]],
        available: Callable[[str, int], Translator | None],
    ) -> None:
        self.app = app
        self.kafka = dict(kafka)
        self.topic = topic
        self.pins = pins
        self.names = names
        #: ``(name, version) -> the translator`` if this worker can run it, else None
        self.available = available
        self.ready = asyncio.Event()
        self._names = {name for names_ in names.values() for name in names_}
        self._refused: set[tuple[str, int]] = set()

    async def follow(self) -> None:
        """Read the topic for ever; ``ready`` once it was read to its end."""
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            **self.kafka, enable_auto_commit=False, group_id=None, fetch_max_wait_ms=200
        )
        await consumer.start()
        tp = TopicPartition(self.topic, 0)
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while True:
                batches = await consumer.getmany(tp, timeout_ms=500)
                for record in batches.get(tp, []):
                    if record.value is None:
                        continue
                    try:
                        found = decode(record.value, f"{self.topic}[0]@{record.offset}")
                    except ConfigError as exc:  # not ours: say so, and follow the rest
                        log.error("promotion record skipped", error=str(exc))
                        continue
                    self.pins.apply(found)
                    if isinstance(found, Promotion) and found.name in self._names:
                        log.info(
                            "promotion",
                            translator=f"{found.name}@{found.to}",
                            previous=f"{found.name}@{found.previous}",
                            at=found.at,
                        )
                if not self.ready.is_set():
                    end = consumer.highwater(tp)
                    if end is not None and await consumer.position(tp) >= end:
                        self.ready.set()
                        log.info("promotions read", promotions=len(self.pins.promotions))
        finally:
            await consumer.stop()

    async def before(self, drain: Callable[[], Any], tp: Any, first_offset: int) -> None:
        """Hand ``tp`` over at ``first_offset`` for every translator that must be, before
        its block is translated (``drain`` waits for every earlier block's outputs)."""
        await self.ready.wait()
        names = self.names.get(tp.topic, ())
        due = due_versions(self.pins, names, tp.topic, tp.partition, self.available, self._refused)
        if not due:
            return
        await drain()
        # the offsets before the hand-over are the old version's: commit them first, so
        # that no kill can make a successor read them again under the new version
        await commit_through(self.app, tp, first_offset)
        producer = aiokafka_producer(self.app)

        async def send(key: bytes, value: bytes) -> None:
            await (await producer.send(self.topic, value, key=key, partition=0))

        await hand_over(send, self.pins, due, tp.topic, tp.partition, first_offset, "partition")


def due_versions(
    pins: Pins,
    names: Iterable[str],
    topic: str,
    partition: int,
    available: Callable[[str, int], Any],
    refused: set[tuple[str, int]],
) -> list[tuple[str, int]]:
    """``(name, version)`` of each of ``names`` that ``partition`` of ``topic`` must be
    handed over to now; a version not installed here is logged once (in ``refused``)
    and left for a worker that has it."""
    due = []
    for name in names:
        to = pins.pending(name, topic, partition)
        if to is None:
            continue
        if available(name, to) is None:
            if (name, to) not in refused:
                refused.add((name, to))
                log.error(
                    "promotion not applied: the version is not installed on this worker",
                    translator=f"{name}@{to}",
                )
            continue
        due.append((name, to))
    return due


async def hand_over(
    send: Callable[[bytes, bytes], Awaitable[None]],
    pins: Pins,
    due: Sequence[tuple[str, int]],
    topic: str,
    partition: int,
    offset: int,
    what: str,
) -> None:
    """Hand ``partition`` of ``topic`` (a ``what``: "partition", "virtual partition")
    over at ``offset`` to each version ``due``: the :class:`Handover` record sent (``send``
    returns once the broker acknowledged it), then applied to ``pins``."""
    at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    for name, to in due:
        previous = pins.version(name, topic, partition, offset)
        handover = Handover(name, to, previous, topic, partition, offset, at)
        await send(*encode(handover))
        pins.apply(handover)
        log.info(
            f"{what} handed over",
            translator=f"{name}@{to}",
            previous=f"{name}@{previous}",
            topic=topic,
            partition=partition,
            offset=offset,
        )
