"""The deduplication window: duplicates, corrections and stale events by id and rank."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bizevents.consumers.window import EventWindow, Verdict, rank
from bizevents.contracts.business import Lineage


def _lin(event_id: str, translator: str = "orders@2", replay: bool = False) -> Lineage:
    return Lineage(event_id=event_id, translator=translator, replay=replay)


def test_first_then_duplicate() -> None:
    """An id seen from the same version again is a duplicate, live or replayed."""
    w = EventWindow(10)
    assert w.judge(_lin("a")) is Verdict.NEW
    w.remember(_lin("a"))
    assert w.judge(_lin("a")) is Verdict.DUPLICATE
    w.remember(_lin("a", "orders@3", replay=True))
    assert w.judge(_lin("a", "orders@3", replay=True)) is Verdict.DUPLICATE


@pytest.mark.parametrize(
    ("first", "then", "verdict"),
    [
        (("orders@2", False), ("orders@3", True), Verdict.CORRECTION),
        (("orders@2", False), ("orders@2", True), Verdict.CORRECTION),
        (("orders@2", False), ("orders@3", False), Verdict.CORRECTION),
        (("orders@3", True), ("orders@2", False), Verdict.STALE),
        (("orders@2", True), ("orders@2", False), Verdict.STALE),
    ],
    ids=["replay-newer", "replay-same", "live-newer", "old-after-fix", "live-after-replay"],
)
def test_correction_and_stale(
    first: tuple[str, bool], then: tuple[str, bool], verdict: Verdict
) -> None:
    """A higher (version, replay) supersedes; a lower one is stale."""
    w = EventWindow(10)
    w.remember(_lin("a", *first))
    assert w.judge(_lin("a", *then)) is verdict
    assert verdict.delivered == (verdict is Verdict.CORRECTION)


def test_window_forgets_the_least_recently_seen() -> None:
    """Past ``size`` ids, the oldest is forgotten (and new again); a duplicate refreshes."""
    w = EventWindow(2)
    for i in ("a", "b"):
        w.remember(_lin(i))
    assert w.judge(_lin("a")) is Verdict.DUPLICATE  # refreshes a
    w.remember(_lin("c"))  # forgets b
    assert len(w) == 2
    assert w.judge(_lin("b")) is Verdict.NEW
    assert w.judge(_lin("a")) is Verdict.DUPLICATE


def test_no_id_is_always_new() -> None:
    """An event without an id (not from bizevents) is never a duplicate."""
    w = EventWindow(2)
    w.remember(_lin(""))
    assert w.judge(_lin("")) is Verdict.NEW
    assert len(w) == 0


def test_rank_of_foreign_translator() -> None:
    """A reference without a numeric version ranks 0."""
    assert rank(_lin("x", "someone")) == (0, False)
    assert rank(_lin("x", "orders@12", True)) == (12, True)


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        EventWindow(0)


@given(st.lists(st.tuples(st.sampled_from("abcde"), st.integers(1, 3), st.booleans())))
def test_delivered_ranks_only_rise(events: list[tuple[str, int, bool]]) -> None:
    """Per id, the versions delivered strictly rise; the window never exceeds its size."""
    w = EventWindow(3)
    delivered: dict[str, tuple[int, bool]] = {}
    for event_id, version, replay in events:
        lin = _lin(event_id, f"t@{version}", replay)
        verdict = w.judge(lin)
        if verdict.delivered:
            if verdict is Verdict.CORRECTION:
                assert rank(lin) > delivered[event_id]
            delivered[event_id] = rank(lin)
            w.remember(lin)
        assert len(w) <= 3


def _read(event_id: str, position: str, offset: int) -> Lineage:
    """A snapshot read's event: its id is its row's, its position the snapshot's."""
    return Lineage(
        event_id=event_id,
        translator="customers@1",
        source_topic="shop.store.customers",
        source_partition=0,
        source_offset=offset,
        source_position=position,
    )


def test_a_resnapshot_of_an_unchanged_row_is_a_duplicate() -> None:
    """Read, re-read by another snapshot: a duplicate; the same read delivered again
    after a change of its key (a redelivery): a duplicate too."""
    w = EventWindow(10)
    key = ("store.customer-registered", b'{"id":1}')
    w.remember(_read("row-a", "0/100", 5), key)
    assert w.judge(_read("row-a", "0/900", 50), key, snapshot=True) is Verdict.DUPLICATE
    w.remember(Lineage(event_id="update", source_offset=60, source_position="0/950"), key)
    assert w.judge(_read("row-a", "0/100", 5), key, snapshot=True) is Verdict.DUPLICATE


def test_a_row_read_back_at_an_earlier_content_is_a_new_state() -> None:
    """Read as A, read as B by a later snapshot, changed back and read as A again (the
    id A had): new, delivered; two events of one read are both its key's last change."""
    w = EventWindow(10)
    key = ("store.customer-state", b'{"id":1}')
    w.remember(_read("row-a", "0/100", 5), key)
    w.remember(_read("row-b", "0/900", 50), key)
    again = _read("row-a", "0/F00", 90)
    assert w.judge(again, key, snapshot=True) is Verdict.NEW
    w.remember(again, key)
    w.remember(_read("row-a-2", "0/F00", 90), key)
    assert w.judge(_read("row-a", "0/FFF", 99), key, snapshot=True) is Verdict.DUPLICATE
    assert w.judge(_read("row-a-2", "0/FFF", 99), key, snapshot=True) is Verdict.DUPLICATE
    # without the snapshot mark, an id seen is a duplicate, as ever
    assert w.judge(_read("row-b", "0/FFF", 99), key) is Verdict.DUPLICATE
