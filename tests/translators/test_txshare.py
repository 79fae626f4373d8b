"""What one member of the transaction worker owns and publishes
(:mod:`bizevents.translators.txshare`), run through the in-memory loop of
tests/translators/txharness.py: ownership, rebuild from the checkpoints, no broker."""

from __future__ import annotations

from bizevents_store.translators import orders_v3

from bizevents.contracts.serde import BusinessSerializer
from tests.translators.txharness import Member, make_plan
from tests.translators.txharness import orders as _orders

N = 4


def test_members_owning_every_partition_between_them_publish_each_event_once(
    serializer: BusinessSerializer,
) -> None:
    plan = make_plan([orders_v3], serializer, N)
    batch = _orders(1, 12, 100)
    alone = Member.of(plan)
    alone.rebuild(frozenset(range(N)), {})
    whole = sorted(r.event_id for r in alone.handle(batch))
    members = [Member.of(plan) for _ in range(3)]
    for member, owned in zip(members, ({0}, {1, 2}, {3}), strict=True):
        member.rebuild(frozenset(owned), {})
    ids = [r.event_id for m in members for r in m.handle(batch)]
    assert sorted(ids) == whole and len(set(ids)) == len(ids) == 12  # one event per order
    assert all(m.published for m in members)  # twelve orders spread over every member


def test_a_new_owner_rebuilt_from_the_checkpoints_republishes_nothing_released(
    serializer: BusinessSerializer,
) -> None:
    """The first owner publishes and checkpoints five transactions, then the group moves
    its partitions: the next owner, reading again from the checkpoint, publishes only
    what came after it (and the same ids for a transaction it shares with no one)."""
    plan = make_plan([orders_v3], serializer, N)
    state: dict[int, bytes] = {}
    before, after = _orders(1, 5, 100), _orders(6, 3, 200)
    first = Member.of(plan)
    first.rebuild(frozenset(range(N)), state)
    released = first.handle(before)
    first.checkpoint(state, before)
    assert set(state) == set(range(N))
    nxt = Member.of(plan)
    nxt.rebuild(frozenset(range(N)), state)
    again = nxt.handle([*before, *after])  # the reader placed before them: read again
    assert {r.event_id for r in again}.isdisjoint(r.event_id for r in released)
    fresh = Member.of(plan)
    fresh.rebuild(frozenset(range(N)), {})
    assert sorted(r.event_id for r in again) == sorted(r.event_id for r in fresh.handle(after))


def test_a_partition_moved_alone_keeps_its_predecessors_checkpoint_apart(
    serializer: BusinessSerializer,
) -> None:
    """Only virtual partition 0 moves: its new owner, which never checkpointed it,
    publishes of the released transactions nothing of 0 and everything of its own."""
    plan = make_plan([orders_v3], serializer, N)
    state: dict[int, bytes] = {}
    batch = _orders(1, 8, 100)
    a = Member.of(plan)
    a.rebuild(frozenset({0}), state)
    a.handle(batch)
    a.checkpoint(state, batch)
    b = Member.of(plan)
    b.rebuild(frozenset({0, 1}), state)  # 0 from a's checkpoint, 1 never recorded
    only_one = Member.of(plan)
    only_one.rebuild(frozenset({1}), {})
    assert sorted(r.event_id for r in b.handle(batch)) == sorted(
        r.event_id for r in only_one.handle(batch)
    )


def test_partitions_taken_over_with_checkpoints_of_different_ages_never_go_back(
    serializer: BusinessSerializer,
) -> None:
    """Partition 0's owner released two batches, partition 1's only the first; a member
    taking both over reads again from the older and records its checkpoint after part of
    the second batch: partition 0's must stay where its predecessor left it, or its next
    owner publishes again what the first published (the fault suite read an event twice
    so, exactly once)."""
    plan = make_plan([orders_v3], serializer, N)
    state: dict[int, bytes] = {}
    first, second = _orders(1, 8, 100), _orders(9, 8, 200)
    a = Member.of(plan)
    a.rebuild(frozenset({0}), state)
    a.handle(first)
    published = a.handle(second)
    a.checkpoint(state, [*first, *second])
    b = Member.of(plan)
    b.rebuild(frozenset({1}), state)
    b.handle(first)
    b.checkpoint(state, first)
    both = Member.of(plan)
    both.rebuild(frozenset({0, 1}), state)
    both.handle(second[:2])  # partition 1's part of them
    both.checkpoint(state, second[:2])
    nxt = Member.of(plan)
    nxt.rebuild(frozenset({0}), state)
    again = nxt.handle(second)
    assert published  # partition 0 had some of the second batch
    assert not {r.event_id for r in again} & {r.event_id for r in published}
