"""Declared changes: an update that changes none of the columns a translator's events
depend on is dropped before its rows are decoded, and nothing else is."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from bizevents import translator
from bizevents.contracts.business import BusinessEvent
from bizevents.contracts.change import Change
from bizevents.contracts.exceptions import DecodeError
from bizevents.contracts.logical import UNAVAILABLE
from bizevents.contracts.technical import AutoDecoder, AvroDecoder, AvroEncoder
from bizevents.plumbing.errors import TransientError
from bizevents.testing import change, run
from bizevents.translators.exceptions import PluginError
from bizevents.translators.pipeline import Pipeline
from bizevents.translators.records import SourceRecord
from tests.translators.wide import READ, WIDE, changes
from tests.translators.wide import deals as wide_deals

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Seen(BusinessEvent):
    order_id: int

    class Meta:
        namespace = "test.gate"


CALLED: list[tuple[str, Any]] = []


@translator(
    name="seen",
    version=1,
    sources=["store.orders"],
    emits=[Seen],
    columns=["id", "status", "note"],
    changes=["status"],
)
def seen(c: Change) -> Iterator[BusinessEvent]:
    """Gives an event for every change: the declaration says updates that keep the
    status give none, so what the runtime drops shows in the events."""
    CALLED.append((c.op, c.new("note")))
    yield Seen(order_id=c.new("id"))


def row(status: Any, note: str, order_id: int = 1) -> dict[str, Any]:
    return {"id": order_id, "status": status, "note": note, "updated_at": T0}


def test_an_update_that_keeps_the_declared_columns_is_dropped_uncalled() -> None:
    CALLED.clear()
    result = run(
        seen,
        [
            change("store.orders", "c", after=row("new", "placed")),
            change("store.orders", "u", before=row("new", "placed"), after=row("new", "noted")),
            change("store.orders", "u", before=row("new", "noted"), after=row("paid", "paid")),
            change("store.orders", "u", before=row("paid", "paid"), after=row("paid", "again")),
        ],
    )
    assert [len(result.of(i)) for i in range(4)] == [1, 0, 1, 0]
    assert CALLED == [("c", "placed"), ("u", "paid")]  # the other two were never decoded
    counts = result.counts["seen@1"]
    assert (counts.consumed, counts.emitted, counts.dropped) == (4, 2, 2)


def test_updates_the_gate_cannot_judge_by_their_bytes_are_passed_on() -> None:
    """No before row (PostgreSQL's default replica identity), or an out-of-line value
    the database did not send: the translator decides, as without the declaration."""
    CALLED.clear()
    result = run(
        seen,
        [
            change("store.orders", "c", after=row("new", "placed")),
            change("store.orders", "u", before=None, after=row("new", "no before row")),
            change("store.orders", "u", before=row("new", "x"), after=row(UNAVAILABLE, "toasted")),
        ],
    )
    assert [len(result.of(i)) for i in range(3)] == [1, 1, 1]
    assert [note for _, note in CALLED] == ["placed", "no before row", "toasted"]


def test_without_the_declaration_every_update_is_decoded() -> None:
    CALLED.clear()
    undeclared = dataclasses.replace(seen, changes=None)
    result = run(
        undeclared,
        [
            change("store.orders", "c", after=row("new", "placed")),
            change("store.orders", "u", before=row("new", "placed"), after=row("new", "noted")),
        ],
    )
    assert [len(result.of(i)) for i in range(2)] == [1, 1]


def test_a_translator_without_the_declaration_keeps_the_table_decoded() -> None:
    """Two translators of a table: the gate holds only if each one that takes updates
    declares what they must change."""
    CALLED.clear()
    other = dataclasses.replace(seen, name="other", changes=None)
    result = run(
        [seen, other],
        [
            change("store.orders", "c", after=row("new", "placed")),
            change("store.orders", "u", before=row("new", "placed"), after=row("new", "noted")),
        ],
    )
    assert [e.translator for e in result.emitted if e.change == 1] == ["seen@1", "other@1"]


# -- the gate on a topic's bytes ------------------------------------------------------


def wide_records(count: int, table: str = "deals") -> tuple[list[SourceRecord], dict[int, Any]]:
    schema = dataclasses.replace(WIDE, table=table)
    encoder = AvroEncoder(schema, 1, 2)
    records = []
    for offset, event in enumerate(changes(count)):
        if table != "deals":
            event = dataclasses.replace(
                event, source=dataclasses.replace(event.source, table=table)
            )
        key, value = encoder.encode(event)
        records.append(SourceRecord(WIDE.namespace, 0, offset, key, value))
    return records, {1: encoder.schemas.key, 2: encoder.schemas.value}


def gated(
    columns: frozenset[str], records: list[SourceRecord], schemas: dict[int, Any]
) -> list[bool]:
    decoder = AvroDecoder(schemas.__getitem__)
    for record in records:  # the key's plan is learnt by a first decode, as in the pipeline
        decoder.decode(record.key, record.value)
        break
    gate = decoder.gate(columns, (("schema", "crm"), ("table", "deals")))
    assert gate is not None
    return [gate(r.key, r.value) for r in records]


def test_the_gate_says_unchanged_exactly_when_the_decoded_rows_agree() -> None:
    records, schemas = wide_records(64)
    decoder = AvroDecoder(schemas.__getitem__)
    for columns in ({"state"}, {"amount", "owner"}, {"changed_at"}, {"legacy_05", "legacy_07"}):
        verdicts = gated(frozenset(columns), records, schemas)
        for record, unchanged in zip(records, verdicts, strict=True):
            event = decoder.decode(record.key, record.value)
            same = (
                event.op == "u"
                and event.before is not None
                and event.after is not None
                and all(event.before[c] == event.after[c] for c in columns)
            )
            assert unchanged == same, (columns, event.op, record.offset)
        assert any(verdicts) and not all(verdicts)


def test_the_gate_holds_only_for_its_table() -> None:
    records, schemas = wide_records(16, table="archived_deals")
    assert not any(gated(frozenset({"state"}), records, schemas))


@pytest.mark.parametrize(
    "edit",
    [
        lambda e: dataclasses.replace(e, source=dataclasses.replace(e.source, schema="sales")),
        lambda e: dataclasses.replace(e, op="c"),  # both rows, but not an update
    ],
    ids=["another schema", "another op"],
)
def test_the_gate_holds_only_for_updates_of_its_schema(edit: Any) -> None:
    encoder = AvroEncoder(WIDE, 1, 2)
    records = []
    for offset, event in enumerate(changes(16)):
        key, value = encoder.encode(edit(event) if event.op == "u" else event)
        records.append(SourceRecord(WIDE.namespace, 0, offset, key, value))
    schemas = {1: encoder.schemas.key, 2: encoder.schemas.value}
    assert not any(gated(frozenset({"state"}), records, schemas))


def test_a_record_whose_key_or_value_does_not_read_is_left_to_the_decoder() -> None:
    records, schemas = wide_records(16)
    verdicts = gated(frozenset({"state"}), records, schemas)
    index = verdicts.index(True)
    record = records[index]
    decoder = AvroDecoder(schemas.__getitem__)
    decoder.decode(record.key, record.value)
    gate = decoder.gate(frozenset({"state"}), (("schema", "crm"), ("table", "deals")))
    assert gate is not None and gate(record.key, record.value)
    assert not gate(record.key[:-1], record.value)  # a key cut short
    assert not gate(record.key, record.value[:-1])  # a value cut short
    assert not gate(record.key, record.value + b"\x00")  # bytes after the datum
    assert not gate(b"{}", record.value)  # a key of another encoding


def test_the_gate_takes_only_framed_bytes_and_keys_it_knows() -> None:
    """The compiled gate answers for exact bytes with the Confluent framing, a key whose
    schema the decoder has read (or no key at all); anything else goes to the decoder."""
    records, schemas = wide_records(16)
    index = gated(frozenset({"state"}), records, schemas).index(True)
    record = records[index]
    decoder = AvroDecoder(schemas.__getitem__)
    decoder.decode(record.key, record.value)
    gate = decoder.gate(frozenset({"state"}), (("schema", "crm"), ("table", "deals")))
    assert gate is not None and gate(record.key, record.value)
    assert gate(None, record.value)  # a record without a key: the value decides
    assert not gate(record.key, bytearray(record.value))  # not bytes
    assert not gate(bytearray(record.key), record.value)
    assert not gate(record.key, record.value[:4])  # shorter than the framing
    assert not gate(record.key, b"\x01" + record.value[1:])  # another magic byte
    unknown = record.key[:1] + (999).to_bytes(4, "big") + record.key[5:]
    assert not gate(unknown, record.value)  # a key schema the decoder has not read
    other = record.value[:1] + (998).to_bytes(4, "big") + record.value[5:]
    assert not gate(record.key, other)  # a schema the registry lacks: the decoder says so
    assert gate(record.key, record.value)  # and the schema it knows still gates


def test_a_broken_key_on_a_gated_update_goes_to_the_dead_letters() -> None:
    records, schemas = wide_records(16)

    @translator(
        name="deals",
        version=1,
        sources=["crm.deals"],
        emits=[Seen],
        columns=["id", "state"],
        changes=["state"],
    )
    def deals(c: Change) -> None:
        return None

    verdicts = gated(frozenset({"state"}), records, schemas)
    index = verdicts.index(True, 1)
    broken = dataclasses.replace(records[index], key=records[index].key[:-1])
    result = Pipeline([deals], AutoDecoder(schemas.__getitem__), lambda *a: b"").process(
        [records[0], broken]
    )
    assert result.undecodable == 1 and [r.dead_letter for r in result.records] == [True]


def test_the_store_orders_give_the_same_events_with_the_declaration() -> None:
    from bizevents_store.translators import orders_v2

    CALLED.clear()
    rows = [
        ("c", None, {"status": "pending", "updated_at": T0}),
        ("u", {"status": "pending", "updated_at": T0}, {"status": "paid", "updated_at": T0}),
        (
            "u",
            {"status": "paid", "updated_at": T0},
            {"status": "paid", "updated_at": T0 + timedelta(1)},
        ),
        ("u", {"status": "paid", "updated_at": T0}, {"status": "shipped", "updated_at": T0}),
    ]
    base = {
        "id": 7,
        "customer_id": 3,
        "total": Decimal("10.99"),
        "currency": "EUR",
        "placed_at": T0,
        "shipped_at": None,
        "tracking_number": None,
    }
    given = [
        change(
            "store.orders",
            op,
            before=None if before is None else base | before,
            after=base | after,
        )
        for op, before, after in rows
    ]
    declared = run(orders_v2, given)
    undeclared = run(dataclasses.replace(orders_v2, changes=None), given)
    assert orders_v2.changes == frozenset({"status"})
    assert [(e.change, e.value, e.headers) for e in declared.emitted] == [
        (e.change, e.value, e.headers) for e in undeclared.emitted
    ]
    assert declared.counts["orders@2"].dropped == undeclared.counts["orders@2"].dropped == 1


@pytest.mark.parametrize(
    ("changes_", "columns", "reason"),
    [
        ([], None, "non-empty list"),
        ("status", None, "non-empty list"),
        (["status", ""], None, "non-empty list"),
        (["status", "total"], ["id", "status"], "'total', which columns does not list"),
    ],
)
def test_a_malformed_changes_declaration_fails_where_it_is_written(
    changes_: Any, columns: Any, reason: str
) -> None:
    with pytest.raises(PluginError, match=reason):
        translator(
            name="bad",
            version=1,
            sources=["store.orders"],
            emits=[Seen],
            columns=columns,
            changes=changes_,
        )(lambda c: None)


# -- hostile bytes and forged ids -------------------------------------------------------


def _gate_of(
    schemas: dict[int, Any], first: SourceRecord, projection: frozenset[str] | None
) -> tuple[AvroDecoder, Any]:
    decoder = AvroDecoder(schemas.__getitem__)
    decoder.decode(first.key, first.value, None, None, projection)
    gate = decoder.gate(frozenset({"state"}), (("schema", "crm"), ("table", "deals")), projection)
    assert gate is not None
    return decoder, gate


def _spoiled(value: bytes, text: bytes, replacement: bytes) -> bytes:
    """``value`` with the second occurrence of ``text`` (the after row's) replaced."""
    at = value.index(text, value.index(text) + 1)
    assert len(replacement) == len(text)
    return value[:at] + replacement + value[at + len(text) :]


@pytest.mark.parametrize("projection", [None, frozenset(READ)], ids=["whole", "projected"])
@pytest.mark.parametrize("spoil", ["utf-8", "timestamp"])
def test_the_gate_never_calls_unchanged_a_record_the_decoder_refuses(
    projection: frozenset[str] | None, spoil: str
) -> None:
    """An update keeping its state, whose after row holds bytes the decoder refuses in a
    column it reads (the owner's text, the time of the change): it used to be dropped
    as unchanged; it goes to the decoder, which dead-letters it."""
    records, schemas = wide_records(8)
    decoder, gate = _gate_of(schemas, records[0], projection)
    touched = records[5]  # an update that changes no state (deal 1: its texts are its own)
    assert gate(touched.key, touched.value)
    event = decoder.decode(touched.key, touched.value)
    if spoil == "utf-8":
        text = str(event.after["owner"]).encode()
        value = _spoiled(touched.value, text, b"\xff" * len(text))
    else:
        text = event.after["changed_at"].strftime("%Y-%m-%dT%H:%M:%S").encode()
        value = _spoiled(touched.value, text, b"x" * len(text))
    assert not gate(touched.key, value)
    with pytest.raises(DecodeError):
        decoder.decode(touched.key, value, None, None, projection)


def test_forged_schema_ids_cost_the_gate_nothing() -> None:
    """Records framed with ids nobody registered: the gate looks none of them up and
    remembers none (it used to fetch each one and keep a gate per id forever)."""
    records, schemas = wide_records(8)
    looked_up: list[int] = []

    def lookup(schema_id: int) -> Any:
        looked_up.append(schema_id)
        return schemas[schema_id]

    decoder = AvroDecoder(lookup)
    decoder.decode(records[0].key, records[0].value)
    gate = decoder.gate(frozenset({"state"}), (("schema", "crm"), ("table", "deals")))
    assert gate is not None
    before = len(looked_up)
    value = records[1].value
    for forged in range(1000, 11_000):
        assert not gate(records[1].key, value[:1] + forged.to_bytes(4, "big") + value[5:])
    assert len(looked_up) == before
    assert len(gate.args[0]) <= 1  # type: ignore[attr-defined]  # the gates, per schema id
    assert gate(records[1].key, value)


def test_an_unreachable_registry_does_not_turn_the_gate_off() -> None:
    """A TransientError while the gate is made is not remembered (it used to switch the
    gate off for that id for good): once the decoder reads the schema, the gate holds."""
    records, schemas = wide_records(8)
    failures = [2]

    def flaky(schema_id: int) -> Any:
        if schema_id in failures:
            failures.remove(schema_id)
            raise TransientError("the registry is out of reach")
        return schemas[schema_id]

    decoder = AvroDecoder(flaky)
    decoder.decode(records[0].key, None)  # the key's plan, as a tombstone learns it
    gate = decoder.gate(frozenset({"state"}), (("schema", "crm"), ("table", "deals")))
    assert gate is not None
    touched = records[1]
    assert not gate(touched.key, touched.value)
    with pytest.raises(TransientError):
        decoder.decode(touched.key, touched.value)
    decoder.decode(touched.key, touched.value)  # the block, retried
    assert gate(touched.key, touched.value)


def test_a_schema_too_deep_to_plan_never_stops_the_pipeline() -> None:
    """A schema nested 100 deep, registered after the gate was made: making its gate
    raised ValueError out of the pipeline (the worker died on the record, again after
    each restart). The record is now read as fastavro reads it."""
    records, schemas = wide_records(8)
    value_schema = dict(schemas[2])
    deep: Any = "long"
    for i in range(100):
        deep = {"type": "record", "name": f"Level{i}", "fields": [{"name": "inner", "type": deep}]}
    fields = [dict(f) for f in value_schema["fields"]]
    row_schema = dict(fields[0]["type"][1])
    row_schema["fields"] = [*row_schema["fields"], {"name": "deep", "type": ["null", deep]}]
    fields[0]["type"] = ["null", row_schema]
    fields[1]["type"] = ["null", row_schema["name"]]
    value_schema["fields"] = fields
    schemas[3] = value_schema
    import fastavro

    parsed = fastavro.parse_schema(schemas[2])
    datum = fastavro.schemaless_reader(io.BytesIO(records[1].value[5:]), parsed, None)
    inner: Any = 5
    for _ in range(100):
        inner = {"inner": inner}
    datum["before"]["deep"] = datum["after"]["deep"] = inner
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(value_schema), datum)
    value = b"\x00" + (3).to_bytes(4, "big") + buffer.getvalue()
    deep_record = dataclasses.replace(records[1], offset=100, value=value)
    pipeline = Pipeline([wide_deals], AutoDecoder(schemas.__getitem__), lambda *a: b"")
    result = pipeline.process([records[0], deep_record, *records[1:]])
    assert result.undecodable == 0
    counts = result.counts["deals@1"]
    assert counts.consumed == 9
