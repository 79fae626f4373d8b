"""A version in the shadow of the live one, in the translation core: same input, one
decode, its events compared by id and written to the shadow topics, nothing of it in
what consumers read."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from bizevents import translator
from bizevents.contracts.business import BusinessEvent
from bizevents.contracts.change import Change
from bizevents.contracts.technical import AutoDecoder
from bizevents.translators.pipeline import Pipeline
from bizevents.translators.records import SHADOW_SUFFIX, SourceRecord
from tests.translators.sample import ThingCreated, ThingRenamed, things_v1, things_v2
from tests.translators.test_pipeline import envelope, fake_serializer, record

CREATED = ThingCreated.contract_fullname()


@translator(name="things", version=7, sources=["public.things"], emits=[ThingCreated, ThingRenamed])
def things_upper(change: Change) -> Iterable[BusinessEvent]:
    """Differs from things@1 on the label of a creation, raises on a label "boom"."""
    if change.is_create:
        if change.new("label") == "boom":
            raise ValueError("boom")
        yield ThingCreated(thing_id=change.new("id"), label=change.new("label").upper())
    elif change.is_update and change.changed("label"):
        yield ThingRenamed(
            thing_id=change.new("id"), old_label=change.old("label"), new_label=change.new("label")
        )
        yield ThingCreated(thing_id=change.new("id"), label="again")


@translator(name="others", version=1, sources=["public.things"], emits=[ThingCreated])
def others(change: Change) -> Iterable[BusinessEvent]:
    return ()


def shadowed(output: bool = True) -> Pipeline:
    return Pipeline(
        [things_v1],
        AutoDecoder(),
        fake_serializer,
        shadows=[things_upper],
        shadow_output=output,
    )


def created(offset: int, thing: int, label: str) -> SourceRecord:
    return record(
        offset,
        envelope("c", None, {"id": thing, "label": label}, 100 + offset),
        f'{{"id": {thing}}}'.encode(),
    )


def test_shadow_events_are_compared_by_id_and_go_to_the_shadow_topic() -> None:
    result = shadowed().process(
        [
            created(1, 1, "a"),
            record(2, envelope("u", {"id": 1, "label": "a"}, {"id": 1, "label": "b"}, 102)),
            record(3, envelope("u", {"id": 1, "label": "b"}, {"id": 1, "label": "b"}, 103)),
        ]
    )
    live = [r for r in result.records if not r.topic.endswith(SHADOW_SUFFIX)]
    shadow = [r for r in result.records if r.topic.endswith(SHADOW_SUFFIX)]
    assert {r.translator for r in live} == {"things@1"}
    assert {r.translator for r in shadow} == {"things@7"}
    assert all(
        r.topic.removesuffix(SHADOW_SUFFIX)
        in {c.contract_topic() for c in (ThingCreated, ThingRenamed)}
        for r in shadow
    )
    # one id per event whatever the version: the creation's id is the same on both sides
    assert live[0].event_id == shadow[0].event_id
    comparison = result.shadows["things@7"]
    assert (comparison.live, comparison.shadow, comparison.changes) == ("things@1", "things@7", 3)
    renamed = ThingRenamed.contract_fullname()
    assert comparison.contracts[CREATED].differing == 1
    assert comparison.contracts[CREATED].fields == {"label": 1}
    assert comparison.contracts[CREATED].only_shadow == 1  # the update's extra event
    assert comparison.contracts[renamed].identical == 1
    assert comparison.samples[CREATED]["differing"][0]["shadow"]["label"] == "A"
    # the live outputs are what the live version alone gives
    alone = Pipeline([things_v1], AutoDecoder(), fake_serializer).process(
        [
            created(1, 1, "a"),
            record(2, envelope("u", {"id": 1, "label": "a"}, {"id": 1, "label": "b"}, 102)),
        ]
    )
    assert [(r.topic, r.key, r.value, r.event_id) for r in live] == [
        (r.topic, r.key, r.value, r.event_id) for r in alone.records
    ]


def test_counting_only_writes_nothing_of_the_shadow() -> None:
    result = shadowed(output=False).process([created(1, 1, "a"), created(2, 2, "b")])
    assert {r.translator for r in result.records} == {"things@1"}
    assert result.shadows["things@7"].contracts[CREATED].differing == 2


def test_a_failing_shadow_is_counted_and_never_dead_lettered() -> None:
    result = shadowed().process([created(1, 1, "boom"), created(2, 2, "ok")])
    assert not any(r.dead_letter for r in result.records)
    comparison = result.shadows["things@7"]
    assert comparison.shadow_failures == 1 and comparison.live_failures == 0
    assert comparison.changes == 2


def test_a_shadow_needs_one_live_version_of_its_name() -> None:
    with pytest.raises(ValueError, match="things@7 shadows no live version of things"):
        Pipeline([others], AutoDecoder(), fake_serializer, shadows=[things_upper])
    with pytest.raises(ValueError, match="things@1 shadows no live version of things"):
        Pipeline([things_v1], AutoDecoder(), fake_serializer, shadows=[things_v1])


#: things@2 again as version 8
things_skipping = translator(
    name="things",
    version=8,
    sources=["public.things"],
    emits=[ThingCreated, ThingRenamed],
    snapshots="skip",
)(things_v2.func)


def test_a_snapshot_both_versions_skip_does_not_move_the_gate() -> None:
    """A snapshot of a table both versions skip: its reads are counted as read, not as
    compared, and leave ``--min-changes`` where one creation put it."""
    from bizevents.translators.shadow import PromotionGate
    from tests.translators.sample import things_v2

    pipeline = Pipeline([things_v2], AutoDecoder(), fake_serializer, shadows=[things_skipping])
    reads = [
        record(n, envelope("r", None, {"id": n, "label": "x"}, 500), f'{{"id": {n}}}'.encode())
        for n in range(1, 41)
    ]
    comparison = pipeline.process([created(0, 99, "a"), *reads]).shadows["things@8"]
    assert (comparison.changes, comparison.translated) == (41, 1)
    (failure,) = PromotionGate(min_changes=10).failures(comparison)
    assert "compared over 1 changes, fewer than the 10" in failure
    assert "of 41 read" in failure
