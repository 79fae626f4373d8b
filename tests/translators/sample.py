"""A tiny domain for translator tests: one table, two contracts, two versions."""

from __future__ import annotations

from collections.abc import Iterable

from bizevents import translator
from bizevents.contracts.business import BusinessEvent
from bizevents.contracts.change import Change


class ThingCreated(BusinessEvent):
    thing_id: int
    label: str

    class Meta:
        namespace = "test.things"


class ThingRenamed(BusinessEvent):
    thing_id: int
    old_label: str
    new_label: str

    class Meta:
        namespace = "test.things"


@translator(name="things", version=1, sources=["public.things"], emits=[ThingCreated, ThingRenamed])
def things_v1(change: Change) -> Iterable[BusinessEvent]:
    if change.is_create:
        yield ThingCreated(thing_id=change.new("id"), label=change.new("label"))
    elif change.is_update and change.changed("label"):
        yield ThingRenamed(
            thing_id=change.new("id"), old_label=change.old("label"), new_label=change.new("label")
        )


@translator(
    name="things",
    version=2,
    sources=["public.things"],
    emits=[ThingCreated, ThingRenamed],
    snapshots="skip",
)
def things_v2(change: Change) -> Iterable[BusinessEvent]:
    return things_v1.func(change) or ()


ALL = [things_v1, things_v2]
