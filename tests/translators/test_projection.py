"""Declared columns and ops: the same events for less work, and declarations held."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from bizevents import translator
from bizevents.contracts.business import BusinessEvent
from bizevents.contracts.change import Change
from bizevents.contracts.envelope import PgPosition
from bizevents.contracts.technical import AvroDecoder, AvroEncoder, JsonEncoder
from bizevents.testing import change, run
from bizevents.translators.pipeline import Pipeline
from bizevents.translators.records import SourceRecord
from tests.translators.wide import (
    READ,
    WIDE,
    DealClosed,
    changes,
    deal_closed,
    deals,
    deals_undeclared,
)

TOPIC = WIDE.namespace


def serialize(
    event: BusinessEvent, _topic: str | None = None, _lineage: bytes | None = None
) -> bytes:
    return event.model_dump_json().encode()


def avro_records(count: int) -> tuple[list[SourceRecord], dict[int, Any]]:
    encoder = AvroEncoder(WIDE, 1, 2)
    records = []
    for offset, event in enumerate(changes(count)):
        key, value = encoder.encode(event)
        records.append(SourceRecord(TOPIC, 0, offset, key, value))
    return records, {1: encoder.schemas.key, 2: encoder.schemas.value}


class CountingDecoder(AvroDecoder):
    """Records the projection each decode was asked for."""

    def __init__(self, schemas: dict[int, Any]) -> None:
        super().__init__(schemas.__getitem__)
        self.asked: list[frozenset[str] | None] = []

    def decode(
        self,
        key: Any,
        value: Any,
        coordinates: Any = None,
        headers: Any = None,
        columns: Any = None,
    ) -> Any:
        self.asked.append(columns)
        return super().decode(key, value, coordinates, headers, columns)


def test_projected_pipeline_gives_what_the_undeclared_one_gives() -> None:
    records, schemas = avro_records(400)
    projected = Pipeline([deals], CountingDecoder(schemas), serialize).process(records)
    reference = Pipeline([deals_undeclared], AvroDecoder(schemas.__getitem__), serialize).process(
        records
    )
    assert len(projected.records) == 100
    assert [dataclasses.astuple(r) for r in projected.records] == [
        dataclasses.astuple(r) for r in reference.records
    ]
    ours, theirs = projected.counts["deals@1"], reference.counts["deals@1"]
    assert (ours.consumed, ours.emitted, ours.dropped) == (
        theirs.consumed,
        theirs.emitted,
        theirs.dropped,
    )


def test_after_the_first_record_only_declared_columns_are_decoded() -> None:
    records, schemas = avro_records(20)
    decoder = CountingDecoder(schemas)
    Pipeline([deals], decoder, serialize).process(records)
    assert decoder.asked[0] is None  # the topic's table is not known yet
    assert set(decoder.asked[1:]) == {frozenset(READ)}


def test_a_table_nobody_declares_everything_for_is_read_whole() -> None:
    records, schemas = avro_records(8)
    decoder = CountingDecoder(schemas)
    Pipeline(
        [deals, dataclasses.replace(deals_undeclared, version=2)],
        decoder,
        serialize,
    ).process(records)
    assert set(decoder.asked) == {None}


def test_a_topic_holding_two_tables_is_read_whole_from_the_second() -> None:
    records, schemas = avro_records(4)
    other = dataclasses.replace(WIDE, table="archived_deals")
    encoder = AvroEncoder(other, 3, 4)
    schemas |= {3: encoder.schemas.key, 4: encoder.schemas.value}
    event = next(iter(changes(1)))
    moved = dataclasses.replace(
        event, source=dataclasses.replace(event.source, table="archived_deals")
    )
    key, value = encoder.encode(moved)
    mixed = [*records, SourceRecord(TOPIC, 0, 99, key, value), *records]
    decoder = CountingDecoder(schemas)
    Pipeline([deals], decoder, serialize).process(mixed)
    assert decoder.asked[-len(records) :] == [None] * len(records)


def test_ops_not_declared_are_dropped_without_calling_the_translator() -> None:
    called: list[str] = []

    @translator(name="spy", version=1, sources=["crm.deals"], emits=[DealClosed], ops=["u"])
    def spy(c: Change) -> None:
        called.append(c.op)

    records, schemas = avro_records(8)
    result = Pipeline([spy], AvroDecoder(schemas.__getitem__), serialize).process(records)
    assert called == ["u"] * 6
    assert result.counts["spy@1"].dropped == 8


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_reading_an_undeclared_column_is_an_error_naming_it(encoding: str) -> None:
    @translator(name="nosy", version=1, sources=["crm.deals"], emits=[DealClosed], columns=["id"])
    def nosy(c: Change) -> None:
        c.new("owner")

    event = list(changes(2))[1]
    if encoding == "avro":
        encoder = AvroEncoder(WIDE, 1, 2)
        key, value = encoder.encode(event)
        decoder: Any = AvroDecoder({1: encoder.schemas.key, 2: encoder.schemas.value}.__getitem__)
    else:
        key, value = JsonEncoder(WIDE, with_schema=True).encode(event)
        from bizevents.contracts.technical import AutoDecoder

        decoder = AutoDecoder(lambda _id: None)
    result = Pipeline([nosy], decoder, serialize).process(
        [SourceRecord(TOPIC, 0, 0, key, value), SourceRecord(TOPIC, 0, 1, key, value)]
    )
    reasons = [(dict(r.headers)["bizevents.dlq.reason"] or b"").decode() for r in result.records]
    assert len(reasons) == 2
    assert all(
        "nosy@1 reads column 'owner' of crm.deals, which it does not declare" in r for r in reasons
    )


def test_the_test_kit_holds_the_declaration_too() -> None:
    @translator(name="nosy", version=1, sources=["crm.deals"], emits=[DealClosed], columns=["id"])
    def nosy(c: Change) -> None:
        c.old("state")

    update = change("crm.deals", "u", before={"id": 1, "state": "a"}, after={"id": 1, "state": "b"})
    with pytest.raises(
        AssertionError, match=r"reads column 'state' of crm\.deals, which it does not"
    ):
        run(nosy, update)


def test_changed_columns_see_only_declared_columns() -> None:
    event = list(changes(2))[1]  # legacy_00 touched, nothing declared changed
    assert "legacy_00" in Change(event).changed_columns()
    assert Change(event).reading(frozenset(READ), "deals@1").changed_columns() == frozenset()


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"columns": "id"}, "columns 'id' must be a non-empty list"),
        ({"columns": []}, "must be a non-empty list of column names"),
        ({"ops": ["x"]}, "ops ['x'] must be a non-empty list of c, d, r, t, u"),
    ],
)
def test_a_malformed_declaration_fails_where_it_is_written(
    kwargs: dict[str, Any], problem: str
) -> None:
    from bizevents.translators.exceptions import PluginError

    with pytest.raises(PluginError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        translator(name="bad", version=1, sources=["a.b"], emits=[DealClosed], **kwargs)(
            lambda c: None
        )


def _closed_from_read(change: Change) -> Any:
    yield deal_closed(change)


def test_reads_of_an_unchanged_row_have_one_id_whatever_the_translators_read() -> None:
    """A row read by two snapshots (other positions, other offsets) gives its events one
    id, marked as a snapshot's; the id hashes the whole row (a read is decoded with every
    column), so a translator that declares its columns and one that does not agree, and
    a change to a column neither reads gives a new id."""
    declared = translator(
        name="states", version=1, sources=["crm.deals"], emits=[DealClosed], columns=READ
    )(_closed_from_read)
    undeclared = translator(name="states", version=2, sources=["crm.deals"], emits=[DealClosed])(
        _closed_from_read
    )
    encoder = AvroEncoder(WIDE, 1, 2)
    (created,) = changes(1)
    row = dict(created.after or {})

    def read(lsn: int, after: dict[str, Any]) -> tuple[bytes | None, bytes | None]:
        source = dataclasses.replace(created.source, position=PgPosition(lsn=lsn, tx_id=None))
        return encoder.encode(dataclasses.replace(created, op="r", source=source, after=after))

    records = [
        SourceRecord(TOPIC, 0, offset, *read(lsn, after))
        for offset, lsn, after in (
            (0, 5_000, row),
            (1, 9_000, row),
            (2, 9_000, {**row, "legacy_00": "changed"}),
        )
    ]
    schemas = {1: encoder.schemas.key, 2: encoder.schemas.value}
    ids = {}
    for t in (declared, undeclared):
        decoder = CountingDecoder(schemas)
        # the first record makes the topic's table known: the others meet the projection
        result = Pipeline([t], decoder, serialize).process(records)
        out = [r for r in result.records if not r.dead_letter]
        assert [dict(r.headers).get("bizevents.snapshot") for r in out] == [b"true"] * 3
        ids[t.version] = [r.event_id for r in out]
    assert ids[1] == ids[2]
    first, again, changed = ids[1]
    assert first == again != changed
