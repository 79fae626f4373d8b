"""The transaction ids a topic holds, as the worker reads them at start-up
(bizevents/translators/provenance.py)."""

from __future__ import annotations

from bizevents.contracts.envelope import ChangeEvent, MySqlPosition, PgPosition, Source, Transaction
from bizevents.translators.provenance import lacking_transactions, per_record_ids


def _change(tx_id: str | None, position: PgPosition | MySqlPosition) -> ChangeEvent:
    source = Source("postgresql", "shop", "shop", "store", "orders", 0, position=position)
    tx = None if tx_id is None else Transaction(tx_id, 1, 1)
    return ChangeEvent("c", source, after={"id": 1}, key={"id": 1}, transaction=tx)


def test_debeziums_postgres_ids_name_the_record_bizevents_ids_the_commit() -> None:
    debezium = _change("571:53195829", PgPosition(53195829, 571))
    bizevents = _change("571:53196000", PgPosition(53195829, 571))
    assert per_record_ids(debezium)
    assert not per_record_ids(bizevents)
    assert not per_record_ids(_change(None, PgPosition(53195829, 571)))  # a snapshot read
    assert not per_record_ids(_change("0-1-7", MySqlPosition("binlog.000001", 4, 0)))


def test_the_sentence_names_the_translator_and_only_the_topics_that_lack() -> None:
    newest = {
        "shop.store.orders": [_change("571:53195829", PgPosition(53195829, 571))],
        "shop.store.order_items": [_change("571:53196000", PgPosition(53195829, 571))],
        "shop.store.empty": [],
    }
    said = lacking_transactions("orders@3", newest)
    assert said is not None
    assert said.startswith("orders@3 cannot have whole transactions from shop.store.orders: ")
    assert lacking_transactions("orders@3", {"shop.store.empty": []}) is None
