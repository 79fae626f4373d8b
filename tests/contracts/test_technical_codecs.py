"""Decoders and encoders of technical records: round trips, fuzzing, documented shapes."""

from __future__ import annotations

import base64
import io
import json
import struct
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bizevents.contracts.envelope import ChangeEvent, MySqlPosition, PgPosition, Tombstone
from bizevents.contracts.exceptions import Coordinates, DecodeError
from bizevents.contracts.logical import (
    UNAVAILABLE,
    UNAVAILABLE_MARKER,
    ColumnType,
    Field,
    Kind,
    struct_encoder,
)
from bizevents.contracts.technical import (
    AutoDecoder,
    AvroDecoder,
    AvroEncoder,
    EncodeError,
    JsonEncoder,
    JsonSchemaDecoder,
    PlainJsonDecoder,
    TableSchema,
    detect_encoding,
    envelope_avro_schema,
)
from bizevents.plumbing.errors import TransientError
from tests.contracts.strategies import json_values, tables_and_events
from tests.envelopes import pg_source

WHERE = Coordinates("pg.public.orders", 3, 42)
HEADERS = [("trace", b"abc"), ("empty", None)]
FUZZ = settings(max_examples=400, suppress_health_check=list(HealthCheck), deadline=None)
ROUND_TRIP = settings(max_examples=250, suppress_health_check=list(HealthCheck), deadline=None)

ORDERS = TableSchema(
    server="pg",
    schema="public",
    table="orders",
    key_fields=(Field("id", ColumnType(Kind.INT64), optional=False),),
    value_fields=(
        Field("id", ColumnType(Kind.INT64), optional=False),
        Field("total", ColumnType(Kind.DECIMAL, scale=2, precision=12)),
        Field("placed_at", ColumnType(Kind.TIMESTAMP_MICROS)),
        Field("status", ColumnType(Kind.ENUM, labels=("new", "paid"))),
        Field("note", ColumnType(Kind.STRING)),
    ),
)


def _order_event(op: str = "c", **after: Any) -> ChangeEvent:
    row = {
        "id": 7,
        "total": Decimal("19.90"),
        "placed_at": datetime(2024, 5, 1, 12, 0, tzinfo=UTC),
        "status": "new",
        "note": None,
        **after,
    }
    return ChangeEvent(
        op=op,  # type: ignore[arg-type]
        source=pg_source(ts_ms=1714564800000, lsn=24023128),
        after=row,
        key={"id": 7},
        ts_ms=1714564800123,
    )


class Registry:
    """An in-memory schema lookup that counts calls."""

    def __init__(self) -> None:
        self.schemas: dict[int, Any] = {}
        self.calls = 0

    def __call__(self, schema_id: int) -> Any:
        self.calls += 1
        return self.schemas[schema_id]


def _avro(table: TableSchema) -> tuple[AvroEncoder, Registry]:
    encoder = AvroEncoder(table, 1, 2)
    registry = Registry()
    registry.schemas[1] = encoder.schemas.key
    registry.schemas[2] = encoder.schemas.value
    return encoder, registry


def _with_coords(record: ChangeEvent | Tombstone) -> dict[str, Any]:
    return {"coordinates": WHERE, "headers": HEADERS}


def _expected(record: ChangeEvent | Tombstone) -> ChangeEvent | Tombstone:
    from dataclasses import replace

    return replace(record, coordinates=WHERE, headers=(("trace", b"abc"), ("empty", None)))


# -- round trips -------------------------------------------------------------------------


@ROUND_TRIP
@given(tables_and_events())
def test_avro_round_trip(te: tuple[TableSchema, ChangeEvent | Tombstone]) -> None:
    """Any envelope or tombstone survives Confluent Avro encoding and decoding."""
    table, record = te
    encoder, registry = _avro(table)
    key, value = encoder.encode(record)
    assert AvroDecoder(registry).decode(key, value, **_with_coords(record)) == _expected(record)


@ROUND_TRIP
@given(tables_and_events())
def test_json_with_schema_round_trip(te: tuple[TableSchema, ChangeEvent | Tombstone]) -> None:
    """Any envelope or tombstone survives Debezium JSON with its embedded schema."""
    table, record = te
    key, value = JsonEncoder(table, with_schema=True).encode(record)
    decoded = JsonSchemaDecoder().decode(key, value, **_with_coords(record))
    assert decoded == _expected(record)


def _plain_view(table: TableSchema, row: Any) -> Any:
    """What plain JSON can carry of a row: the JSON wire form, TOAST marker inferred."""
    if row is None:
        return None
    wire = json.loads(json.dumps(struct_encoder(table.value_fields, "json")(row)))
    marker = UNAVAILABLE_MARKER
    markers = (marker, [marker], base64.b64encode(marker.encode()).decode())
    return {k: UNAVAILABLE if v in markers else v for k, v in wire.items()}


@ROUND_TRIP
@given(tables_and_events())
def test_plain_json_round_trip_keeps_json_shapes(
    te: tuple[TableSchema, ChangeEvent | Tombstone],
) -> None:
    """Plain JSON gives back the envelope with each value in its JSON wire form."""
    from dataclasses import replace

    table, record = te
    key, value = JsonEncoder(table, with_schema=False).encode(record)
    decoded = PlainJsonDecoder().decode(key, value, **_with_coords(record))
    if isinstance(record, Tombstone):
        assert isinstance(decoded, Tombstone)
        assert decoded.key == _plain_view(
            TableSchema("s", "s", "t", (), table.key_fields), record.key
        )
        return
    assert isinstance(decoded, ChangeEvent)
    key_table = TableSchema("s", "s", "t", (), table.key_fields)
    expected = replace(
        _expected(record),
        before=_plain_view(table, record.before),
        after=_plain_view(table, record.after),
        key=_plain_view(key_table, record.key),
    )
    assert decoded == expected


@ROUND_TRIP
@given(tables_and_events(), st.sampled_from(["avro", "json_schema"]))
def test_auto_decoder_reads_every_encoding(
    te: tuple[TableSchema, ChangeEvent | Tombstone], encoding: str
) -> None:
    """The auto-detecting decoder gives what the specific decoder gives."""
    table, record = te
    encoder, registry = _avro(table)
    if encoding == "avro":
        key, value = encoder.encode(record)
    else:
        key, value = JsonEncoder(table, with_schema=True).encode(record)
    assert AutoDecoder(registry).decode(key, value, **_with_coords(record)) == _expected(record)


def test_plain_json_limits_are_the_wire_forms() -> None:
    """Without a schema, decimals stay base64 text and timestamps stay epoch numbers."""
    key, value = JsonEncoder(ORDERS, with_schema=False).encode(_order_event())
    event = PlainJsonDecoder().decode(key, value)
    assert isinstance(event, ChangeEvent) and event.after is not None
    assert event.after["total"] == "B8Y="  # 1990 unscaled, scale 2 lost
    assert event.after["placed_at"] == 1714564800000000
    assert event.after["status"] == "new"
    assert event.key == {"id": 7}


def test_auto_decoder_reads_plain_json_with_floats_as_json_gives_them() -> None:
    """Plain JSON through the auto decoder keeps a float a float."""
    doc = {
        "op": "c",
        "after": {"id": 1, "ratio": 0.1},
        "source": {
            "connector": "mysql",
            "name": "m",
            "db": "d",
            "table": "t",
            "ts_ms": 1,
            "file": "mysql-bin.000001",
            "pos": 4,
            "row": 0,
            "server_id": 1,
        },
    }
    event = AutoDecoder().decode(b'{"id": 1}', json.dumps(doc).encode())
    assert isinstance(event, ChangeEvent) and event.after is not None
    assert event.after["ratio"] == 0.1 and isinstance(event.after["ratio"], float)
    assert event.position == MySqlPosition("mysql-bin.000001", 4, 0, 1)


# -- a documented Debezium message ----------------------------------------------------------

#: The customers table's columns, in the embedded schema's before and after.
_CUSTOMER_FIELDS: list[dict[str, Any]] = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": False, "field": "first_name"},
    {"type": "string", "optional": False, "field": "last_name"},
    {"type": "string", "optional": False, "field": "email"},
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "field": "balance",
    },
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.MicroTimestamp",
        "version": 1,
        "field": "updated_at",
    },
]


def _customers(field: str) -> dict[str, Any]:
    """The embedded schema's ``before`` or ``after`` struct."""
    return {
        "type": "struct",
        "fields": _CUSTOMER_FIELDS,
        "optional": True,
        "name": "PostgreSQL_server.inventory.customers.Value",
        "field": field,
    }


# Shaped after the update-event example of Debezium's PostgreSQL connector
# documentation (the "customers" table), with the embedded schema, the pre-1.0 boolean
# snapshot flag and a decimal and a MicroTimestamp column added.
DEBEZIUM_UPDATE: dict[str, Any] = {
    "schema": {
        "type": "struct",
        "fields": [
            _customers("before"),
            _customers("after"),
            {
                "type": "struct",
                "fields": [
                    {"type": "string", "optional": False, "field": "version"},
                    {"type": "string", "optional": False, "field": "connector"},
                    {"type": "string", "optional": False, "field": "name"},
                    {"type": "int64", "optional": False, "field": "ts_ms"},
                    {"type": "boolean", "optional": True, "default": False, "field": "snapshot"},
                    {"type": "string", "optional": False, "field": "db"},
                    {"type": "string", "optional": False, "field": "schema"},
                    {"type": "string", "optional": False, "field": "table"},
                    {"type": "int64", "optional": True, "field": "txId"},
                    {"type": "int64", "optional": True, "field": "lsn"},
                    {"type": "int64", "optional": True, "field": "xmin"},
                ],
                "optional": False,
                "name": "io.debezium.connector.postgresql.Source",
                "field": "source",
            },
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
        "optional": False,
        "name": "PostgreSQL_server.inventory.customers.Envelope",
    },
    "payload": {
        "before": {
            "id": 1,
            "first_name": "Anne",
            "last_name": "Kretchmar",
            "email": "annek@noanswer.org",
            "balance": "AN4=",
            "updated_at": 1559033904863000,
        },
        "after": {
            "id": 1,
            "first_name": "Anne Marie",
            "last_name": "Kretchmar",
            "email": "annek@noanswer.org",
            "balance": "AN4=",
            "updated_at": 1559033904863123,
        },
        "source": {
            "version": "2.7.0.Final",
            "connector": "postgresql",
            "name": "PostgreSQL_server",
            "ts_ms": 1559033904863,
            "snapshot": False,
            "db": "postgres",
            "schema": "public",
            "table": "customers",
            "txId": 556,
            "lsn": 24023128,
            "xmin": None,
        },
        "op": "u",
        "ts_ms": 1465584025523,
    },
}
DEBEZIUM_KEY: dict[str, Any] = {
    "schema": {
        "type": "struct",
        "name": "PostgreSQL_server.public.customers.Key",
        "optional": False,
        "fields": [{"field": "id", "type": "int32", "optional": False}],
    },
    "payload": {"id": 1},
}


@pytest.mark.parametrize("decoder", [JsonSchemaDecoder(), AutoDecoder()], ids=["json", "auto"])
def test_debezium_documented_update_decodes(decoder: JsonSchemaDecoder | AutoDecoder) -> None:
    """A Debezium update with its embedded schema decodes to typed values."""
    event = decoder.decode(
        json.dumps(DEBEZIUM_KEY).encode(), json.dumps(DEBEZIUM_UPDATE).encode(), WHERE
    )
    assert isinstance(event, ChangeEvent)
    assert event.op == "u"
    assert event.key == {"id": 1}
    assert event.before is not None and event.after is not None
    assert event.before["first_name"] == "Anne"
    assert event.after["first_name"] == "Anne Marie"
    assert event.after["balance"] == Decimal("2.22")
    assert event.after["updated_at"] == datetime(2019, 5, 28, 8, 58, 24, 863123, tzinfo=UTC)
    assert event.source.snapshot is False and event.source.snapshot_raw == "false"
    assert event.source.position == PgPosition(lsn=24023128, tx_id=556, xmin=None)
    assert event.source.qualified_table == "public.customers"
    assert event.ts_ms == 1465584025523
    assert event.coordinates == WHERE


def test_plain_debezium_update_decodes_without_schema() -> None:
    """The same message without its schema decodes with JSON's own types."""
    event = PlainJsonDecoder().decode(b'{"id": 1}', json.dumps(DEBEZIUM_UPDATE["payload"]).encode())
    assert isinstance(event, ChangeEvent) and event.after is not None
    assert event.after["balance"] == "AN4="
    assert event.after["updated_at"] == 1559033904863123


def test_snapshot_flag_normalises() -> None:
    """'true', 'last', 'incremental' mean a snapshot read; the raw value is kept."""
    for raw, flag in [("true", True), ("last", True), ("incremental", True), ("false", False)]:
        doc = json.loads(json.dumps(DEBEZIUM_UPDATE["payload"]))
        doc["source"]["snapshot"] = raw
        doc["op"] = "r" if flag else "u"
        event = PlainJsonDecoder().decode(None, json.dumps(doc).encode())
        assert isinstance(event, ChangeEvent)
        assert (event.source.snapshot, event.source.snapshot_raw) == (flag, raw)


# -- Avro specifics ------------------------------------------------------------------------------


def test_envelope_avro_schema_is_debezium_shaped() -> None:
    """The value schema is <server>.<schema>.<table>.Envelope with nullable Value rows."""
    schemas = envelope_avro_schema("pg", "public", "orders", ORDERS.key_fields, ORDERS.value_fields)
    value = schemas.value
    assert value["namespace"] == "pg.public.orders" and value["name"] == "Envelope"
    fields = {f["name"]: f for f in value["fields"]}
    assert list(fields) == ["before", "after", "source", "op", "ts_ms", "transaction"]
    assert fields["before"]["type"][0] == "null"
    assert fields["before"]["type"][1]["name"] == "Value"
    assert fields["after"]["type"] == ["null", "pg.public.orders.Value"]
    assert fields["source"]["type"]["connect.name"] == "io.debezium.connector.postgresql.Source"
    assert schemas.key is not None and schemas.key["name"] == "Key"
    assert [f["name"] for f in schemas.key["fields"]] == ["id"]
    fastavro.parse_schema(schemas.value)
    fastavro.parse_schema(schemas.key)
    no_key = envelope_avro_schema("pg", "public", "log", (), ORDERS.value_fields)
    assert no_key.key is None


def test_avro_schemas_are_looked_up_once_per_id() -> None:
    """The decoder caches parsed schemas: the lookup runs once per id."""
    encoder, registry = _avro(ORDERS)
    decoder = AvroDecoder(registry)
    for _ in range(5):
        key, value = encoder.encode(_order_event())
        decoder.decode(key, value)
    assert registry.calls == 2


def test_avro_accepts_schema_as_json_text() -> None:
    """The lookup may return the schema's JSON text (as a registry serves it)."""
    encoder, registry = _avro(ORDERS)
    registry.schemas = {i: json.dumps(s) for i, s in registry.schemas.items()}
    key, value = encoder.encode(_order_event())
    event = AvroDecoder(registry).decode(key, value)
    assert isinstance(event, ChangeEvent) and event.after is not None
    assert event.after["total"] == Decimal("19.90")


def test_registry_outage_is_not_a_decode_error() -> None:
    """A TransientError from the lookup passes through, so the caller retries."""

    def unreachable(schema_id: int) -> Any:
        raise TransientError("registry down")

    key, value = AvroEncoder(ORDERS, 1, 2).encode(_order_event())
    with pytest.raises(TransientError):
        AvroDecoder(unreachable).decode(key, value)


def test_encoder_refuses_a_value_that_does_not_fit() -> None:
    """An encoder raises EncodeError for a value its column cannot hold."""
    with pytest.raises(EncodeError, match="total"):
        AvroEncoder(ORDERS, 1, 2).encode(_order_event(total=Decimal("1.234")))
    with pytest.raises(EncodeError, match="status"):
        JsonEncoder(ORDERS).encode(_order_event(status="lost"))


# -- bad input: only DecodeError -----------------------------------------------------------------


def _bad(decoder: Any, key: bytes | None, value: bytes | None) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        decoder.decode(key, value, WHERE)
    assert info.value.where == WHERE
    assert "pg.public.orders[3]@42" in str(info.value)
    return info.value


def _frame(schema_id: int, body: bytes) -> bytes:
    return struct.pack(">bI", 0, schema_id) + body


def test_specific_bad_records_name_what_was_wrong() -> None:
    """Each kind of bad record gives a DecodeError with a sentence about it."""
    encoder, registry = _avro(ORDERS)
    avro = AvroDecoder(registry)
    key, value = encoder.encode(_order_event())
    assert value is not None
    assert "magic byte 1" in _bad(avro, key, b"\x01" + value[1:]).reason
    assert "unknown schema id 99" in _bad(avro, key, _frame(99, value[5:])).reason
    assert "shorter than" in _bad(avro, key, value[:3]).reason
    assert "Avro body" in _bad(avro, key, value[:-1]).reason
    assert "bytes left" in _bad(avro, key, value + b"\x00").reason
    assert "neither key nor value" in _bad(avro, None, None).reason

    plain = PlainJsonDecoder()
    good = dict(DEBEZIUM_UPDATE["payload"])
    assert "not valid JSON" in _bad(plain, None, b"{nope").reason
    assert "no op" in _bad(plain, None, json.dumps({**good, "op": None}).encode()).reason
    assert (
        "one of c, u, d, r, t" in _bad(plain, None, json.dumps({**good, "op": "x"}).encode()).reason
    )
    no_source = {k: v for k, v in good.items() if k != "source"}
    assert "no source" in _bad(plain, None, json.dumps(no_source).encode()).reason
    assert "ts_ms" in _bad(plain, None, json.dumps({**good, "ts_ms": "soon"}).encode()).reason
    bad_source = {**good, "source": {**good["source"], "lsn": "0/1"}}
    assert "source.lsn" in _bad(plain, None, json.dumps(bad_source).encode()).reason
    assert "after" in _bad(plain, None, json.dumps({**good, "after": None}).encode()).reason
    assert "not a JSON object" in _bad(plain, b"[1]", None).reason

    with_schema = JsonSchemaDecoder()
    doc = json.loads(json.dumps(DEBEZIUM_UPDATE))
    doc["payload"]["after"]["balance"] = 12  # an int is fine for a decimal ...
    with_schema.decode(None, json.dumps(doc).encode())
    doc["payload"]["after"]["id"] = "one"  # ... a string is not an int32
    assert "column 'id'" in _bad(with_schema, None, json.dumps(doc).encode()).reason

    assert "no schema lookup" in _bad(AutoDecoder(), None, value).reason
    assert "neither Confluent Avro" in _bad(AutoDecoder(), None, b"hello").reason


def _decoders() -> list[tuple[str, Any, Any]]:
    encoder, registry = _avro(ORDERS)
    event = _order_event("u", note="x" * 20)
    avro_key, avro_value = encoder.encode(event)
    json_key, json_value = JsonEncoder(ORDERS, with_schema=True).encode(event)
    plain_key, plain_value = JsonEncoder(ORDERS, with_schema=False).encode(event)
    return [
        ("avro", AvroDecoder(registry), (avro_key, avro_value)),
        ("json_schema", JsonSchemaDecoder(), (json_key, json_value)),
        ("json", PlainJsonDecoder(), (plain_key, plain_value)),
        ("auto", AutoDecoder(registry), (avro_key, avro_value)),
        ("auto-json", AutoDecoder(registry), (json_key, json_value)),
    ]


DECODERS = _decoders()
IDS = [d[0] for d in DECODERS]


def _only_decode_error(decoder: Any, key: bytes | None, value: bytes | None) -> None:
    try:
        decoder.decode(key, value, WHERE)
    except DecodeError as exc:
        assert exc.where == WHERE
        assert exc.reason


@pytest.mark.parametrize(("name", "decoder", "good"), DECODERS, ids=IDS)
@FUZZ
@given(junk=st.binary(max_size=200), prefix=st.sampled_from([b"", b"\x00\x00\x00\x00\x02", b"{"]))
def test_random_bytes_raise_only_decode_error(
    name: str, decoder: Any, good: Any, junk: bytes, prefix: bytes
) -> None:
    """Random bytes as key or value never raise anything but DecodeError."""
    _only_decode_error(decoder, None, prefix + junk)
    _only_decode_error(decoder, prefix + junk, good[1])
    _only_decode_error(decoder, prefix + junk, None)


@pytest.mark.parametrize(("name", "decoder", "good"), DECODERS, ids=IDS)
@FUZZ
@given(data=st.data())
def test_mutated_records_raise_only_decode_error(
    name: str, decoder: Any, good: Any, data: st.DataObject
) -> None:
    """Flipped, inserted or deleted bytes of a valid record decode or raise DecodeError."""
    key, value = good
    target = bytearray(value)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(target) - 1))
        action = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        if action == "flip":
            target[i] = data.draw(st.integers(0, 255))
        elif action == "insert":
            target.insert(i, data.draw(st.integers(0, 255)))
        elif len(target) > 1:
            del target[i]
    _only_decode_error(decoder, key, bytes(target))


@pytest.mark.parametrize(("name", "decoder", "good"), DECODERS, ids=IDS)
@FUZZ
@given(data=st.data())
def test_truncated_records_raise_decode_error(
    name: str, decoder: Any, good: Any, data: st.DataObject
) -> None:
    """Any strict prefix of a valid value is refused with DecodeError."""
    key, value = good
    cut = data.draw(st.integers(0, len(value) - 1))
    with pytest.raises(DecodeError):
        decoder.decode(key, value[:cut], WHERE)


@pytest.mark.parametrize(
    ("name", "decoder"),
    [(n, d) for n, d, _ in DECODERS if n in ("json_schema", "json", "auto-json")],
    ids=["json_schema", "json", "auto-json"],
)
@FUZZ
@given(doc=json_values)
def test_random_json_documents_raise_only_decode_error(name: str, decoder: Any, doc: Any) -> None:
    """Well-formed JSON of any shape decodes or raises DecodeError."""
    raw = json.dumps(doc).encode()
    _only_decode_error(decoder, None, raw)
    _only_decode_error(decoder, raw, None)
    _only_decode_error(decoder, None, json.dumps({"schema": doc, "payload": doc}).encode())


@FUZZ
@given(
    doc=st.fixed_dictionaries(
        {},
        optional={
            "op": st.sampled_from(["c", "u", "d", "r", "t", "x", None, 1]),
            "before": st.none() | st.dictionaries(st.text(max_size=3), json_values, max_size=3),
            "after": st.none()
            | st.dictionaries(st.text(max_size=3), json_values, max_size=3)
            | st.just(1),
            "source": st.none()
            | st.fixed_dictionaries(
                {},
                optional={
                    k: json_values | st.integers() | st.text(max_size=5)
                    for k in (
                        "connector",
                        "name",
                        "db",
                        "ts_ms",
                        "lsn",
                        "file",
                        "pos",
                        "snapshot",
                        "table",
                    )
                },
            ),
            "ts_ms": json_values,
            "transaction": json_values,
        },
    )
)
def test_envelope_shaped_json_raises_only_decode_error(doc: dict[str, Any]) -> None:
    """Near-envelopes with missing or mistyped parts give DecodeError, nothing else."""
    _only_decode_error(PlainJsonDecoder(), None, json.dumps(doc).encode())


def test_detect_encoding() -> None:
    """Magic byte 0 is Avro; JSON with a schema or without is told apart."""
    encoder, _ = _avro(ORDERS)
    _, avro_value = encoder.encode(_order_event())
    _, json_value = JsonEncoder(ORDERS, with_schema=True).encode(_order_event())
    _, plain_value = JsonEncoder(ORDERS, with_schema=False).encode(_order_event())
    assert avro_value is not None and json_value is not None and plain_value is not None
    assert detect_encoding(avro_value) == "avro"
    assert detect_encoding(json_value) == "json_schema"
    assert detect_encoding(b"  " + plain_value) == "json"
    for junk in (b"", b"\x05abc", b"[1]", b"{bad"):
        with pytest.raises(DecodeError):
            detect_encoding(junk)


def test_tombstone_keeps_key_coordinates_and_headers() -> None:
    """A null value with a key is a Tombstone carrying where it came from."""
    encoder, registry = _avro(ORDERS)
    key = encoder.encode_key({"id": 7})
    record = AvroDecoder(registry).decode(key, None, WHERE, HEADERS)
    assert record == Tombstone({"id": 7}, WHERE, (("trace", b"abc"), ("empty", None)))
    assert record.is_tombstone


def test_avro_reads_fastavro_written_debezium_logical_types() -> None:
    """An Avro record written by another producer with Avro logical types decodes."""
    row = {
        "type": "record",
        "name": "Value",
        "namespace": "x.y.z",
        "fields": [
            {"name": "id", "type": "long"},
            {
                "name": "at",
                "type": [
                    "null",
                    {
                        "type": "long",
                        "logicalType": "timestamp-millis",
                        "connect.name": "org.apache.kafka.connect.data.Timestamp",
                    },
                ],
            },
            {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 1},
            },
        ],
    }
    schema = envelope_avro_schema("x", "y", "z", (), ()).value
    schema["fields"][0]["type"][1] = row
    parsed = fastavro.parse_schema(schema)
    payload = {
        "before": None,
        "after": {"id": 1, "at": 1529507596945, "day": 17702, "amount": Decimal("12.5")},
        "source": {
            "connector": "postgresql",
            "name": "x",
            "ts_ms": 1,
            "db": "d",
            "schema": "y",
            "table": "z",
            "snapshot": "false",
        },
        "op": "c",
        "ts_ms": None,
        "transaction": None,
    }
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, payload)
    event = AvroDecoder({5: parsed}.__getitem__).decode(None, _frame(5, buffer.getvalue()))
    assert isinstance(event, ChangeEvent) and event.after is not None
    assert event.after["at"] == datetime(2018, 6, 20, 15, 13, 16, 945000, tzinfo=UTC)
    assert event.after["day"].isoformat() == "2018-06-20"
    assert event.after["amount"] == Decimal("12.5")


def test_avro_source_with_unexpected_types_is_checked_per_record() -> None:
    """A writer schema whose source fields have other types gets each record checked."""
    schema = envelope_avro_schema("x", "y", "z", (), ()).value
    source = schema["fields"][2]["type"]
    source["fields"] = [
        {**f, "type": "string"} if f["name"] == "ts_ms" else f for f in source["fields"]
    ]
    payload = {
        "before": None,
        "after": {},
        "source": {
            "connector": "postgresql",
            "name": "x",
            "ts_ms": "yesterday",
            "db": "d",
            "schema": "y",
            "table": "z",
        },
        "op": "c",
    }
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), payload)
    decoder = AvroDecoder({5: schema}.__getitem__)
    assert "source.ts_ms must be int" in _bad(decoder, None, _frame(5, buffer.getvalue())).reason
