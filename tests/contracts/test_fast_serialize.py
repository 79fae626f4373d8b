"""BusinessSerializer's generated writers give AvroSerializer's bytes, and its errors."""

from __future__ import annotations

import types
import typing
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from enum import Enum
from typing import Any

import pytest
from bizevents_store.contracts import CONTRACTS as STORE_CONTRACTS
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from contracts.business import BusinessEvent, Lineage
from contracts.exceptions import ContractError
from contracts.serde import BusinessSerializer
from tests.contracts.fixtures import store as fixtures
from translators.lineage import stamp

CONTRACTS: list[type[BusinessEvent]] = [*STORE_CONTRACTS, fixtures.OrderPlaced]
_INT64 = st.integers(-(2**63), 2**63 - 1)


def _money(info: Any) -> st.SearchStrategy[Decimal]:
    places = 2
    digits = 12
    for meta in info.metadata if info is not None else ():
        places = getattr(meta, "decimal_places", None) or places
        digits = getattr(meta, "max_digits", None) or digits
    bound = Decimal(10 ** (digits - places)) - Decimal(1).scaleb(-places)
    return st.decimals(-bound, bound, places=places, allow_nan=False, allow_infinity=False)


def _values(annotation: Any, info: Any = None) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _values(args[0], info)
    if origin in (typing.Union, types.UnionType):
        branches = [a for a in args if a is not type(None)]
        inner = st.one_of(*(_values(b, info) for b in branches))
        return st.none() | inner if len(branches) < len(args) else inner
    if origin is list:
        return st.lists(_values(args[0]), max_size=3)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return st.sampled_from(list(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _models(annotation)
    if annotation is Decimal or (isinstance(annotation, type) and issubclass(annotation, Decimal)):
        return _money(info)
    if annotation is datetime or (
        isinstance(annotation, type) and issubclass(annotation, datetime)
    ):
        zones = st.sampled_from([UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-7))])
        return st.datetimes(datetime(1900, 1, 1), datetime(2200, 1, 1), timezones=zones)
    if annotation is date:
        return st.dates()
    if annotation is uuid.UUID:
        return st.uuids()
    if annotation is str:
        return st.text(max_size=12)
    if annotation is bool:
        return st.booleans()
    if annotation is int or (isinstance(annotation, type) and issubclass(annotation, int)):
        if "Int32" in repr(annotation) or "Int32" in repr(info):
            return st.integers(-(2**31), 2**31 - 1)
        return _INT64
    raise NotImplementedError(f"no strategy for {annotation!r}")


def _models(model: type[BaseModel]) -> st.SearchStrategy[Any]:
    fields = {
        name: _values(info.annotation, info)
        for name, info in model.model_fields.items()
        if name != "lineage"
    }
    return st.fixed_dictionaries(fields).map(model.model_validate)


lineages = st.builds(
    Lineage,
    event_id=st.text(max_size=40),
    translator=st.text(max_size=12),
    source_topic=st.text(max_size=20),
    source_partition=st.integers(-1, 2**31 - 1),
    source_offset=st.integers(-1, 2**63 - 1),
    source_position=st.text(max_size=20),
    tx_id=st.none() | st.text(max_size=10),
    replay=st.booleans(),
)
events = st.sampled_from(CONTRACTS).flatmap(_models)


def _client() -> SchemaRegistryClient:
    return SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})


SERIALIZER = BusinessSerializer(_client())


def _reference(serializer: BusinessSerializer, event: BusinessEvent) -> bytes:
    """AvroSerializer's bytes, as BusinessSerializer wrote them before the generated path."""
    writer = serializer._writers[type(event)]
    topic = type(event).contract_topic()
    data = writer.serializer(event, SerializationContext(topic, MessageField.VALUE))
    assert data is not None
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events, lineages)
def test_generated_writer_gives_avroserializers_bytes(event: BusinessEvent, lineage: Any) -> None:
    """Any contract instance of the store domains: byte-identical to AvroSerializer."""
    event = event.model_copy(update={"lineage": lineage})
    first = SERIALIZER(event)  # the first event of a contract goes through AvroSerializer
    assert first == _reference(SERIALIZER, event)
    assert SERIALIZER(event) == first
    writer = SERIALIZER._writers[type(event)]
    assert writer.write is not None and writer.headers, "the generated writer is in use"


def test_stamped_events_use_the_generated_writer() -> None:
    """Events stamped by the pipeline's lineage take the generated path, same bytes."""
    from tests.translators.test_lineage import event as change_event

    change = change_event("c", None, {"id": 5}, lsn=77, offset=3)
    placed = fixtures.OrderPlaced.model_validate(
        {
            "order_id": uuid.UUID(int=5),
            "customer_id": 1,
            "placed_at": datetime(2024, 5, 1, tzinfo=UTC),
            "total": Decimal("1.50"),
            "ship_to": {"street": "s", "city": "c"},
        }
    )
    serializer = BusinessSerializer(_client())
    (stamped,) = stamp([placed], change, "orders", 2)
    assert serializer(stamped) == _reference(serializer, stamped)
    assert serializer(stamped) == _reference(serializer, stamped)
    assert serializer._writers[fixtures.OrderPlaced].headers


@pytest.mark.parametrize(
    "changes",
    [
        {"customer_id": "not a number"},
        {"customer_id": 2**64},
        {"total": Decimal("1.234")},
        {"status": "NOT-A-STATUS"},
        {"order_id": 12},
    ],
    ids=["string-for-long", "long-overflow", "scale", "enum-label", "uuid-type"],
)
def test_bad_values_still_raise_contract_errors(changes: dict[str, Any]) -> None:
    """A value the contract cannot hold raises ContractError on the generated path too."""
    serializer = BusinessSerializer(_client())
    good = {
        "order_id": uuid.UUID(int=1),
        "customer_id": 1,
        "placed_at": datetime(2024, 5, 1, tzinfo=UTC),
        "total": Decimal("1.50"),
        "ship_to": fixtures.Address(street="s", city="c"),
    }
    serializer(fixtures.OrderPlaced.model_validate(good))  # the generated path is on
    assert serializer._writers[fixtures.OrderPlaced].headers
    bad = fixtures.OrderPlaced.model_construct(**{**good, **changes})
    with pytest.raises(ContractError):
        serializer(bad)
