"""Compaction semantics: the reference, the index, and the Spark path agree."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bizevents.devstack import Endpoints
from bizevents.replay import KeyIndex, Output, ReplayJob, ReplaySpec, compact
from bizevents.replay.compaction import compact_in_memory
from tests.replay.conftest import stack_settings
from tests.replay.store_story import create_topic


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None


# a change is (key, value or None for a delete); few keys, so keys repeat often
changes = st.lists(
    st.tuples(
        st.one_of(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), st.none()),
        st.one_of(st.binary(min_size=1, max_size=4), st.none()),
    ),
    max_size=60,
)


def _records(items: list[tuple[bytes | None, bytes | None]]) -> list[Rec]:
    return [Rec(i, k, v) for i, (k, v) in enumerate(items)]


def test_reference_keeps_latest_and_drops_tombstoned_keys() -> None:
    """a=1, b=1, a=2, b deleted, c=1 → a=2, c=1, in offset order."""
    recs = _records([(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", None), (b"c", b"1")])
    assert [(r.key, r.value) for r in compact(recs)] == [(b"a", b"2"), (b"c", b"1")]


def test_unkeyed_records_all_survive() -> None:
    """Records without a key cannot be compacted; their tombstones mean nothing."""
    recs = _records([(None, b"1"), (None, b"2"), (None, None)])
    assert [r.value for r in compact(recs)] == [b"1", b"2"]


@given(changes, st.integers(min_value=1, max_value=20))
def test_sliced_index_agrees_with_the_reference(
    items: list[tuple[bytes | None, bytes | None]], size: int
) -> None:
    """Indexes of slices merged in any order pick the same survivors as the reference."""
    recs = _records(items)
    parts = [recs[at : at + size] for at in range(0, len(recs), size)]
    merged = KeyIndex()
    for part in reversed(parts):
        merged.merge(KeyIndex().add_all(part))
    assert merged.survivors() == [r.offset for r in compact(recs)]
    assert compact_in_memory(recs) == compact(recs)


@pytest.mark.integration
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(items=changes.filter(bool), slice_size=st.integers(min_value=1, max_value=25))
def test_spark_path_agrees_with_the_reference(
    bizevents_stack: Endpoints,
    tmp_path: Path,
    spark: Any,
    items: list[tuple[bytes | None, bytes | None]],
    slice_size: int,
) -> None:
    """Produced to the broker and read by Spark tasks (sliced or not): same survivors."""
    topic = f"test.compaction.{uuid.uuid4().hex[:10]}"
    create_topic(bizevents_stack.bootstrap_servers, topic, 1)
    producer = Producer({"bootstrap.servers": bizevents_stack.bootstrap_servers})
    for key, value in items:
        producer.produce(topic, value, key, partition=0)
    assert producer.flush(30) == 0
    spec = ReplaySpec(
        topic,
        "orders@2",
        Output("path", str(tmp_path / "out")),
        compact=True,
        slice_size=slice_size,
    )
    settings = stack_settings(bizevents_stack, tmp_path / "state")
    job = ReplayJob(spec, settings.runtime(), spark=spark)
    chosen = sorted(o for offsets in job.selection().values() for o in offsets)
    assert chosen == [r.offset for r in compact(_records(items))]
