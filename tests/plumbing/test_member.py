"""A consumer group's member as both workers and the consumer kit hold one
(:mod:`bizevents.plumbing.member`): the listener hands over plain partitions, and a
stop is bounded whatever its clients do."""

from __future__ import annotations

import asyncio
import time

from aiokafka.structs import TopicPartition

from bizevents.plumbing.member import Partitions, leave_group, rebalance_listener


def test_the_listener_hands_the_member_topic_partition_pairs() -> None:
    seen: list[tuple[str, Partitions]] = []

    async def revoked(taken: Partitions) -> None:
        seen.append(("revoked", taken))

    async def assigned(given: Partitions) -> None:
        seen.append(("assigned", given))

    listener = rebalance_listener(revoked, assigned)
    asyncio.run(listener.on_partitions_revoked({TopicPartition("a", 1)}))
    asyncio.run(listener.on_partitions_assigned({TopicPartition("a", 0), TopicPartition("b", 2)}))
    assert seen == [
        ("revoked", frozenset({("a", 1)})),
        ("assigned", frozenset({("a", 0), ("b", 2)})),
    ]


class _Client:
    """A client whose stop returns, fails, or never ends."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.asked = False

    async def stop(self) -> None:
        self.asked = True
        if self.how == "fails":
            raise RuntimeError("gone")
        if self.how == "hangs":
            await asyncio.sleep(60)


def test_a_stop_asks_every_client_within_the_deadline() -> None:
    group, hangs, fails = _Client("stops"), _Client("hangs"), _Client("fails")
    began = time.monotonic()
    clients = (("group", group), ("hangs", hangs), ("fails", fails))
    asyncio.run(leave_group(group, clients, timeout_s=0.3))
    assert time.monotonic() - began < 5
    assert group.asked and hangs.asked and fails.asked
