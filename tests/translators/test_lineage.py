"""Deterministic event ids and lineage: same change, same events, same ids."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.change import Change
from contracts.envelope import ChangeEvent, PgPosition, Source
from contracts.exceptions import Coordinates
from tests.translators.sample import things_v1, things_v2
from translators.lineage import stamp


def event(
    op: str,
    before: dict[str, object] | None,
    after: dict[str, object] | None,
    lsn: int,
    offset: int,
) -> ChangeEvent:
    source = Source(
        connector="postgresql",
        name="shop",
        db="shop",
        schema="public",
        table="things",
        ts_ms=1,
        position=PgPosition(lsn=lsn, tx_id=9),
    )
    row = after or before or {}
    return ChangeEvent(
        op=op,
        source=source,
        before=before,
        after=after,  # type: ignore[arg-type]
        key={"id": row["id"]},
        coordinates=Coordinates("shop.public.things", 2, offset),
    )


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
