"""Deterministic event ids and lineage: same change, same events, same ids."""

from __future__ import annotations

import uuid
from dataclasses import replace

from confluent_kafka.schema_registry import SchemaRegistryClient
from hypothesis import given, settings
from hypothesis import strategies as st

from bizevents.contracts.business import lineage_headers, read_lineage
from bizevents.contracts.change import Change
from bizevents.contracts.envelope import ChangeEvent, PgPosition
from bizevents.contracts.exceptions import Coordinates
from bizevents.contracts.serde import BusinessSerializer
from bizevents.translators.lineage import (
    Stamper,
    _canonical,
    canonical_key,
    contract_name,
    origin_of,
    stamp,
)
from tests.envelopes import Row, keyed_event, pg_source
from tests.translators.sample import things_v1, things_v2


def event(op: str, before: Row, after: Row, lsn: int, offset: int) -> ChangeEvent:
    source = pg_source("things", name="shop", lsn=lsn, tx_id=9)
    return keyed_event(op, before, after, source, Coordinates("shop.public.things", 2, offset))


rows = st.fixed_dictionaries({"id": st.integers(1, 10**9), "label": st.text(max_size=20)})
changes = st.one_of(
    st.builds(
        lambda r, lsn, off: event("c", None, r, lsn, off),
        rows,
        st.integers(0, 2**40),
        st.integers(0, 10**6),
    ),
    st.builds(
        lambda a, b, lsn, off: event("u", a, {**b, "id": a["id"]}, lsn, off),
        rows,
        rows,
        st.integers(0, 2**40),
        st.integers(0, 10**6),
    ),
)


@settings(max_examples=200)
@given(changes)
def test_translation_is_deterministic(change: ChangeEvent) -> None:
    """Same input, same events, same ids, every time."""
    first = stamp(things_v1(Change(change)), change, "things", 1)
    second = stamp(things_v1(Change(change)), change, "things", 1)
    assert first == second
    assert all(e.lineage.event_id for e in first)


@settings(max_examples=100)
@given(changes)
def test_a_fixed_version_supersedes_with_the_same_ids(change: ChangeEvent) -> None:
    """v1 and v2 of one translator give the same id for the same output slot."""
    v1 = stamp(things_v1(Change(change)), change, "things", 1)
    v2 = stamp(things_v2(Change(change)), change, "things", 2, replay=True)
    assert [e.lineage.event_id for e in v1] == [e.lineage.event_id for e in v2]
    assert all(e.lineage.translator == "things@2" and e.lineage.replay for e in v2)


def test_lineage_carries_source_coordinates_and_position() -> None:
    change = event("c", None, {"id": 1, "label": "a"}, lsn=(1 << 32) + 16, offset=41)
    (created,) = stamp(things_v1(Change(change)), change, "things", 1)
    lineage = created.lineage
    assert (lineage.source_topic, lineage.source_partition, lineage.source_offset) == (
        "shop.public.things",
        2,
        41,
    )
    assert lineage.source_position == "1/10"
    assert lineage.tx_id == "9"
    assert lineage.translator == "things@1"
    assert lineage.replay is False


def test_different_changes_and_rows_get_different_ids() -> None:
    a = event("c", None, {"id": 1, "label": "a"}, lsn=100, offset=1)
    b = event("c", None, {"id": 2, "label": "a"}, lsn=100, offset=2)  # one snapshot position
    c = event("c", None, {"id": 1, "label": "a"}, lsn=101, offset=3)
    ids = {stamp(things_v1(Change(x)), x, "things", 1)[0].lineage.event_id for x in (a, b, c)}
    assert len(ids) == 3


_KEY_VALUES = st.one_of(
    st.integers(),
    st.text(),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.decimals(allow_nan=False, allow_infinity=False),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(min_size=1), _KEY_VALUES, max_size=4))
def test_the_fast_canonical_key_is_the_encoders_text(key: dict[str, object]) -> None:
    """Event ids hash the key's canonical JSON: the fast path gives the very same text."""
    assert canonical_key(key) == _canonical(dict(key))


_SERIALIZER = BusinessSerializer(
    SchemaRegistryClient.new_client({"url": f"mock://lineage-{uuid.uuid4().hex}"})
)


@settings(max_examples=200, deadline=None)
@given(
    change=changes,
    partition=st.one_of(st.none(), st.integers(0, 2**31 - 1)),
    offset=st.one_of(st.none(), st.integers(0, 2**62)),
    tx_id=st.one_of(st.none(), st.integers(0, 2**40)),
    no_position=st.booleans(),
    replay=st.booleans(),
)
def test_lineage_on_the_wire_is_the_stamped_lineage(
    change: ChangeEvent,
    partition: int | None,
    offset: int | None,
    tx_id: int | None,
    no_position: bool,
    replay: bool,
) -> None:
    """The pipeline's Stamper gives the ids, bytes and headers that stamping the events
    with a Lineage and serializing them gives (the serializer's first call per topic
    goes through confluent's AvroSerializer, the later ones through the generated
    writer: both are held to it)."""
    source = change.source
    position = None if no_position else PgPosition(lsn=12345, tx_id=tx_id)
    change = replace(
        change,
        source=replace(source, position=position),
        coordinates=Coordinates(change.coordinates.topic, partition, offset),
    )
    events = things_v1(Change(change))
    stamped = stamp(events, change, "things", 1, replay=replay)
    where = change.coordinates
    stamper = Stamper("things", 1, where.topic, where.partition, replay)
    origin = origin_of(change)
    for ordinal, (event, reference) in enumerate(zip(events, stamped, strict=True)):
        contract = contract_name(type(event))
        event_id, lineage, headers = stamper.wire(origin, contract, ordinal)
        assert event_id == reference.lineage.event_id
        assert headers == lineage_headers(reference.lineage)
        expected = _SERIALIZER(reference)
        assert _SERIALIZER(event, None, lineage) == expected
        assert _SERIALIZER(event, None, lineage) == expected
        assert read_lineage(lineage) == reference.lineage


def test_reads_of_an_unchanged_row_have_one_id_across_snapshots() -> None:
    """Two snapshots read the same row at other positions and offsets: the same event
    ids, each lineage naming where it was read; a changed row or another row reads
    under new ids, and an insert's ids stay its position's."""
    row = {"id": 1, "label": "a"}
    first = event("r", None, row, lsn=100, offset=5)
    again = event("r", None, dict(row), lsn=9000, offset=77)
    ids = [e.lineage.event_id for e in stamp(things_v1(Change(first)), first, "things", 1)]
    (stamped,) = stamp(things_v1(Change(again)), again, "things", 1)
    assert [stamped.lineage.event_id] == ids
    assert (stamped.lineage.source_offset, stamped.lineage.source_position) == (77, "0/2328")
    assert origin_of(first).identity == origin_of(again).identity
    changed = event("r", None, {"id": 1, "label": "b"}, lsn=9000, offset=77)
    other = event("r", None, {"id": 2, "label": "a"}, lsn=9000, offset=77)
    inserts = [event("c", None, row, lsn, 5) for lsn in (100, 9000)]
    assert len({origin_of(e).identity for e in (first, changed, other, *inserts)}) == 5
