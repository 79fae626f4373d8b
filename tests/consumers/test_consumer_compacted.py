"""The consumer kit on a business topic Apache Kafka really compacted: a member started
from offset zero sees each key's latest event once."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from bizevents.consumers import Delivery
from bizevents.devstack import Endpoints
from tests.compaction import Kept, compact, compact_quickly, missing_offsets
from tests.consumers.test_consumer import Kit, PriceSet, _run_until

pytestmark = pytest.mark.integration


def test_a_member_from_offset_zero_sees_each_keys_latest_event_once(
    bizevents_stack_on: Callable[[Any], Endpoints], unique_topic: Callable[[str], str]
) -> None:
    stack = bizevents_stack_on("kafka")  # Tansu does not compact (docs/broker.md)
    kit = Kit(stack, unique_topic("prices"), partitions=1)
    compact_quickly(stack.bootstrap_servers, kit.topic)
    skus = [f"sku-{i}" for i in range(8)]
    for seq in range(1, 11):
        for sku in skus:
            kit.send(kit.event(sku, seq, f"{sku}/{seq}"), sku)
    kit.flush()
    rolls = itertools.count(1)

    def roll() -> None:
        n = next(rolls)
        kit.send(kit.event("roll", n, f"roll/{n}"), "roll")
        kit.flush()

    def cleaned(kept: list[Kept]) -> bool:
        ours = [r.key for r in kept if r.key != b"roll"]
        return missing_offsets(kept) > 0 and len(ours) == len(set(ours)) == len(skus)

    compact(stack.bootstrap_servers, kit.topic, roll, cleaned)

    seen: list[tuple[str, int]] = []

    def handler(d: Delivery[PriceSet]) -> None:
        if d.event.sku != "roll":
            seen.append((d.event.sku, d.event.seq))

    consumer = kit.consumer(handler, unique_topic("group"))
    asyncio.run(_run_until(consumer, lambda: len(seen) >= len(skus), 60))
    assert sorted(seen) == [(sku, 10) for sku in skus]
    assert consumer.stats.dead_lettered == 0
