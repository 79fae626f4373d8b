"""The consumer kit against the real broker and registry: per-key order, commit after
the handler, duplicates skipped, corrections recognised, poison dead-lettered."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents import condecimal
from bizevents.consumers import (
    HEADER_CONSUMER_OFFSET,
    HEADER_CONSUMER_TOPIC,
    BusinessConsumer,
    Delivery,
)
from bizevents.contracts.business import (
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    BusinessEvent,
    Lineage,
    lineage_headers,
    with_lineage,
)
from bizevents.contracts.serde import BusinessSerializer
from bizevents.devstack import Endpoints
from bizevents.plumbing.kafka import broker_traits, ensure_topics
from bizevents.plumbing.settings import KafkaSettings

pytestmark = pytest.mark.integration


class PriceSet(BusinessEvent):
    sku: str
    seq: int
    price: condecimal(max_digits=12, decimal_places=2)  # type: ignore[valid-type]

    class Meta:
        namespace = "kit.prices"


class Kit:
    def __init__(self, endpoints: Endpoints, topic: str, partitions: int = 3) -> None:
        self.endpoints = endpoints
        self.topic = topic
        self.kafka = KafkaSettings(bootstrap_servers=endpoints.bootstrap_servers)
        self.registry = SchemaRegistryClient({"url": endpoints.registry_url})
        self.serialize = BusinessSerializer(self.registry)
        ensure_topics(AdminClient(self.kafka.librdkafka()), [topic], partitions)
        self.producer = Producer(self.kafka.librdkafka())

    def event(
        self,
        sku: str,
        seq: int,
        event_id: str,
        translator: str = "prices@1",
        replay: bool = False,
        price: Decimal = Decimal("1.50"),
    ) -> PriceSet:
        lineage = Lineage(
            event_id=event_id,
            translator=translator,
            source_topic="shop.public.prices",
            source_partition=0,
            source_offset=seq,
            source_position=f"0/{seq:X}",
            replay=replay,
        )
        return with_lineage(PriceSet(sku=sku, seq=seq, price=price), lineage)

    def send(self, event: PriceSet | None, key: str, raw: bytes | None = None) -> None:
        value = raw if event is None else self.serialize(event, self.topic)
        headers: list[tuple[str, str | bytes | None]] = (
            [] if event is None else list(lineage_headers(event.lineage))
        )
        self.producer.produce(self.topic, value, key.encode(), headers=headers)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0

    def consumer(self, handler: Any, group: str, **options: Any) -> BusinessConsumer:
        return BusinessConsumer(
            [self.topic],
            handler,
            contracts=[PriceSet],
            group_id=group,
            kafka=self.kafka,
            registry=self.registry,
            retry_backoff_s=0.01,
            **options,
        )

    def committed(self, group: str) -> int:
        async def read() -> int:
            c = AIOKafkaConsumer(**self.kafka.aiokafka(), group_id=group)
            await c.start()
            try:
                parts = c.partitions_for_topic(self.topic) or set()
                if not parts:
                    await c._client.force_metadata_update()
                    parts = c.partitions_for_topic(self.topic) or set()
                total = 0
                for p in parts:
                    total += await c.committed(TopicPartition(self.topic, p)) or 0
                return total
            finally:
                await c.stop()

        return asyncio.run(read())


async def _run_until(consumer: BusinessConsumer, done: Callable[[], bool], limit: float) -> None:
    task = asyncio.ensure_future(consumer.run())
    deadline = asyncio.get_running_loop().time() + limit
    while not done():
        assert not task.done(), task.exception()
        assert asyncio.get_running_loop().time() < deadline, "the consumer did not finish"
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)  # anything more that would (wrongly) arrive
    consumer.stop()
    await asyncio.wait_for(task, 30)


def test_order_duplicates_corrections_poison(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    """Per key in order; a duplicate skipped; a replayed correction marked superseding;
    a stale re-send skipped; bad bytes and a failing handler dead-lettered; all committed."""
    kit = Kit(bizevents_stack, unique_topic("prices"))
    skus = [f"sku-{i}" for i in range(6)]
    for seq in range(1, 21):
        for sku in skus:
            kit.send(kit.event(sku, seq, f"{sku}/{seq}"), sku)
    kit.send(kit.event("sku-0", 3, "sku-0/3"), "sku-0")  # duplicate
    kit.send(kit.event("sku-1", 5, "sku-1/5", "prices@2", replay=True), "sku-1")  # correction
    kit.send(kit.event("sku-1", 5, "sku-1/5", "prices@1"), "sku-1")  # stale after the fix
    kit.send(None, "sku-2", raw=b"\x00\x00\x00\x00\x01garbage")  # poison: bad bytes
    kit.send(kit.event("sku-3", 99, "sku-3/99"), "sku-3")  # the handler always fails on it
    kit.flush()
    seen: dict[str, list[tuple[int, bool]]] = {s: [] for s in skus}
    calls = [0]

    def handler(d: Delivery[PriceSet]) -> None:
        calls[0] += 1
        if d.event.seq == 99:
            raise RuntimeError("cannot price it")
        seen[d.event.sku].append((d.event.seq, d.supersedes))

    group = unique_topic("group")
    consumer = kit.consumer(handler, group, on_error="dead-letter")  # parking: its own test
    asyncio.run(_run_until(consumer, lambda: consumer.stats.dead_lettered >= 2, 60))

    for sku in skus:
        seqs = [s for s, _ in seen[sku]]
        want = list(range(1, 21)) + ([5] if sku == "sku-1" else [])
        assert seqs == want, sku  # per-key order, the correction after the original
    assert seen["sku-1"][-1] == (5, True)
    assert not any(sup for sku in skus for _, sup in seen[sku][:20])
    stats = consumer.stats
    assert (stats.delivered, stats.corrections, stats.duplicates, stats.stale) == (121, 1, 1, 1)
    assert stats.dead_lettered == 2
    assert calls[0] == 121 + 3  # three attempts on the failing one
    assert kit.committed(group) == 6 * 20 + 5  # every record, poison included

    dead = _read_all(kit, f"{group}.dead-letter", 2)
    stages = sorted(dict(h)[HEADER_DLQ_STAGE] for h in dead.values())
    assert stages == [b"consume-decode", b"consume-handler"]
    for headers in dead.values():
        h = dict(headers)
        assert h[HEADER_CONSUMER_TOPIC] == kit.topic.encode()
        assert int(h[HEADER_CONSUMER_OFFSET]) >= 0
        assert h[HEADER_DLQ_REASON]
    assert any(v == b"\x00\x00\x00\x00\x01garbage" for v in dead)


def test_offsets_committed_only_after_the_handler(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    """A process that dies inside the handler committed nothing of the batch in hand:
    the next member of the group gets those events again, then every one once."""
    kit = Kit(bizevents_stack, unique_topic("prices"), partitions=1)
    for seq in range(1, 11):
        kit.send(kit.event("k", seq, f"k/{seq}"), "k")
    kit.flush()
    group = unique_topic("group")
    first: list[int] = []

    class Died(BaseException):
        pass

    def dies_at_six(d: Delivery[PriceSet]) -> None:
        if d.event.seq == 6:
            raise Died
        first.append(d.event.seq)

    with pytest.raises(Died):
        asyncio.run(kit.consumer(dies_at_six, group).run())
    assert first == [1, 2, 3, 4, 5]
    assert kit.committed(group) == 0

    second: list[int] = []
    consumer = kit.consumer(lambda d: second.append(d.event.seq), group)
    asyncio.run(_run_until(consumer, lambda: len(second) >= 10, 60))
    assert second == list(range(1, 11))
    assert kit.committed(group) == 10


def _read_all(kit: Kit, topic: str, n: int) -> dict[bytes, list[tuple[str, bytes]]]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    c = Consumer({**kit.kafka.librdkafka(), "group.id": "unused", "enable.auto.commit": False})
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([CTopicPartition(topic, p, 0) for p in parts])
    out: dict[bytes, list[tuple[str, bytes]]] = {}
    try:
        for _ in range(100):
            for m in c.consume(10, 0.2):
                value, headers = m.value(), m.headers()
                if m.error() is None and value is not None:
                    pairs = headers.items() if isinstance(headers, dict) else headers or []
                    out[value] = [(k, v) for k, v in pairs if isinstance(v, bytes)]
            if len(out) >= n:
                break
    finally:
        c.close()
    return out


def test_a_stopped_consumer_leaves_its_group_where_the_broker_can_take_it(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str], caplog: Any
) -> None:
    """A consumer's stop leaves its group only where the broker can take a LeaveGroup
    (``plumbing.kafka.stay_in_group_where_needed``, as the workers'): Tansu keeps a
    member that leaves while its group rebalances as the group's leader for ever
    (docs/broker.md); on Kafka a member that leaves hands its partitions over at once.
    Two consumers go through a rebalance (a client leaves only a group it holds a
    generation past 0 of); the first stops and the second takes its partition; then
    the second stops. Their client's log has a LeaveGroup for each stop on Kafka, none
    on Tansu."""
    import logging

    caplog.set_level(logging.INFO, logger="aiokafka.consumer.group_coordinator")
    kit = Kit(bizevents_stack, unique_topic("prices"), partitions=2)
    group = unique_topic("group")
    first = kit.consumer(lambda d: None, group)
    second = kit.consumer(lambda d: None, group)

    async def run() -> None:
        async def until(done: Callable[[], bool], *tasks: asyncio.Future[None]) -> None:
            deadline = asyncio.get_running_loop().time() + 60
            while not done():
                assert not any(t.done() for t in tasks), [t.exception() for t in tasks]
                assert asyncio.get_running_loop().time() < deadline, "no assignment"
                await asyncio.sleep(0.05)

        one = asyncio.ensure_future(first.run())
        await until(lambda: len(first.owned) == 2, one)
        two = asyncio.ensure_future(second.run())
        await until(lambda: len(first.owned) == len(second.owned) == 1, one, two)
        first.stop()
        await asyncio.wait_for(one, 30)
        await until(lambda: len(second.owned) == 2, two)
        second.stop()
        await asyncio.wait_for(two, 30)

    asyncio.run(run())
    said = [r.getMessage() for r in caplog.records]
    assert any("(generation 1)" in m for m in said), "no rebalance: nothing to leave"
    leaves = broker_traits(bizevents_stack.bootstrap_servers).leaves_groups
    assert len([m for m in said if "LeaveGroup request" in m]) == (2 if leaves else 0)
