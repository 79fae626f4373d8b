"""orders@3, the store's transaction translator, and the core that runs transaction
translators (ids, keys, lineage, dead letters), with no broker."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from bizevents_store.contracts import OrderLine, OrderPlaced, OrderStatus, OrderStatusChanged
from bizevents_store.translators import ORDERS, orders_v3
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents import Change, TranslationError
from bizevents.consumers.window import EventWindow, Verdict
from bizevents.contracts.serde import BusinessDeserializer, BusinessSerializer
from bizevents.contracts.technical.transaction import TransactionRecord
from bizevents.devstack.registry import run_in_thread
from bizevents.testing import SERVER, change, run
from bizevents.transactions import (
    Attributed,
    TransactionChanges,
    stems_from,
    transaction_translator,
)
from bizevents.translators.assembly import Abandoned, Part, Ready
from bizevents.translators.lineage import event_id
from bizevents.translators.pipeline import SourceRecord
from bizevents.translators.txcore import HEADER_TX, TransactionCore
from tests.envelopes import in_transaction, store_order

ORDER = store_order()


def _item(line: int, product: int, qty: int, price: str) -> Change:
    row = {
        "order_id": 7,
        "line_no": line,
        "product_id": product,
        "quantity": qty,
        "unit_price": Decimal(price),
    }
    return change("store.order_items", "c", after=row, key={"order_id": 7, "line_no": line})


def _placing() -> list[Change]:
    """What the store's load does in one transaction."""
    return [
        change("store.orders", "c", after=ORDER),
        _item(2, 11, 1, "4.59"),
        _item(1, 10, 3, "2.00"),
        change("store.orders", "u", before=ORDER, after={**ORDER, "total": Decimal("10.59")}),
    ]


def test_one_order_placed_with_items_and_true_total() -> None:
    """The INSERT with total 0, the items and the UPDATE of the total: one OrderPlaced
    with the final total and the lines in line order."""
    (event,) = orders_v3.translate_transaction(TransactionChanges("9:100", tuple(_placing())))
    assert isinstance(event, OrderPlaced)
    assert (event.order_id, event.customer_id, event.currency) == (7, 3, "EUR")
    assert event.total == Decimal("10.59")
    assert event.items == [
        OrderLine(line_no=1, product_id=10, quantity=3, unit_price=Decimal("2.00")),
        OrderLine(line_no=2, product_id=11, quantity=1, unit_price=Decimal("4.59")),
    ]


def test_status_change_alone_as_orders_v2() -> None:
    """A later transaction paying the order gives OrderStatusChanged, as orders@2 does."""
    paid = change("store.orders", "u", before=ORDER, after={**ORDER, "status": "paid"})
    (event,) = orders_v3.translate_transaction(TransactionChanges("9:200", (paid,)))
    assert isinstance(event, OrderStatusChanged)
    assert event.new_status is OrderStatus.PAID


def test_the_row_path_refuses_a_transaction_translator() -> None:
    """Pinned by mistake under the row worker: a translation error, not wrong events."""
    with pytest.raises(TranslationError, match="transaction translator"):
        orders_v3.translate(_placing()[0])


def _parts(tx_id: str, changes: list[Change]) -> tuple[Part, ...]:
    parts = []
    for n, c in enumerate(changes, start=1):
        event = c.event
        stamped = in_transaction(event, tx_id, n)
        topic = f"shop.{event.source.qualified_table}"
        origin = SourceRecord(topic, 0, 40 + n, f"key-{c.table}-{n}".encode(), b"raw")
        parts.append(Part(n, origin, change=stamped))
    return tuple(parts)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistryClient]:
    with run_in_thread(Path(tmp_path_factory.mktemp("registry"))) as running:
        yield SchemaRegistryClient({"url": running.url})


def test_core_ids_keys_and_lineage(registry: SchemaRegistryClient) -> None:
    """The OrderPlaced stems from the order's INSERT: its id is the INSERT's (the same on a
    second assembly, another for another INSERT), its key the order row's, its lineage
    names the INSERT and the transaction."""
    core = TransactionCore([orders_v3], BusinessSerializer(registry))
    ready = Ready("9:100", _parts("9:100", _placing()))
    first = core.translate(ready)
    again = TransactionCore([orders_v3], BusinessSerializer(registry)).translate(ready)
    assert [r.event_id for r in first] == [r.event_id for r in again]
    (record,) = first
    assert record.topic == "store.order-placed"
    assert record.key == b"key-store.orders-1"
    event = BusinessDeserializer(registry, OrderPlaced)(record.value or b"", record.topic)
    assert event.total == Decimal("10.59") and len(event.items) == 2
    assert event.lineage.tx_id == "9:100"
    assert event.lineage.translator == "orders@3"
    assert (event.lineage.source_topic, event.lineage.source_offset) == ("shop.store.orders", 41)
    placing = _placing()
    placing[0] = change("store.orders", "c", after=ORDER, position=0x5000, txid=9)
    other = core.translate(Ready("9:101", _parts("9:101", placing)))
    assert other[0].event_id != record.event_id


def _positioned() -> list[Change]:
    """The placing transaction, then one paying the order, with LSNs as capture writes."""
    lsn = iter(range(0x2000, 0x3000, 0x10))
    placing = [
        change(c.table, c.op, before=c.before, after=c.after, key=c.key, position=next(lsn), txid=9)
        for c in _placing()
    ]
    paid = {**ORDER, "total": Decimal("10.59"), "status": "paid"}
    paying = change(
        "store.orders",
        "u",
        before={**ORDER, "total": Decimal("10.59")},
        after=paid,
        position=next(lsn),
        txid=10,
    )
    return [*placing, paying]


def test_orders_3_events_have_the_row_translators_ids(registry: SchemaRegistryClient) -> None:
    """orders@3's OrderPlaced has the id orders@1 and @2 gave theirs from the order's
    INSERT (total 0.00), its OrderStatusChanged the id of theirs from the UPDATE: replayed,
    it supersedes them (the same name, the same change, contract and ordinal)."""
    changes = _positioned()
    row = {v.ref: run(v, [c for c in changes if c.table == "store.orders"]) for v in ORDERS[:2]}
    assert row["orders@1"].event_ids == row["orders@2"].event_ids
    placed_1, changed_1 = row["orders@1"].events
    assert isinstance(placed_1, OrderPlaced) and placed_1.total == Decimal("0.00")
    core = TransactionCore([orders_v3], BusinessSerializer(registry), replay=True)
    placing = core.translate(Ready("9:100", _parts("9:100", changes[:4])))
    paying = core.translate(Ready("10:200", _parts("10:200", changes[4:])))
    read = BusinessDeserializer(registry, OrderPlaced, OrderStatusChanged)
    placed_3, changed_3 = (read(r.value or b"", r.topic) for r in [*placing, *paying])
    assert isinstance(placed_3, OrderPlaced) and placed_3.total == Decimal("10.59")
    assert placed_3.lineage.event_id == placed_1.lineage.event_id
    assert changed_3.lineage.event_id == changed_1.lineage.event_id
    assert (placed_3.lineage.source_position, changed_3.lineage.source_position) == (
        placed_1.lineage.source_position,
        changed_1.lineage.source_position,
    )
    assert placed_3.lineage.replay and placed_3.lineage.translator == "orders@3"
    # the consumer kit takes it as the correction of orders@1's event
    window = EventWindow(10)
    window.remember(placed_1.lineage)
    assert window.judge(placed_3.lineage) is Verdict.CORRECTION


def test_an_event_without_its_change_is_the_transactions(
    registry: SchemaRegistryClient,
) -> None:
    """A transaction translator that does not say where an event stems from: the id is
    the transaction's (another transaction, another id), the key its first order row's."""

    @transaction_translator(
        name="summary",
        version=1,
        sources=["store.orders", "store.order_items"],
        emits=[OrderPlaced],
    )
    def summary(tx: TransactionChanges) -> Iterator[OrderPlaced]:
        order = tx.of("store.orders")[-1]
        yield OrderPlaced(
            order_id=order.new("id"),
            customer_id=order.new("customer_id"),
            total=order.new("total"),
            currency=order.new("currency"),
            placed_at=order.new("placed_at"),
        )

    core = TransactionCore([summary], BusinessSerializer(registry))
    (one,) = core.translate(Ready("9:100", _parts("9:100", _placing())))
    (two,) = core.translate(Ready("9:101", _parts("9:101", _placing())))
    assert one.event_id == event_id(f"{SERVER}|tx|9:100", "summary", "store.orders.OrderPlaced", 0)
    assert two.event_id != one.event_id and one.key == b"key-store.orders-1"


def test_an_event_said_to_stem_from_a_foreign_change_is_a_translation_error() -> None:
    """Naming a change that is not the transaction's: an error that says so (the worker
    dead-letters the transaction), never an id made up from it."""
    stranger = change("store.orders", "c", after={**ORDER, "id": 8})

    @transaction_translator(name="odd", version=1, sources=["store.orders"], emits=[OrderPlaced])
    def odd(tx: TransactionChanges) -> Iterator[Attributed]:
        for item in orders_v3.attributed(tx):
            yield stems_from(stranger, item.event)

    with pytest.raises(TranslationError, match="not a change of the transaction"):
        odd.translate_transaction(TransactionChanges("9:100", tuple(_placing())))


def test_core_dead_letters_keep_the_bytes_and_reason(registry: SchemaRegistryClient) -> None:
    """An abandoned transaction: one dead letter per part with its bytes and the reason."""
    core = TransactionCore([orders_v3], BusinessSerializer(registry))
    parts = _parts("9:300", _placing()[:2])
    end = Part(
        9,
        SourceRecord("shop.transaction", 0, 5, b"k", b"end-bytes"),
        record=TransactionRecord("END", "9:300", 0, 4, (("store.orders", 2),)),
    )
    result = core.process([Abandoned("9:300", (*parts, end), "never ended")])
    assert [r.value for r in result.records] == [b"raw", b"raw", b"end-bytes"]
    for r in result.records:
        h = dict(r.headers)
        assert h["bizevents.dlq.stage"] == b"assemble"
        assert h["bizevents.dlq.reason"] == b"never ended"
        assert h[HEADER_TX] == b"9:300"


def test_core_translation_error_dead_letters_the_transaction(
    registry: SchemaRegistryClient,
) -> None:
    """A translator that raises on a transaction: every part of it dead-lettered."""
    broken = [change("store.orders", "c", after={**ORDER, "currency": None})]
    core = TransactionCore([orders_v3], BusinessSerializer(registry))
    records = core.translate(Ready("9:400", _parts("9:400", broken)))
    assert len(records) == 1 and records[0].dead_letter
    assert dict(records[0].headers)["bizevents.dlq.stage"] in (b"translate", b"contract")


def test_a_transaction_translators_own_translation_error_keeps_its_message() -> None:
    """``raise TranslationError("...")`` in a transaction translator: the message alone
    is the reason, the runtime names the translator."""

    @transaction_translator(name="fussy", version=1, sources=["store.orders"], emits=[OrderPlaced])
    def fussy(tx: TransactionChanges) -> None:
        raise TranslationError(f"transaction {tx.id} has no customer")

    with pytest.raises(TranslationError) as raised:
        fussy.translate_transaction(TransactionChanges("9:100", tuple(_placing())))
    assert raised.value.reason == "transaction 9:100 has no customer"
    assert raised.value.translator == "fussy@1"


def test_a_snapshot_reads_events_have_its_rows_id_in_the_transaction_core(
    registry: SchemaRegistryClient,
) -> None:
    """A read (no transaction) through the transaction core: the ids of the row path (its
    row's, the same at another position and offset), and the snapshot header."""
    from dataclasses import replace

    reading = replace(orders_v3, snapshots="translate")
    core = TransactionCore([reading], BusinessSerializer(registry))
    ids = []
    for position in (1_000, 9_000):
        read = change("store.orders", "r", after=ORDER, position=position)
        (record,) = core.translate(Ready(None, _parts("", [read])))
        assert ("bizevents.snapshot", b"true") in record.headers
        ids.append(record.event_id)
    assert ids[0] == ids[1]
