"""Promotions (pure): one version per offset across a hand-over, whatever the kills."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bizevents.plumbing.errors import ConfigError
from bizevents.translators.promotion import Handover, Pins, Promotion, decode, encode

AT = "2026-11-25T21:00:00Z"


def test_records_survive_the_topic() -> None:
    promotion = Promotion("orders", 4, 3, AT, {"changes": 10_000, "differ": 0.001})
    handover = Handover("orders", 4, 3, "shop.store.orders", 2, 1_234, AT)
    for record in (promotion, handover):
        key, value = encode(record)
        assert decode(value, "promotions/0@7") == record
        assert key
    assert encode(promotion)[0] != encode(handover)[0]


@pytest.mark.parametrize("value", [b"", b"{}", b'{"kind":"other"}', b'{"kind":"handover"}', b"[1]"])
def test_a_record_that_is_not_one_gets_a_sentence(value: bytes) -> None:
    with pytest.raises(ConfigError, match=r"the promotion record at promotions/0@7 cannot be read"):
        decode(value, "promotions/0@7")


def test_a_partition_hands_over_at_one_offset() -> None:
    pins = Pins({"orders": 3})
    assert pins.version("orders", "t", 0, 5) == 3 and pins.pending("orders", "t", 0) is None
    pins.apply(Promotion("orders", 4, 3, AT))
    assert pins.live("orders") == 4
    assert pins.pending("orders", "t", 0) == 4
    assert pins.version("orders", "t", 0, 5) == 3  # not handed over: the old version holds
    pins.apply(Handover("orders", 4, 3, "t", 0, 100, AT))
    assert pins.pending("orders", "t", 0) is None
    assert [pins.version("orders", "t", 0, o) for o in (98, 99, 100, 101)] == [3, 3, 4, 4]
    assert pins.pending("orders", "t", 1) == 4  # the other partition still to go
    # a rollback hands over the same way, and the history stays true
    pins.apply(Promotion("orders", 3, 4, AT))
    pins.apply(Handover("orders", 3, 4, "t", 0, 200, AT))
    assert [pins.version("orders", "t", 0, o) for o in (99, 100, 199, 200)] == [3, 4, 4, 3]


@st.composite
def runs(draw: st.DrawFn) -> tuple[int, list[int], list[tuple[int, bool]], list[bool]]:
    """A partition of ``n`` offsets read in blocks; promotions requested before some
    blocks; kills at a block's start (with the hand-over acknowledged or not); after each
    block, whether the commit timer fired."""
    n = draw(st.integers(1, 60))
    requests = draw(st.lists(st.integers(0, n), max_size=3))
    kills = draw(st.lists(st.tuples(st.integers(0, n), st.booleans()), max_size=5))
    commits = draw(st.lists(st.booleans(), min_size=64, max_size=64))
    return n, sorted(requests), kills, commits


@given(runs(), st.integers(1, 7))
@example((3, [2], [(2, False)], [False] * 64), 1)  # the successor of a kill hands over again
@settings(max_examples=300)
def test_no_offset_is_translated_by_two_versions_or_none(
    run: tuple[int, list[int], list[tuple[int, bool]], list[bool]], block: int
) -> None:
    """The worker's rule: before it writes a hand-over at a partition's next offset, it
    has committed that offset; a killed worker's successor reads on from the committed
    offset and folds the promotions topic from its start."""
    n, requests, kills, commits = run
    topic: list[Promotion | Handover] = []  # what the broker acknowledged, in order
    used: dict[int, set[int]] = {o: set() for o in range(n)}
    versions = [3]
    committed = position = steps = 0
    pending_kills = list(kills)
    requested = list(requests)
    while position < n:
        steps += 1
        assert steps < 1_000
        pins = Pins({"orders": 3})
        for record in topic:
            pins.apply(record)
        while requested and requested[0] <= position:
            requested.pop(0)
            to = 4 if versions[-1] == 3 else 3
            topic.append(Promotion("orders", to, versions[-1], AT))
            versions.append(to)
            pins.apply(topic[-1])
        kill = next((k for k in pending_kills if k[0] == position), None)
        if kill is not None:
            pending_kills.remove(kill)
        target = pins.pending("orders", "t", 0)
        if target is not None:
            committed = position  # the rule: commit, then hand over at that offset
            handover = Handover(
                "orders", target, pins.version("orders", "t", 0, position), "t", 0, position, AT
            )
            if kill is not None and not kill[1]:
                position = committed  # killed before the broker acknowledged it
                continue
            topic.append(handover)
            pins.apply(handover)
        if kill is not None:
            position = committed  # killed before the block's outputs were acknowledged
            continue
        for offset in range(position, min(position + block, n)):
            used[offset].add(pins.version("orders", "t", 0, offset))
        position = min(position + block, n)
        if commits[steps % len(commits)]:
            committed = position
    for offset, found in used.items():
        assert len(found) == 1, (offset, found)
    # a partition's version changes only at an acknowledged hand-over to that version
    along = [next(iter(used[o])) for o in range(n)]
    handovers = {(r.offset, r.to) for r in topic if isinstance(r, Handover)}
    for offset in range(n):
        if along[offset] != (along[offset - 1] if offset else 3):
            assert (offset, along[offset]) in handovers


def test_merged_results_keep_every_count() -> None:
    """The results of two versions' pipelines add up, parked changes included."""
    from dataclasses import fields

    from bizevents.translators.promoting import merge_results
    from bizevents.translators.records import Counts, Result

    one = Counts(**{f.name: 1 for f in fields(Counts)})
    into = Result(counts={"orders@1": Counts(parked=2)})
    merge_results(into, Result(counts={"orders@1": one, "orders@2": one}))
    assert into.counts["orders@1"] == Counts(
        consumed=1, emitted=1, dropped=1, dead_lettered=1, parked=3, seconds=1
    )
    assert into.counts["orders@2"] == one
