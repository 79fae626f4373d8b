"""The transaction worker's versions per virtual partition
(:mod:`bizevents.translators.txversions`): the hand-over, through the in-memory loop of
tests/translators/txharness.py."""

from __future__ import annotations

import asyncio

from bizevents_store.translators import orders_v3

from bizevents.contracts.serde import BusinessSerializer
from bizevents.translators.promotion import Handover, Pins, Promotion, decode
from bizevents.translators.routing import partitions_of
from tests.translators.test_txshadow import total_off
from tests.translators.txharness import Member, ended, make_plan
from tests.translators.txharness import orders as _orders

N = 4


def test_a_promotion_hands_each_owned_partition_over_at_the_topics_end(
    serializer: BusinessSerializer,
) -> None:
    """orders@13 promoted: each owned virtual partition is handed over at the transaction
    topic's end as the member knows it; transactions ending before it stay orders@3's."""
    pins = Pins({"orders": 3})
    pins.apply(Promotion("orders", 13, 3, "2026-11-29T06:00:00Z"))
    plan = make_plan([orders_v3], serializer, N, pins=pins, versions=[total_off])
    member = Member.of(plan)
    member.rebuild(frozenset({1, 2}), {})
    member.versions.tx_end = 40
    sent: list[tuple[bytes, bytes]] = []

    async def send(key: bytes, value: bytes) -> None:
        sent.append((key, value))

    asyncio.run(member.versions.hand_over(send, member.share.owned, lambda: 42))
    handovers = [decode(value, "test") for _, value in sent]
    assert all(isinstance(h, Handover) for h in handovers)
    assert sorted((h.partition, h.offset, h.previous, h.to) for h in handovers) == [  # type: ignore[union-attr]
        (1, 42, 3, 13),
        (2, 42, 3, 13),
    ]
    assert pins.pending("orders", plan.assembly_topic, 1) is None
    asyncio.run(member.versions.hand_over(send, member.share.owned, lambda: 50))
    assert len(sent) == 2  # handed over once
    order = next(  # an order of an owned partition
        tx
        for tx in _orders(1, 20, 100)
        if set(partitions_of(tx, [orders_v3], N)) <= member.share.owned
    )
    old, new = ended(order, 41), ended(order, 42)
    assert {r.translator for r in member.handle([old])} == {"orders@3"}
    assert {r.translator for r in member.handle([new])} == {"orders@13"}
