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
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from bizevents.contracts.business import BusinessEvent, Int32, Lineage
from bizevents.contracts.exceptions import ContractError
from bizevents.contracts.serde import BusinessSerializer
from bizevents.translators.lineage import stamp
from tests.contracts.fixtures import store as fixtures

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


def _outcome(write: Any, event: Any, lineage: bytes | None) -> bytes | str:
    try:
        return bytes(write(event, lineage))
    except Exception:
        return "raised"


#: Anything a field may hold once a model is built without validation.
ANY_VALUE = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 2**63, -(2**63) - 1])
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8)
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events, lineages, st.booleans(), st.data())
def test_the_compiled_writer_gives_the_generated_writers_bytes_and_errors(
    event: BusinessEvent, lineage: Any, prewritten: bool, data: st.DataObject
) -> None:
    """The compiled writer (_native.c, write_model) and the generated one give the same
    bytes for every contract instance, with the lineage as the caller's bytes or the
    event's own; and for an instance holding a value its field's type does not take,
    both raise or both write the same bytes."""
    from fastavro import parse_schema

    from bizevents.contracts.avro_codegen import compile_model_writer
    from bizevents.contracts.avro_codegen.native import AVAILABLE, compile_native_writer

    assert AVAILABLE, "contracts/avro_codegen/_native.c is not built: run scripts/setup"
    cls = type(event)
    parsed = parse_schema(cls.contract_schema())
    generated, compiled = compile_model_writer(cls, parsed), compile_native_writer(cls, parsed)
    event = event.model_copy(update={"lineage": lineage})
    lineage_bytes = generated(event)[: len(generated(event)) - len(generated(event, b""))]
    given_lineage = lineage_bytes if prewritten else None
    expected = _outcome(generated, event, given_lineage)
    assert expected != "raised"
    assert _outcome(compiled, event, given_lineage) == expected
    name = data.draw(st.sampled_from(sorted(cls.model_fields)))
    broken = cls.model_construct(**{**dict(event), name: data.draw(ANY_VALUE)})
    assert _outcome(compiled, broken, given_lineage) == _outcome(generated, broken, given_lineage)


class Kinds(BusinessEvent):
    """A contract with a field of each kind the store's contracts lack at the top."""

    small: Int32
    big: int
    ratio: float
    raw: bytes
    tags: dict[str, int]
    maybe: Int32 | None
    names: list[str]
    flag: bool

    class Meta:
        namespace = "test.kinds"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({name: ANY_VALUE for name in Kinds.model_fields if name != "lineage"}))
def test_the_compiled_writer_takes_what_the_generated_one_takes_in_every_kind(
    values: dict[str, Any],
) -> None:
    """ints at the edges of 32 and 64 bits, floats, bytes, maps, optional and repeated
    values, booleans: the two writers write the same bytes or both raise."""
    from fastavro import parse_schema

    from bizevents.contracts.avro_codegen import compile_model_writer
    from bizevents.contracts.avro_codegen.native import compile_native_writer

    parsed = parse_schema(Kinds.contract_schema())
    generated, compiled = compile_model_writer(Kinds, parsed), compile_native_writer(Kinds, parsed)
    lineage = b"\x02x" + b"\x00" * 5 + b"\x00\x00"
    for name in values:  # one field at a time, the others valid
        good = {"small": 1, "big": 2, "ratio": 0.5, "raw": b"r", "tags": {"a": 1}}
        good |= {"maybe": None, "names": ["n"], "flag": True, name: values[name]}
        event = Kinds.model_construct(**good)
        assert _outcome(compiled, event, lineage) == _outcome(generated, event, lineage), name


def test_the_serializer_writes_with_the_compiled_writer() -> None:
    """Where the extension is built, BusinessSerializer's body writer is the compiled one."""
    from bizevents.contracts.avro_codegen.native import EXTENSION

    writer = SERIALIZER._writer(fixtures.OrderPlaced)
    assert type(writer.write) is EXTENSION.WritePlan


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


def _fastavro_outcome(parsed: Any, record: dict[str, Any]) -> object:
    import io

    import fastavro

    buffer = io.BytesIO()
    try:
        fastavro.schemaless_writer(buffer, parsed, record)
    except Exception as exc:
        return type(exc)
    return buffer.getvalue()


_ANY_DECIMAL = (
    st.decimals(allow_nan=True, allow_infinity=True)
    | st.builds(
        lambda sign, digits, exponent: Decimal((sign, digits, exponent)),
        st.integers(0, 1),
        st.lists(st.integers(0, 9), min_size=1, max_size=22).map(tuple),
        st.integers(-25, 25),
    )
    | st.sampled_from([Decimal("-0"), Decimal("0E+5"), Decimal("-128"), Decimal("127.99")])
)
_ZONES = st.none() | st.builds(
    lambda minutes: timezone(timedelta(minutes=minutes)), st.integers(-1439, 1439)
)


@settings(max_examples=400, deadline=None)
@given(
    value=_ANY_DECIMAL,
    moment=st.datetimes(timezones=_ZONES),
    precision=st.integers(1, 30),
    scale=st.integers(0, 30),
)
def test_decimals_and_timestamps_written_in_c_are_fastavros_bytes_and_errors(
    value: Decimal, moment: datetime, precision: int, scale: int
) -> None:
    """The compiled writer's own conversions of decimals (``bytes``) and timestamp-micros
    give fastavro's bytes, and where fastavro raises, it raises the same error (the
    values it does not convert itself go through fastavro's conversion)."""
    import fastavro

    from bizevents.contracts.avro_codegen import native

    assume(scale <= precision)  # a schema fastavro accepts

    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {
                "name": "amount",
                "type": {
                    "type": "bytes",
                    "logicalType": "decimal",
                    "precision": precision,
                    "scale": scale,
                },
            },
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        ],
    }
    parsed = fastavro.parse_schema(schema)
    plan = native._WritePlanner({}).node(parsed)
    assert [node[0] for node in plan[2]] == [native.W_DECIMAL, native.W_MICROS]  # the C's own
    write = native.compile_native_plan(schema)
    assert write is not None
    expected = _fastavro_outcome(parsed, {"amount": value, "at": moment})
    try:
        written: object = write((value, moment))
    except Exception as exc:
        written = type(exc)
    assert written == expected


class _Plain(Enum):
    A = "a"
    B = "b"


class _OwnValue(Enum):
    """An enum whose ``value`` is its own: the writer asks it, not ``_value_``."""

    A = "a"
    B = "b"

    @property  # type: ignore[override]
    def value(self) -> str:
        return "b" if self._value_ == "a" else "a"


@pytest.mark.parametrize(
    ("member", "index"),
    [(_Plain.A, 0), (_Plain.B, 1), (_OwnValue.A, 1), (_OwnValue.B, 0), ("b", 1)],
)
def test_the_compiled_writer_writes_an_enum_members_value(member: Any, index: int) -> None:
    """A member's symbol is its ``value`` (read from ``_value_`` where ``value`` is
    Enum's own property, asked of the member where its type has another)."""
    from bizevents.contracts.avro_codegen.native import compile_native_plan

    write = compile_native_plan(
        {
            "type": "record",
            "name": "R",
            "fields": [{"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["a", "b"]}}],
        }
    )
    assert write is not None
    assert write((member,)) == bytes([index * 2])  # the symbol's index, a zigzag varint
