"""Business events on the wire: Confluent framing, to_dict/from_dict, errors, registries."""

from __future__ import annotations

import json
import struct
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bizevents.contracts.business import BusinessEvent, Lineage, Timestamp, with_lineage
from bizevents.contracts.exceptions import (
    ContractError,
    DecodeError,
    IncompatibleSchemaError,
)
from bizevents.contracts.serde import (
    BusinessDeserializer,
    BusinessSerializer,
    schema_id_of,
    to_dict,
)
from bizevents.devstack import Endpoints
from bizevents.plumbing.registry import RegistryUnavailableError, registry_client
from bizevents.plumbing.settings import RegistrySettings
from tests import envelopes
from tests.contracts.fixtures.store import (
    Address,
    OrderCancelled,
    OrderLine,
    OrderPlaced,
    OrderStatus,
)

LINEAGE = envelopes.LINEAGE


def placed(**changes: object) -> OrderPlaced:
    values: dict[str, object] = {
        "order_id": uuid.UUID("7e57d004-2b97-4e7a-b45f-5087b0cd0f00"),
        "customer_id": 9_000_000_001,
        "placed_at": datetime(2024, 5, 1, 12, 30, 0, 123456, tzinfo=UTC),
        "delivery_date": date(2024, 5, 3),
        "status": OrderStatus.PAID,
        "total": Decimal("1234567890.12"),
        "lines": [OrderLine(sku="A-1", quantity=2, unit_price=Decimal("0.05"))],
        "ship_to": Address(street="1 Main St", city="Ghent", postcode="9000"),
        "tags": [OrderStatus.PLACED, OrderStatus.SHIPPED],
    }
    values.update(changes)
    return with_lineage(OrderPlaced.model_validate(values), LINEAGE)


def mock_client() -> SchemaRegistryClient:
    return SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})


# --- unit: to_dict and the mock registry ----------------------------------------------


def test_to_dict_is_avro_ready() -> None:
    """Enums become labels (also in lists); logical-type values stay for fastavro."""
    data = to_dict(placed())
    assert data["status"] == "PAID"
    assert data["tags"] == ["PLACED", "SHIPPED"]
    assert data["total"] == Decimal("1234567890.12")
    assert isinstance(data["order_id"], uuid.UUID)
    assert data["placed_at"].tzinfo is not None
    assert data["lines"][0] == {"sku": "A-1", "quantity": 2, "unit_price": Decimal("0.05")}
    assert data["lineage"]["event_id"] == "e-1"


def test_wire_format_and_round_trip_with_a_mock_registry() -> None:
    """Magic byte 0, 4-byte id, Avro body; read back to an equal typed model."""
    client = mock_client()
    serialize = BusinessSerializer(client)
    event = placed()
    data = serialize(event, "store.order-placed")
    magic, schema_id = struct.unpack(">bI", data[:5])
    assert magic == 0
    assert schema_id == schema_id_of(data)
    assert client.get_latest_version("store.order-placed-value").schema_id == schema_id
    assert BusinessDeserializer(client, OrderPlaced)(data) == event


def test_default_topic_is_the_contracts_own() -> None:
    """Without a topic, the contract's default topic names the subject."""
    client = mock_client()
    BusinessSerializer(client)(placed())
    assert client.get_subjects() == ["store.order-placed-value"]


@pytest.mark.parametrize(
    ("strategy", "subject"),
    [
        ("topic", "shop.orders-value"),
        ("record", "store.orders.OrderPlaced"),
        ("topic-record", "shop.orders-store.orders.OrderPlaced"),
    ],
)
def test_subject_strategies(strategy: str, subject: str) -> None:
    """Each strategy registers under Confluent's subject name."""
    client = mock_client()
    serialize = BusinessSerializer(client, strategy)
    serialize(placed(), "shop.orders")
    assert client.get_subjects() == [subject]
    assert serialize.subject(OrderPlaced, "shop.orders") == subject


def test_unknown_strategy_is_a_config_error() -> None:
    """A misspelt strategy fails at construction with the valid names."""
    from bizevents.plumbing.errors import ConfigError

    with pytest.raises(ConfigError, match="topic-record"):
        BusinessSerializer(mock_client(), "topics")


def test_without_auto_register_an_unregistered_contract_is_named() -> None:
    """auto_register=False and no schema: a ContractError naming contract and subject."""
    serialize = BusinessSerializer(mock_client(), auto_register=False)
    with pytest.raises(
        ContractError, match=r"store\.orders\.OrderPlaced.*store\.order-placed-value"
    ):
        serialize(placed())


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("total", Decimal("1.234"), "field 'total'"),
        ("status", "NOPE", "field 'status'"),
        ("placed_at", "yesterday", "field 'placed_at'"),
        ("customer_id", "seven", "field 'customer_id'"),
    ],
)
def test_invalid_event_names_contract_and_field(field: str, value: object, match: str) -> None:
    """An event that breaks its contract is a ContractError, never a raw library error."""
    good = placed()
    bad = OrderPlaced.model_construct(**{**dict(good), field: value})
    serialize = BusinessSerializer(mock_client())
    with pytest.raises(ContractError, match=match) as caught:
        serialize(bad, "store.order-placed")
    assert "store.orders.OrderPlaced" in str(caught.value)


def test_deserializer_picks_the_contract_by_writer_name() -> None:
    """Two contracts on one topic (topic-record strategy) come back as their own types."""
    client = mock_client()
    serialize = BusinessSerializer(client, "topic-record")
    cancelled = OrderCancelled(order_id=uuid.uuid4(), cancelled_at=datetime.now(UTC))
    deserialize = BusinessDeserializer(client, OrderPlaced, OrderCancelled)
    assert deserialize(serialize(placed(), "store.orders")) == placed()
    assert deserialize(serialize(cancelled, "store.orders")) == cancelled


def test_deserializer_rejects_foreign_and_broken_bytes() -> None:
    """Not Confluent-framed, or a contract it does not know: DecodeError with a reason."""
    client = mock_client()
    deserialize = BusinessDeserializer(client, OrderPlaced, OrderCancelled)
    with pytest.raises(DecodeError, match="magic byte"):
        deserialize(b"\x01\x00\x00\x00\x01abc", "t")
    with pytest.raises(DecodeError, match="2 bytes, shorter than the 5-byte Confluent frame"):
        deserialize(b"\x00\x00", "t")

    class Other(BusinessEvent):
        x: int

        class Meta:
            namespace = "else.where"

    data = BusinessSerializer(client)(Other(x=1))
    with pytest.raises(DecodeError, match=r"else\.where\.Other"):
        deserialize(data, "else.other")


def test_older_writer_resolves_into_the_current_model() -> None:
    """A v1 record (no 'reason') reads into the v2 model via the reader schema's default."""
    client = mock_client()

    class V1(BusinessEvent):
        order_id: uuid.UUID
        cancelled_at: Timestamp

        class Meta:
            namespace = "store.orders"
            schema_name = "OrderCancelled"
            topic = "store.order-cancellations"

    old = V1(order_id=uuid.uuid4(), cancelled_at=datetime.now(UTC))
    data = BusinessSerializer(client)(old)
    new = BusinessDeserializer(client, OrderCancelled)(data)
    assert new.order_id == old.order_id and new.reason is None


# --- hypothesis ------------------------------------------------------------------------

_offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
_money = st.decimals(
    min_value=Decimal("-9999999999.99"),
    max_value=Decimal("9999999999.99"),
    places=2,
    allow_nan=False,
    allow_infinity=False,
)
_text = st.text(max_size=20)
_events = st.builds(
    OrderPlaced,
    order_id=st.uuids(),
    customer_id=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    placed_at=st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=_offsets
    ),
    delivery_date=st.none() | st.dates(),
    status=st.sampled_from(OrderStatus),
    total=_money,
    lines=st.lists(
        st.builds(
            OrderLine,
            sku=_text,
            quantity=st.integers(min_value=-(2**31), max_value=2**31 - 1),
            unit_price=_money,
        ),
        max_size=3,
    ),
    ship_to=st.builds(Address, street=_text, city=_text, postcode=st.none() | _text),
    tags=st.lists(st.sampled_from(OrderStatus), max_size=3),
    lineage=st.builds(
        Lineage,
        event_id=_text,
        translator=_text,
        source_topic=_text,
        source_partition=st.integers(min_value=0, max_value=2**31 - 1),
        source_offset=st.integers(min_value=0, max_value=2**63 - 1),
        source_position=_text,
        tx_id=st.none() | _text,
        replay=st.booleans(),
    ),
)

_CLIENT = mock_client()
_SERIALIZE = BusinessSerializer(_CLIENT)
_DESERIALIZE = BusinessDeserializer(_CLIENT, OrderPlaced)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_events)
def test_generated_events_round_trip(event: OrderPlaced) -> None:
    """Any valid event reads back equal: exact decimals, the same instant, enums, lineage."""
    assert _DESERIALIZE(_SERIALIZE(event, "store.order-placed")) == event


# --- integration: the real embedded registry ------------------------------------------


@pytest.fixture
def real_client(bizevents_stack: Endpoints) -> SchemaRegistryClient:
    return registry_client(RegistrySettings(url=bizevents_stack.registry_url))


@pytest.mark.integration
def test_round_trip_through_the_embedded_registry(
    real_client: SchemaRegistryClient, unique_topic: object
) -> None:
    """Serialize, then read with a plain AvroDeserializer (any microservice) and with ours."""
    assert callable(unique_topic)
    topic = unique_topic("orders")
    event = placed()
    data = BusinessSerializer(real_client)(event, topic)
    assert data[0] == 0
    registered = real_client.get_latest_version(f"{topic}-value")
    assert schema_id_of(data) == registered.schema_id
    assert json.loads(registered.schema.schema_str or "{}")["name"] == "OrderPlaced"

    plain = AvroDeserializer(real_client)(data, SerializationContext(topic, MessageField.VALUE))
    assert isinstance(plain, dict)
    assert plain["status"] == "PAID"
    assert plain["total"] == Decimal("1234567890.12")
    assert plain["placed_at"] == event.placed_at
    assert plain["lineage"]["source_offset"] == 42

    fresh_client = registry_client(RegistrySettings(url=real_client._rest_client.base_urls[0]))
    assert BusinessDeserializer(fresh_client, OrderPlaced)(data, topic) == event


@pytest.mark.integration
@pytest.mark.parametrize("strategy", ["topic", "record", "topic-record"])
def test_each_strategy_against_the_embedded_registry(
    real_client: SchemaRegistryClient, unique_topic: object, strategy: str
) -> None:
    """Each naming strategy registers its subject there and reads back."""
    assert callable(unique_topic)
    topic = unique_topic(strategy)

    class Pinged(BusinessEvent):  # a fresh record name per test, so 'record' is unique too
        at: Timestamp

        class Meta:
            namespace = f"test.n{uuid.uuid4().hex[:12]}"

    serialize = BusinessSerializer(real_client, strategy)
    event = Pinged(at=datetime.now(UTC))
    data = serialize(event, topic)
    subject = serialize.subject(Pinged, topic)
    assert subject in real_client.get_subjects()
    assert real_client.get_latest_version(subject).schema_id == schema_id_of(data)
    assert BusinessDeserializer(real_client, Pinged)(data, topic) == event


@pytest.mark.integration
def test_incompatible_contract_is_refused_by_the_registry(
    real_client: SchemaRegistryClient, unique_topic: object
) -> None:
    """A breaking change under the same subject is an IncompatibleSchemaError, not sent."""
    assert callable(unique_topic)
    topic = unique_topic("breaking")
    BusinessSerializer(real_client)(placed(), topic)

    class OrderPlacedBroken(BusinessEvent):
        order_id: uuid.UUID
        must_have: str

        class Meta:
            namespace = "store.orders"
            schema_name = "OrderPlaced"

    broken = OrderPlacedBroken(order_id=uuid.uuid4(), must_have="x")
    with pytest.raises(IncompatibleSchemaError, match="must_have"):
        BusinessSerializer(real_client)(broken, topic)


@pytest.mark.integration
def test_invalid_event_against_the_real_registry(
    real_client: SchemaRegistryClient, unique_topic: object
) -> None:
    """A contract violation is a ContractError naming the field, also on the real path."""
    assert callable(unique_topic)
    bad = OrderPlaced.model_construct(**{**dict(placed()), "total": Decimal("0.001")})
    with pytest.raises(ContractError, match="field 'total'"):
        BusinessSerializer(real_client)(bad, unique_topic("bad"))


def test_unreachable_registry_is_transient() -> None:
    """No registry at the URL: RegistryUnavailableError (retry), not a library error."""
    client = registry_client(RegistrySettings(url="http://127.0.0.1:9"))
    with pytest.raises(RegistryUnavailableError, match="cannot reach"):
        BusinessSerializer(client)(placed(), "t")
