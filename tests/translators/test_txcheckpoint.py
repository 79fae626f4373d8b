"""The transaction worker's checkpoint of a virtual partition: what goes to the state
topic comes back the same, and says which transactions its owner released."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bizevents.translators.assembly import Checkpoint
from bizevents.translators.txcheckpoint import Point, Progress

_topics = st.sampled_from(["s.store.orders", "s.store.order_items", "s.transaction"])
_offsets = st.dictionaries(st.tuples(_topics, st.integers(0, 7)), st.integers(0, 2**40))
_gtids = st.lists(st.from_regex(r"\A[0-9a-f]{8}-[0-9a-f]{4}:[1-9][0-9]{0,6}\Z"), max_size=5)


@given(_offsets, st.none() | st.integers(0, 2**62), _gtids)
def test_a_checkpoint_comes_back_as_it_went(
    offsets: dict[tuple[str, int], int], position: int | None, gtids: list[str]
) -> None:
    point = Point(offsets, Checkpoint(position, tuple(gtids)))
    back = Point.decode(point.encode())
    assert back.offsets == offsets
    assert back.released.position == position
    assert set(back.released.released) == set(gtids)
    assert all(back.has(g) for g in gtids)


def test_released_by_the_commit_position_or_the_remembered_ids() -> None:
    # PostgreSQL ids carry the commit position, so only other ids are written out
    point = Point.decode(Point({}, Checkpoint(1_000, ("7:900", "gtid-a:5"))).encode())
    assert point.released.released == ("gtid-a:5",)
    assert point.has("7:900") and point.has("8:1000")
    assert not point.has("9:1001")
    assert point.has("gtid-a:5") and not point.has("gtid-b:6")
    assert not point.has(None)  # a snapshot read belongs to no transaction
    never = Point()
    assert not never.has("7:900") and not never.has("gtid-a:5")


def test_the_checkpoint_places_the_reader_at_the_oldest_open_transaction() -> None:
    """Per technical partition: the first record read since the oldest open
    transaction's first part (arrival 3 on), else the next offset to read."""
    orders, items, tx = ("s.store.orders", 0), ("s.store.order_items", 0), ("s.transaction", 0)
    progress = Progress({orders: 10, items: 7, tx: 0})
    assert [progress.arrived(orders, offset) for offset in range(10, 14)] == [1, 2, 3, 4]
    progress.arrived(items, 7)
    progress.next.update({orders: 14, items: 8})
    assert progress.offsets(3) == {orders: 12, items: 7, tx: 0}
    assert progress.offsets(99) == {orders: 14, items: 8, tx: 0}
