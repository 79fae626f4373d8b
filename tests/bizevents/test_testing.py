"""The test kit: one-line changes, the live core in-process, golden files."""

from __future__ import annotations

import re
import traceback
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import pytest

from bizevents import BusinessEvent, Change, translator
from bizevents.contracts.envelope import PgPosition
from bizevents.contracts.serde import schema_id_of
from bizevents.testing import GOLDEN_ENV, assert_matches_golden, change, run
from bizevents.translators.exceptions import PluginError
from bizevents.translators.lineage import change_identity, event_id
from tests.translators.sample import ThingCreated, ThingRenamed, things_v1, things_v2

ROW = {"id": 1, "label": "a"}


def test_change_has_a_realistic_source() -> None:
    """Defaults fill the source block; a snapshot read is marked as one."""
    made = change("public.things", "r", after=ROW, position=77, txid=5)
    source = made.event.source
    assert (source.connector, source.qualified_table, source.snapshot) == (
        "postgresql",
        "public.things",
        True,
    )
    assert source.position == PgPosition(lsn=77, tx_id=5)
    assert made.event.key == {"id": 1}
    assert made.is_create and made.is_snapshot


@pytest.mark.parametrize(
    ("table", "op", "rows", "message"),
    [
        ("things", "c", {"after": ROW}, "must be schema.table"),
        ("public.things", "x", {"after": ROW}, "op 'x' must be one of"),
        ("public.things", "c", {}, "needs after="),
        ("public.things", "d", {"after": ROW}, "has no after row"),
        ("public.things", "c", {"before": ROW, "after": ROW}, "has no before row"),
    ],
    ids=["no-schema", "bad-op", "insert-without-row", "delete-with-after", "insert-with-before"],
)
def test_malformed_change_is_refused_with_a_sentence(
    table: str, op: str, rows: dict[str, dict[str, object]], message: str
) -> None:
    """A change that capture could never write is refused where it is built."""
    with pytest.raises(ValueError, match=message):
        change(table, op, **rows)  # type: ignore[arg-type]


def test_run_gives_the_events_their_ids_lineage_and_wire_bytes() -> None:
    """Ids are the live path's deterministic ids; bytes are Confluent-framed Avro."""
    made = change("public.things", "c", after=ROW, position=100, txid=3)
    result = run(things_v1, made)
    (emitted,) = result.emitted
    assert result.payloads == [ThingCreated(thing_id=1, label="a")]
    assert emitted.topic == ThingCreated.contract_topic()
    assert emitted.value[0] == 0 and schema_id_of(emitted.value) > 0
    lineage = emitted.lineage
    assert (lineage.translator, lineage.source_topic, lineage.source_offset) == (
        "things@1",
        "test.public.things",
        0,
    )
    assert (lineage.source_position, lineage.tx_id, lineage.replay) == ("0/64", "3", False)
    identity = change_identity(made.event)
    assert emitted.event_id == event_id(identity, "things", ThingCreated.contract_fullname(), 0)
    assert result.event_ids == [emitted.event_id]


def test_run_numbers_changes_that_have_no_position() -> None:
    """Two updates of one row get distinct positions, so distinct event ids."""
    renamed = [
        change("public.things", "u", before=ROW, after={**ROW, "label": "b"}),
        change("public.things", "u", before=ROW, after={**ROW, "label": "c"}),
    ]
    result = run(things_v1, renamed)
    assert [type(e) for e in result.events] == [ThingRenamed, ThingRenamed]
    assert len(set(result.event_ids)) == 2
    assert result.of(1) == [result.events[1]]


def test_skip_policies_and_drops_are_the_live_paths() -> None:
    """things@2 skips snapshot reads; an irrelevant update is dropped and counted."""
    result = run(
        things_v2,
        [
            change("public.things", "r", after=ROW),
            change("public.things", "u", before=ROW, after=ROW),
        ],
    )
    assert result.events == []
    assert result.counts["things@2"].dropped == 2


def test_values_keep_their_types_through_the_envelope() -> None:
    """Decimals keep their scale, timestamps stay aware, UUIDs stay UUIDs."""
    seen: list[Change] = []

    @translator(name="spy", version=1, sources=["public.things"], emits=[ThingCreated])
    def spy(item: Change) -> None:
        seen.append(item)

    row = {
        "id": 1,
        "price": Decimal("9.90"),
        "at": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        "ref": UUID(int=7),
        "note": None,
    }
    run(spy, change("public.things", "c", after=row))
    assert dict(seen[0].event.after or {}) == row
    assert str(seen[0].new("price")) == "9.90"


def test_a_dead_letter_fails_the_run_with_its_reason() -> None:
    @translator(name="boom", version=1, sources=["public.things"], emits=[ThingCreated])
    def boom(item: Change) -> None:
        raise RuntimeError("kaput")

    made = change("public.things", "c", after=ROW)
    at = f"(at {__file__}:{boom.func.__code__.co_firstlineno + 2})"  # the raise
    with pytest.raises(
        AssertionError,
        match=rf"boom@1 dead-lettered change #0 .* RuntimeError: kaput {re.escape(at)}",
    ) as failed:
        run(boom, made)
    # the translator's own exception is the failure's cause: pytest shows its traceback
    cause = failed.value.__cause__
    assert isinstance(cause, RuntimeError) and str(cause) == "kaput"
    assert cause.__traceback__ is not None
    frames = [f.filename for f in traceback.extract_tb(cause.__traceback__)]
    assert frames[-1] == __file__
    (dead,) = run(boom, made, allow_dead_letters=True).dead_letters
    assert (dead.stage, dead.reason, dead.translator) == (
        "translate",
        f"RuntimeError: kaput {at}",
        "boom@1",
    )


def test_a_failure_in_a_library_names_the_translators_line() -> None:
    """pydantic refuses the event deep in its own code: the reason names the line of the
    translator that built it."""

    @translator(name="wrong", version=1, sources=["public.things"], emits=[ThingCreated])
    def wrong(item: Change) -> BusinessEvent:
        return ThingCreated(thing_id="not a number", label="x")

    (dead,) = run(
        wrong, change("public.things", "c", after=ROW), allow_dead_letters=True
    ).dead_letters
    assert dead.reason.startswith("ValidationError: ")
    assert dead.reason.endswith(f"(at {__file__}:{wrong.func.__code__.co_firstlineno + 2})")


def test_a_name_and_version_given_twice_is_refused_with_the_clis_sentence() -> None:
    @translator(name="twice", version=1, sources=["public.things"], emits=[ThingCreated])
    def one(item: Change) -> None:
        return None

    @translator(name="twice", version=1, sources=["public.things"], emits=[ThingCreated])
    def other(item: Change) -> None:
        return None

    with pytest.raises(PluginError, match=r"translator twice@1 is registered twice: by .*one"):
        run([one, other], change("public.things", "c", after=ROW))


def test_an_event_that_breaks_its_contract_is_a_contract_dead_letter() -> None:
    @translator(name="bad", version=1, sources=["public.things"], emits=[ThingCreated])
    def bad(item: Change) -> BusinessEvent:
        return ThingCreated.model_construct(thing_id="not a number", label="a")

    result = run(bad, change("public.things", "c", after=ROW), allow_dead_letters=True)
    assert [d.stage for d in result.dead_letters] == ["contract"]


def test_golden_file_is_written_on_request_then_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Missing: a sentence; with the variable set: written; differing: a unified diff."""
    golden = tmp_path / "things@1.json"
    story = [change("public.things", "c", after=ROW)]
    monkeypatch.delenv(GOLDEN_ENV, raising=False)
    with pytest.raises(AssertionError, match=f"does not exist; run the test with {GOLDEN_ENV}=1"):
        assert_matches_golden(things_v1, story, golden)
    monkeypatch.setenv(GOLDEN_ENV, "1")
    assert_matches_golden(things_v1, story, golden)
    monkeypatch.delenv(GOLDEN_ENV)
    assert_matches_golden(things_v1, story, golden)  # the same output matches
    other = [change("public.things", "c", after={**ROW, "label": "z"})]
    with pytest.raises(AssertionError, match=r'(?s)differs from golden.*-\s+"label": "a"'):
        assert_matches_golden(things_v1, other, golden)
