"""The fault suite's account of a missing technical change (bench/faultsuite/truth.py):
the committed changes around it, each with the copies capture wrote and where."""

from __future__ import annotations

from bench.faultsuite.truth import missing_neighbours

TRUTH = [
    (("bin.1", 100, 0), "store.orders", "c"),
    (("bin.1", 200, 0), "store.products", "u"),
    (("bin.1", 300, 0), "store.orders", "u"),
    (("bin.1", 400, 0), "store.order_items", "c"),
]


def test_the_missing_change_is_marked_among_its_neighbours_with_their_copies() -> None:
    seen = {
        ("store.orders", ("bin.1", 100, 0)): 2,
        ("store.orders", ("bin.1", 300, 0)): 1,
    }
    places = {
        ("store.orders", ("bin.1", 100, 0)): ["0@7", "0@19"],
        ("store.orders", ("bin.1", 300, 0)): ["1@8"],
    }
    text = missing_neighbours(TRUTH, seen, places, 1, around=1)
    assert text == (
        "around it:  store.orders c ('bin.1', 100, 0) x2 0@7,0@19"
        " | >store.products u ('bin.1', 200, 0) x0"
        " |  store.orders u ('bin.1', 300, 0) x1 1@8"
    )


def test_the_window_stops_at_the_history_s_ends() -> None:
    text = missing_neighbours(TRUTH, {}, {}, 3, around=2)
    assert text.count("|") == 2  # indexes 1, 2 and 3: nothing past the last
    assert ">store.order_items c" in text
