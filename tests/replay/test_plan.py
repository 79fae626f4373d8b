"""Planning pieces without a broker: arguments, topic globs, slices, bounds, run state, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from bizevents.replay import (
    Bound,
    Output,
    Range,
    ReplayConfigError,
    ReplaySpec,
    RunStateError,
    Span,
    slices,
)
from bizevents.replay.plan import bounded, matching_topics
from bizevents.replay.session import task_error
from bizevents.replay.state import RunState


@pytest.mark.parametrize(
    ("text", "kind", "topic"),
    [
        ("topic", "contract", "store.orders.OrderPlaced"),
        ("topic:fixes", "topic", "fixes"),
        ("replay", "replay", "store.orders.OrderPlaced.replay"),
        ("path:/tmp/x", "path", "store.orders.OrderPlaced"),
    ],
)
def test_outputs(text: str, kind: str, topic: str) -> None:
    """Each --to form, and where an OrderPlaced goes with it."""
    output = Output.parse(text)
    assert output.kind == kind
    assert output.topic_for("store.orders.OrderPlaced") == topic
    assert str(output) == text


@pytest.mark.parametrize("text", ["kafka", "topic:", "path:", "replay:x"])
def test_bad_outputs_are_refused(text: str) -> None:
    with pytest.raises(ReplayConfigError, match="is not an output"):
        Output.parse(text)


def test_file_formats() -> None:
    """--format picks the files of path:DIR (Avro by default); a rerun must repeat it."""
    assert Output.parse("path:/x").file_format == "avro"
    parquet = Output.parse("path:/x", "parquet")
    assert (parquet.kind, parquet.target, parquet.file_format) == ("path", "/x", "parquet")
    assert str(Output.parse("path:/x", "avro")) == "path:/x"  # run states of old runs resume
    assert str(parquet) == "path:/x --format parquet"
    avro_run = ReplaySpec("t", "orders@2", Output.parse("path:/x"), run_id="r")
    parquet_run = ReplaySpec("t", "orders@2", parquet, run_id="r")
    assert avro_run.fingerprint() != parquet_run.fingerprint()
    with pytest.raises(ReplayConfigError, match="needs --to path:DIR"):
        Output.parse("replay", "parquet")
    with pytest.raises(ReplayConfigError, match="not a file format"):
        Output.parse("path:/x", "csv")


def test_bounds() -> None:
    """Offsets, ts:millis and ISO dates (naive ones are UTC)."""
    assert Bound.parse("42", "--from") == Bound(offset=42)
    assert Bound.parse("ts:1700000000000", "--from") == Bound(timestamp_ms=1_700_000_000_000)
    assert Bound.parse("2023-11-14T22:13:20Z", "--from").timestamp_ms == 1_700_000_000_000
    assert Bound.parse("2023-11-14T22:13:20", "--from").timestamp_ms == 1_700_000_000_000
    with pytest.raises(ReplayConfigError, match="neither an offset"):
        Bound.parse("yesterday", "--until")


def test_spec_checks() -> None:
    """A run needs an output or a diff, not both; a run id names a folder."""
    with pytest.raises(ReplayConfigError, match="--to is required"):
        ReplaySpec("t", "orders@2", None)
    with pytest.raises(ReplayConfigError, match="publishes nothing"):
        ReplaySpec("t", "orders@2", Output("replay"), diff_against="orders@1")
    with pytest.raises(ReplayConfigError, match="names a folder"):
        ReplaySpec("t", "orders@2", Output("replay"), run_id="../x")
    assert ReplaySpec("t", "orders@2", Output("replay")).run_id.startswith("replay-")


def test_topic_globs() -> None:
    topics = ["shop.store.orders", "shop.store.customers", "other.x", "__consumer_offsets"]
    assert matching_topics("shop.store.*", topics) == ["shop.store.customers", "shop.store.orders"]
    assert matching_topics("*", topics) == sorted(topics[:3])
    assert matching_topics("other.x, shop.store.orders", topics) == ["other.x", "shop.store.orders"]
    assert matching_topics("__*", topics) == ["__consumer_offsets"]


def test_slices_cover_each_span_exactly() -> None:
    """Slices are even, contiguous, and empty spans plan nothing."""
    ranges = slices([Span("t", 0, 10, 110), Span("t", 1, 5, 5), Span("t", 2, 0, 3)], 30)
    first = [r for r in ranges if r.partition == 0]
    assert [(r.start, r.end) for r in first] == [(10, 35), (35, 60), (60, 85), (85, 110)]
    assert {r.slices for r in first} == {4}
    assert [r.partition for r in ranges].count(1) == 0
    assert [(r.start, r.end, r.slices) for r in ranges if r.partition == 2] == [(0, 3, 1)]


def test_offset_bounds_narrow_the_watermarks() -> None:
    assert bounded(5, 100, Bound(offset=10), Bound(offset=50)) == (10, 50)
    assert bounded(5, 100, Bound(offset=0), Bound(offset=500)) == (5, 100)
    assert bounded(5, 100, Bound(offset=200), None) == (100, 100)  # empty, at the end
    assert bounded(5, 100, Bound(offset=200), Bound(offset=300)) == (100, 100)
    assert bounded(5, 100, Bound(timestamp_ms=1), None) == (5, 100)  # filtered in tasks


def test_run_state_resumes_and_refuses_other_arguments(tmp_path: Path) -> None:
    """The plan and finished ranges survive; a rerun with other arguments is refused."""
    spec = ReplaySpec("t", "orders@2", Output("replay"), run_id="r1")
    ranges = [Range("t", 0, 0, 10), Range("t", 1, 0, 10)]
    state = RunState.create(tmp_path, "r1", spec.fingerprint(), ranges)
    state.mark_done(ranges[0].id, {"read": 10})
    again = RunState.load(tmp_path, "r1")
    assert again is not None
    assert again.ranges == ranges and again.pending() == [ranges[1]]
    again.check(spec.fingerprint())
    other = ReplaySpec("t", "orders@1", Output("replay"), run_id="r1")
    with pytest.raises(RunStateError, match="translator"):
        again.check(other.fingerprint())


def test_task_error_finds_the_python_exception() -> None:
    text = (
        "An error occurred while calling o1.collect.\n"
        "org.apache.spark.SparkException: Job aborted\n"
        "Traceback (most recent call last):\n  File x\n"
        "bizevents.plumbing.errors.TransientError: cannot read t/0/0-10: Broker: down\n"
        "\tat org.apache.spark.api.python.BasePythonRunner"
    )
    assert task_error(RuntimeError(text)) == "TransientError: cannot read t/0/0-10: Broker: down"
