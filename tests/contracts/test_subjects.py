"""Subject naming: the three strategies by their names, and as confluent-kafka calls them."""

from __future__ import annotations

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from bizevents.contracts.subjects import confluent_strategy, subject_strategy
from bizevents.plumbing.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "subject"),
    [
        ("topic", "orders-value"),
        ("record", "store.OrderPlaced"),
        ("record_name", "store.OrderPlaced"),
        ("topic-record", "orders-store.OrderPlaced"),
        (" Topic_Record_Name ", "orders-store.OrderPlaced"),
    ],
)
def test_a_strategy_by_any_of_its_names(name: str, subject: str) -> None:
    assert subject_strategy(name)("orders", "store.OrderPlaced") == subject


def test_an_unknown_strategy_is_one_sentence_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown subject naming strategy 'by-date'; use one"):
        subject_strategy("by-date")


def test_as_confluent_kafka_calls_it() -> None:
    subject = confluent_strategy(subject_strategy("topic"))
    assert subject(SerializationContext("orders", MessageField.KEY), "x") == "orders-key"
    assert subject(SerializationContext("orders", MessageField.VALUE), None) == "orders-value"
    assert subject(None, "x") is None
