"""Parking in the transaction worker, the pure parts (docs/parking.md, "The transaction
worker"): which business keys a failing transaction parks, what is parked behind them,
what is published meanwhile, what a re-drive selects from the dead-letter topic and in
which order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from bizevents_store.translators import ORDER_EVENTS, orders_v3

from bizevents.contracts.business import HEADER_DLQ_STAGE
from bizevents.plumbing.parking import PARKED_HEADER, ParkedKeys, ref_key
from bizevents.transactions import TransactionChanges, transaction_translator
from bizevents.translators.assembly import Part, Ready
from bizevents.translators.pipeline import TranslatorFailedError
from bizevents.translators.records import OutRecord, Result, SourceRecord
from bizevents.translators.routing import owner
from bizevents.translators.txcore import TransactionCore
from bizevents.translators.txparking import (
    HEADER_PARKED_KEY,
    HEADER_TX_END,
    TxParking,
    parked_transactions,
)
from tests.translators.test_routing import _placing, _ready

KEYS = {"store.orders": "id", "store.order_items": "order_id"}
SOURCES = ["store.orders", "store.order_items"]
POISONED = 7
N = 4  # virtual partitions
DLQ = "test.dlq"


@transaction_translator(name="orders", version=21, sources=SOURCES, emits=ORDER_EVENTS, keys=KEYS)
def buggy(tx: TransactionChanges) -> Iterable[object]:
    """orders@3, raising on a transaction that creates an item of order 7."""
    for change in tx.of("store.order_items"):
        if change.is_create and change.new("order_id") == POISONED:
            raise ValueError("order 7 is poisoned")
    return orders_v3.attributed(tx)


def serialize(event: Any, topic: str | None = None, lineage: bytes | None = None) -> bytes:
    return b"event"


def guard(on_error: dict[str, Any] | None = None) -> TxParking:
    return TxParking(ParkedKeys(10), "asm", N, "parked", DLQ, on_error or {})


def core(parking: TxParking | None, translator: Any = buggy) -> TransactionCore:
    return TransactionCore([translator], serialize, dead_letter_topic=DLQ, parking=parking)


def tx(tx_id: str, end: int, *orders: int, paid: bool = False) -> Ready:
    """A transaction placing (or, ``paid``, updating) ``orders``, its END at ``end``."""
    changes: list[object] = []
    for order in orders:
        placing = _placing(order, 2)
        changes += placing[-1:] if paid else placing
    ready = _ready(tx_id, changes)
    return Ready(ready.tx_id, ready.parts, Part(0, SourceRecord("shop.tx", 0, end, None, b"")))


def ref(order: int) -> Any:
    return ("orders", "asm", _vp(order), str(order).encode())


def _vp(order: int) -> int:
    part = tx("1:1", 0, order).parts[0]
    return owner(buggy, part, N)


def events(records: list[OutRecord]) -> list[OutRecord]:
    return [r for r in records if r.event_id]


def parked_parts(records: list[OutRecord]) -> list[OutRecord]:
    return [r for r in records if r.topic == DLQ]


def states(records: list[OutRecord]) -> list[OutRecord]:
    return [r for r in records if r.topic == "parked"]


def test_nothing_parked_translates_as_without_parking() -> None:
    ready = tx("1:100", 10, 1, 2)
    plain = core(None, orders_v3).translate(ready)
    with_parking = core(guard(), orders_v3).translate(ready)
    assert [r.event_id for r in with_parking] == [r.event_id for r in plain]
    assert len(plain) == 2


def test_a_failing_transaction_parks_each_owned_key_with_the_whole_transaction() -> None:
    g = guard()
    result = Result()
    records = core(g).translate(tx("1:100", 10, 3, POISONED), result)
    assert not events(records)  # the transaction failed whole
    assert set(g.parking.parked) == {ref(3), ref(POISONED)}
    assert g.parking.parked[ref(POISONED)].first == 10
    dead = parked_parts(records)
    assert len(dead) == 2 * 8  # every part of the transaction, once per parked key
    headers = dict(dead[0].headers)
    assert headers[PARKED_HEADER] == b"1" and headers[HEADER_TX_END] == b"10"
    assert {dict(r.headers)[HEADER_PARKED_KEY] for r in dead} == {
        ref_key(ref(3)),
        ref_key(ref(POISONED)),
    }
    assert len(states(records)) == 2
    assert result.counts["orders@21"].parked == 16


def test_only_the_owner_of_a_key_parks_it() -> None:
    g = guard()
    mine = {_vp(3)} - {_vp(POISONED)}
    assert mine, "orders 3 and 7 share a virtual partition: pick others"

    def owns(t: Any, p: Part) -> bool:
        return owner(t, p, N) in mine

    core(g).translate(tx("1:100", 10, 3, POISONED), None, owns)
    assert set(g.parking.parked) == {ref(3)}


def test_a_later_transaction_is_parked_behind_its_parked_key_and_others_flow() -> None:
    g = guard()
    c = core(g)
    c.translate(tx("1:100", 10, POISONED))
    records = c.translate(tx("1:200", 20, POISONED, 5, paid=True))
    assert not events(records)  # order 5's "paid" gives no event without a status change
    records = c.translate(tx("1:300", 30, 5, 8))  # other keys: translated, published
    assert len(events(records)) == 2 and not parked_parts(records)
    state = g.parking.parked[ref(POISONED)]
    assert (state.first, state.last, state.count) == (10, 20, 2)
    assert ref(5) not in g.parking.parked  # the partner of a parked key is not parked
    behind = core(g, orders_v3).translate(tx("1:400", 40, POISONED, 9))
    stages = [dict(r.headers)[HEADER_DLQ_STAGE] for r in parked_parts(behind)]
    assert stages == [b"parked"] * 8
    assert len(events(behind)) == 1  # order 9's OrderPlaced, not order 7's


def test_a_re_driven_key_is_not_published_again_up_to_through() -> None:
    g = guard()
    c = core(g, orders_v3)
    g.parking.park(ref(2), 10, "translate", "boom")
    g.parking.unpark(ref(2), 20, "redriven")
    g.settle()
    assert not events(c.translate(tx("1:100", 20, 2)))  # read again after a crash
    assert len(events(c.translate(tx("1:200", 21, 2)))) == 1
    g2 = guard()
    assert not g2.watching(5)
    g2.parking.unpark(ref(2), 20, "redriven")
    g2.settle()
    assert g2.watching(20) and not g2.watching(21)


def test_on_error_dead_letter_and_fail() -> None:
    g = guard({"orders": "dead-letter"})
    records = core(g).translate(tx("1:100", 10, POISONED))
    assert not g.parking.parked and len(records) == 4
    assert all(PARKED_HEADER not in dict(r.headers) for r in records)
    with pytest.raises(TranslatorFailedError, match=r"orders@21 failed .*poisoned.*\"fail\""):
        core(guard({"orders": "fail"})).translate(tx("1:100", 10, POISONED))


def test_a_snapshot_read_of_a_parked_key_is_dead_lettered_not_published() -> None:
    g = guard()
    g.parking.park(ref(2), 10, "translate", "boom")
    read = _ready("", _placing(2, 1)[:1])
    snapshot = Ready(None, read.parts)
    c = TransactionCore([_snapshots(orders_v3)], serialize, dead_letter_topic=DLQ, parking=g)
    records = c.translate(snapshot)
    assert not events(records) and len(records) == 1
    assert PARKED_HEADER not in dict(records[0].headers)  # not re-driven


def _snapshots(t: Any) -> Any:
    from dataclasses import replace

    return replace(t, snapshots="translate")


class Msg:
    """A dead-letter message as confluent-kafka gives it."""

    def __init__(self, record: OutRecord, offset: int) -> None:
        self.record, self._offset = record, offset

    def headers(self) -> list[tuple[str, bytes | None]]:
        return list(self.record.headers)

    def key(self) -> bytes | None:
        return self.record.key

    def value(self) -> bytes | None:
        return self.record.value

    def offset(self) -> int:
        return self._offset


def test_a_re_drive_selects_the_keys_transactions_from_the_park_on_in_commit_order() -> None:
    g = guard()
    c = core(g)
    out = c.translate(tx("1:100", 10, POISONED, 4))  # fails: parks 7 and 4
    out += c.translate(tx("1:300", 30, POISONED, paid=True))
    out += c.translate(tx("1:200", 20, 4, paid=True))
    out += c.translate(tx("1:300", 30, POISONED, paid=True))  # again, after a crash
    messages = [Msg(r, n) for n, r in enumerate(parked_parts(out))]
    found = parked_transactions(messages, ref(POISONED), 9)
    assert [(end, tx_id, len(parts)) for end, tx_id, parts in found] == [
        (10, "1:100", 8),
        (30, "1:300", 1),
    ]
    assert [p.stage for p in found[1][2]] == ["parked"]
    assert [end for end, _, _ in parked_transactions(messages, ref(POISONED), 10)] == [30]
    assert [end for end, _, _ in parked_transactions(messages, ref(4), 9)] == [10, 20]
    other = ("other", *ref(4)[1:])
    assert parked_transactions(messages, other, -1) == []
