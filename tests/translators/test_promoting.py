"""The worker's side of a promotion (:mod:`bizevents.translators.promoting`): which
partitions are due for a hand-over, and the one hand-over both workers write."""

from __future__ import annotations

import asyncio

from bizevents.translators.promoting import due_versions, hand_over
from bizevents.translators.promotion import Handover, Pins, Promotion, decode


def _promoted() -> Pins:
    pins = Pins({"orders": 3, "items": 1})
    pins.apply(Promotion("orders", 4, 3, "2026-11-29T06:00:00Z"))
    pins.apply(Promotion("items", 9, 1, "2026-11-29T06:00:00Z"))
    return pins


def test_a_version_not_installed_here_is_left_and_said_once() -> None:
    pins = _promoted()
    refused: set[tuple[str, int]] = set()

    def installed(name: str, version: int) -> object | None:
        return object() if (name, version) == ("orders", 4) else None

    names = ["orders", "items"]
    assert due_versions(pins, names, "t", 0, installed, refused) == [("orders", 4)]
    assert refused == {("items", 9)}
    assert due_versions(pins, names, "t", 1, installed, refused) == [("orders", 4)]
    assert refused == {("items", 9)}


def test_the_hand_over_is_sent_then_applied_at_one_offset() -> None:
    pins = _promoted()
    sent: list[Handover] = []

    async def send(key: bytes, value: bytes) -> None:
        found = decode(value, "test")
        assert isinstance(found, Handover) and key == found.key
        assert pins.pending(found.name, "t", 2) is not None  # not applied before it is sent
        sent.append(found)

    asyncio.run(hand_over(send, pins, [("orders", 4), ("items", 9)], "t", 2, 70, "partition"))
    assert [(h.name, h.previous, h.to, h.offset) for h in sent] == [
        ("orders", 3, 4, 70),
        ("items", 1, 9, 70),
    ]
    assert len({h.at for h in sent}) == 1
    assert (pins.version("orders", "t", 2, 69), pins.version("orders", "t", 2, 70)) == (3, 4)
    assert pins.pending("orders", "t", 2) is None and pins.pending("items", "t", 2) is None
