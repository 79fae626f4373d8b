"""Business-event contracts: generated schemas, the .avsc catalogue, drift, lineage."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from uuid import uuid4

import pytest
from pydantic import ValidationError

from bizevents.contracts.business import (
    HEADER_EVENT_ID,
    HEADER_REPLAY,
    HEADER_SOURCE_PARTITION,
    HEADER_TX_ID,
    LINEAGE_HEADERS,
    TOPIC_PROPERTY,
    BusinessEvent,
    Lineage,
    Timestamp,
    avsc_text,
    default_topic,
    lineage_from_headers,
    lineage_headers,
    read_avsc,
    schema_drift,
    with_lineage,
)
from bizevents.contracts.compatibility import parse_schema
from bizevents.contracts.exceptions import ContractError, InvalidSchemaError
from tests import envelopes
from tests.contracts.fixtures.store import (
    CONTRACTS,
    Address,
    OrderCancelled,
    OrderPlaced,
    OrderStatus,
)

CATALOGUE = Path(__file__).parent / "fixtures" / "avsc"


def order(**changes: object) -> OrderPlaced:
    values: dict[str, object] = {
        "order_id": uuid4(),
        "customer_id": 7,
        "placed_at": datetime(2024, 5, 1, 12, 30, 0, 123456, tzinfo=UTC),
        "total": Decimal("19.90"),
        "ship_to": Address(street="1 Main St", city="Ghent"),
    }
    values.update(changes)
    return OrderPlaced.model_validate(values)


#: a replayed event of a transaction
LINEAGE = envelopes.LINEAGE.model_copy(
    update={"event_id": "3f2a-0", "translator": "orders@2", "source_partition": 3}
    | {"source_offset": 1_234_567, "tx_id": "771", "replay": True}
)


def field_type(schema: dict[str, object], name: str) -> object:
    fields = schema["fields"]
    assert isinstance(fields, list)
    return next(f["type"] for f in fields if f["name"] == name)


def test_names_and_default_topic() -> None:
    """Full name from Meta.namespace + class name; topic <domain>.<kebab event> or Meta.topic."""
    assert OrderPlaced.contract_fullname() == "store.orders.OrderPlaced"
    assert OrderPlaced.contract_topic() == "store.order-placed"
    assert OrderCancelled.contract_topic() == "store.order-cancellations"


@pytest.mark.parametrize(
    ("fullname", "topic"),
    [
        ("store.orders.OrderPlaced", "store.order-placed"),
        ("billing.InvoiceIssued", "billing.invoice-issued"),
        ("crm.customers.VIPCustomerMoved", "crm.vip-customer-moved"),
        ("Bare", "bare"),
    ],
)
def test_default_topic_convention(fullname: str, topic: str) -> None:
    """The convention is applied the same way to any full name."""
    assert default_topic(fullname) == topic


def test_generated_schema_maps_the_types() -> None:
    """Decimal, aware timestamp, date, UUID, enum, optional, list, nested record map to Avro."""
    schema = OrderPlaced.contract_schema()
    parse_schema(schema)  # valid Avro, defaults included
    assert schema["namespace"] == "store.orders"
    assert field_type(schema, "order_id") == {"type": "string", "logicalType": "uuid"}
    assert field_type(schema, "placed_at") == {"type": "long", "logicalType": "timestamp-micros"}
    assert field_type(schema, "delivery_date") == ["null", {"type": "int", "logicalType": "date"}]
    assert field_type(schema, "total") == {
        "type": "bytes",
        "logicalType": "decimal",
        "precision": 12,
        "scale": 2,
    }
    status = field_type(schema, "status")
    assert isinstance(status, dict)
    assert status["type"] == "enum" and status["symbols"] == ["PLACED", "PAID", "SHIPPED"]
    lines = field_type(schema, "lines")
    assert isinstance(lines, dict) and lines["type"] == "array"
    assert lines["items"]["name"] == "OrderLine"
    lineage = field_type(schema, "lineage")
    assert isinstance(lineage, dict)
    assert lineage["name"] == "Lineage" and lineage["namespace"] == "bizevents"


def test_plain_datetime_is_refused_when_the_contract_is_defined() -> None:
    """A naive-capable millisecond timestamp would lose precision: refused at class creation."""
    with pytest.raises(ContractError, match=r"'Bad\.at'.*Timestamp"):

        class Bad(BusinessEvent):
            at: datetime

            class Meta:
                namespace = "x.y"


def test_missing_namespace_is_refused() -> None:
    """A contract without Meta.namespace has no full name."""
    with pytest.raises(ContractError, match=r"Meta\.namespace"):

        class NoNamespace(BusinessEvent):
            a: str

            class Meta:
                schema_name = "NoNamespace"


def test_invalid_avro_names_are_refused_when_the_contract_is_defined() -> None:
    """A namespace the registry would refuse fails at class creation, naming the contract."""
    with pytest.raises(ContractError, match=r"contract .*BadName.*not a valid Avro name"):

        class BadName(BusinessEvent):
            a: str

            class Meta:
                namespace = "store.2024"


def test_timestamps_must_be_aware() -> None:
    """A naive datetime is not an instant."""
    with pytest.raises(ValidationError, match="timezone-aware"):
        order(placed_at=datetime(2024, 5, 1, 12, 30))
    aware = order(placed_at=datetime(2024, 5, 1, 14, 30, tzinfo=timezone(timedelta(hours=2))))
    assert aware.placed_at == datetime(2024, 5, 1, 12, 30, tzinfo=UTC)


def test_events_are_immutable_and_strict() -> None:
    """Events are frozen and refuse unknown fields."""
    event = order()
    with pytest.raises(ValidationError):
        event.total = Decimal("1.00")
    with pytest.raises(ValidationError, match="extra"):
        order(surprise=1)


def test_authors_construct_events_without_lineage_and_the_runtime_sets_it() -> None:
    """lineage has a default; with_lineage returns a copy carrying it."""
    event = order()
    assert event.lineage == Lineage()
    stamped = with_lineage(event, LINEAGE)
    assert stamped.lineage == LINEAGE
    assert stamped.order_id == event.order_id
    assert event.lineage == Lineage()  # the original is untouched


def test_lineage_headers_round_trip() -> None:
    """Headers carry every lineage field and read back to an equal Lineage."""
    headers = lineage_headers(LINEAGE)
    assert [name for name, _ in headers] == list(LINEAGE_HEADERS)
    assert all(isinstance(value, bytes) for _, value in headers)
    assert dict(headers)[HEADER_REPLAY] == b"true"
    noise = [("traceparent", b"00-abc"), *headers]
    assert lineage_from_headers(noise) == LINEAGE


def test_lineage_headers_without_tx_id() -> None:
    """tx_id is optional: left out of the headers, None when read back."""
    lineage = LINEAGE.model_copy(update={"tx_id": None, "replay": False})
    headers = lineage_headers(lineage)
    assert HEADER_TX_ID not in dict(headers)
    assert lineage_from_headers(headers) == lineage
    as_text = [(name, value.decode()) for name, value in headers]
    assert lineage_from_headers(as_text) == lineage


@pytest.mark.parametrize(
    ("headers", "match"),
    [
        ([], HEADER_EVENT_ID),
        (
            [(n, v) for n, v in lineage_headers(LINEAGE) if n != HEADER_SOURCE_PARTITION],
            HEADER_SOURCE_PARTITION,
        ),
        (
            [(n, b"x" if n == HEADER_SOURCE_PARTITION else v) for n, v in lineage_headers(LINEAGE)],
            "not an integer",
        ),
        (
            [(n, b"yes" if n == HEADER_REPLAY else v) for n, v in lineage_headers(LINEAGE)],
            "'true' or 'false'",
        ),
    ],
    ids=["empty", "missing-partition", "bad-partition", "bad-replay"],
)
def test_bad_lineage_headers_name_the_header(headers: list[tuple[str, bytes]], match: str) -> None:
    """A missing or malformed lineage header is a ContractError naming it."""
    with pytest.raises(ContractError, match=match):
        lineage_from_headers(headers)


@pytest.mark.parametrize("model", CONTRACTS, ids=lambda m: m.__name__)
def test_catalogue_is_in_sync_with_the_models(model: type[BusinessEvent]) -> None:
    """The committed .avsc of each sample contract is what its model generates."""
    path = CATALOGUE / f"{model.contract_fullname()}.avsc"
    assert schema_drift(model, path) == []
    assert path.read_text() == avsc_text(model)


def test_avsc_round_trip(tmp_path: Path) -> None:
    """write_avsc writes <fullname>.avsc with the topic as metadata; read_avsc strips it."""
    from bizevents.contracts.business import write_avsc

    path = write_avsc(OrderPlaced, tmp_path)
    assert path.name == "store.orders.OrderPlaced.avsc"
    assert json.loads(path.read_text())[TOPIC_PROPERTY] == "store.order-placed"
    contract = read_avsc(path)
    assert contract.schema == OrderPlaced.contract_schema()
    assert contract.topic == "store.order-placed"
    assert contract.fullname == "store.orders.OrderPlaced"


def test_write_avsc_takes_any_path_and_creates_its_folders(tmp_path: Path) -> None:
    """A str or a Path; a missing folder is created; a path ending in .avsc is the file."""
    from bizevents.contracts.business import write_avsc

    into_folder = write_avsc(OrderPlaced, str(tmp_path / "new" / "folder"))
    assert into_folder == tmp_path / "new" / "folder" / "store.orders.OrderPlaced.avsc"
    named = write_avsc(OrderPlaced, tmp_path / "elsewhere" / "placed.avsc")
    assert named == tmp_path / "elsewhere" / "placed.avsc"
    existing = tmp_path / "existing"
    existing.mkdir()
    assert write_avsc(OrderPlaced, existing).parent == existing
    for path in (into_folder, named):
        assert read_avsc(path).schema == OrderPlaced.contract_schema()


def test_drift_detects_a_changed_model(tmp_path: Path) -> None:
    """Adding, retyping and removing fields all show up, each naming the field."""
    path = CATALOGUE / "store.orders.OrderCancelled.avsc"

    class OrderCancelled(BusinessEvent):  # same name, changed body
        order_id: str
        cancelled_at: Timestamp
        refunded: bool = False

        class Meta:
            namespace = "store.orders"
            topic = "store.order-cancellations"

    drift = schema_drift(OrderCancelled, path)
    text = "\n".join(drift)
    assert "'OrderCancelled.order_id'" in text
    assert "field 'OrderCancelled.refunded' is in the model but not in the .avsc" in text
    assert "field 'OrderCancelled.reason' is in the .avsc but not in the model" in text


def test_drift_detects_a_changed_default_and_topic() -> None:
    """A new default or another topic is drift too."""

    class OrderCancelled(BusinessEvent):
        order_id: str
        cancelled_at: Timestamp
        reason: str | None = None

        class Meta:
            namespace = "store.orders"

    drift = schema_drift(OrderCancelled, CATALOGUE / "store.orders.OrderCancelled.avsc")
    assert any(line.startswith("topic:") for line in drift)


def test_enum_symbol_added_is_drift() -> None:
    """A changed enum shows up at the field holding it."""
    path = CATALOGUE / "store.orders.OrderPlaced.avsc"
    document = json.loads(path.read_text())
    for field in document["fields"]:
        if field["name"] == "status":
            field["type"]["symbols"].append("RETURNED")
    changed = Path(path.parent.parent / "tmp-drift.avsc")
    try:
        changed.write_text(json.dumps(document))
        drift = schema_drift(OrderPlaced, changed)
    finally:
        changed.unlink()
    assert drift and "OrderPlaced.status" in drift[0]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "not valid JSON"),
        ('"string"', "must be an Avro record"),
        ('{"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}', "nope"),
        (
            '{"type": "record", "name": "X", "fields": '
            '[{"name": "a", "type": "int", "default": "one"}]}',
            "invalid default",
        ),
    ],
    ids=["json", "not-record", "unknown-type", "bad-default"],
)
def test_invalid_avsc_names_the_file(tmp_path: Path, content: str, match: str) -> None:
    """An invalid .avsc raises InvalidSchemaError naming the file and the reason."""
    path = tmp_path / "bad.avsc"
    path.write_text(content)
    with pytest.raises(InvalidSchemaError, match=match) as caught:
        read_avsc(path)
    assert str(path) in str(caught.value)


def test_missing_avsc() -> None:
    """A missing file is a ContractError naming it."""
    with pytest.raises(ContractError, match="no such contract file"):
        read_avsc(Path("/nonexistent/x.avsc"))


def test_enum_by_label() -> None:
    """Enum symbols are the enum values (labels), never their positions."""
    assert OrderStatus.PAID.value in field_type(OrderPlaced.contract_schema(), "status")["symbols"]  # type: ignore[index]
