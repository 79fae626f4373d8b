"""A member of a consumer group, as the translator workers and the consumer kit hold one.

- :func:`rebalance_listener`: aiokafka's rebalance listener, which hands the member's
  own callbacks the partitions it loses or is given, as ``(topic, partition)`` sets;
  what the member does then (wait for the batch in hand, record a checkpoint) stays
  its own.
- :func:`restore_parked`: the parked keys and pending requests read whole from the
  parked topic, as a member does on every assignment before it handles a record of
  its partitions (docs/parking.md).
- :func:`leave_group`: a stopping member leaves the group, or stays in it where the
  broker cannot take a LeaveGroup (:func:`~bizevents.plumbing.kafka.stay_in_group_where_needed`),
  then its clients are stopped, each within what is left of a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from bizevents.plumbing.kafka import stay_in_group_where_needed
from bizevents.plumbing.parking import ParkedKeys, Request
from bizevents.plumbing.parkingio import REQUEST_PREFIX, read_parked, read_requests

__all__ = ["Partitions", "leave_group", "rebalance_listener", "restore_parked"]

log = structlog.get_logger("kafka")

#: The partitions a rebalance takes or gives: ``{(topic, partition)}``.
Partitions = frozenset[tuple[str, int]]


def rebalance_listener(
    revoked: Callable[[Partitions], Awaitable[None]],
    assigned: Callable[[Partitions], Awaitable[None]],
) -> Any:
    """An aiokafka ``ConsumerRebalanceListener`` calling ``revoked`` and ``assigned``."""
    from aiokafka.abc import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, taken: Any) -> None:
            await revoked(frozenset((tp.topic, tp.partition) for tp in taken))

        async def on_partitions_assigned(self, given: Any) -> None:
            await assigned(frozenset((tp.topic, tp.partition) for tp in given))

    return Listener()


async def restore_parked(
    conf: dict[str, Any], topic: str, parking: ParkedKeys, requests: dict[str, Request]
) -> list[Any]:
    """``parking`` and ``requests`` as the parked ``topic`` holds them, read whole (the
    last record of each key wins, as compaction leaves it); the messages read."""
    messages = await read_parked(conf, topic)
    parking.reset()
    requests.clear()
    for msg in messages:
        key = msg.key()
        if key is not None and not key.startswith(REQUEST_PREFIX):
            parking.apply(key, msg.value())
    read_requests(messages, requests)
    return messages


async def leave_group(
    group: Any, clients: Sequence[tuple[str, Any]], timeout_s: float | None = None
) -> None:
    """Stop a member: it leaves ``group``, or stays in it where the broker cannot take a
    LeaveGroup (the broker drops it after its session timeout: a leave can wedge the
    group); then each of ``clients`` (``(name, client)``, the group's consumer among
    them) is stopped, within ``timeout_s`` for all of them when given. A client that
    fails to stop is let go: there is nothing left to do with it."""
    stay_in_group_where_needed(group)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    for name, client in clients:
        try:
            if deadline is None:
                await client.stop()
            else:
                await asyncio.wait_for(client.stop(), max(deadline - time.monotonic(), 0.1))
        except TimeoutError:
            log.warning("a client did not close in time; exiting without it", client=name)
        except Exception:  # closing: nothing left to do with it
            pass
