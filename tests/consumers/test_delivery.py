"""What a handler is handed: the event's lineage and whether a snapshot read it."""

from __future__ import annotations

from bizevents.consumers.delivery import Delivery, is_snapshot
from bizevents.contracts.business import HEADER_SNAPSHOT
from tests.envelopes import LINEAGE
from tests.translators.sample import ThingCreated


def test_a_delivery_names_its_event_by_the_lineage() -> None:
    lineage = LINEAGE.model_copy(update={"translator": "things@1", "replay": True})
    event = ThingCreated(thing_id=1, label="a", lineage=lineage)
    delivery = Delivery(event, b"1", "test.things.thing-created", 0, 5)
    assert delivery.lineage is lineage
    assert delivery.event_id == "e-1"
    assert delivery.replayed


def test_only_a_true_snapshot_header_marks_a_snapshot() -> None:
    assert is_snapshot([("x", b"1"), (HEADER_SNAPSHOT, b"true")])
    assert not is_snapshot([(HEADER_SNAPSHOT, b"false")])
    assert not is_snapshot([(HEADER_SNAPSHOT, None)])
    assert not is_snapshot(None)
