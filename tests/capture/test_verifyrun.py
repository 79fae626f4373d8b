"""``bizevents.capture.verifyrun``: the repair a report asks for, and the table side a
Spark comparison is given (pure parts; the runs are tests/capture/test_verify*.py)."""

from __future__ import annotations

from typing import Any

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.filters import Condition, parse_condition
from bizevents.capture.verify import Difference, Report, TableChunk, TopicRow, digest_of
from bizevents.capture.verifyrun import CapturedTable, Repair, _repair_of


class Reader:
    """The conditions a table reader writes, as text a test reads."""

    def range_condition(self, low: list[Any], high: list[Any]) -> Condition:
        return parse_condition(f"id BETWEEN {low[0]} AND {high[0]}")

    def keys_condition(self, keys: list[Any]) -> Condition:
        return parse_condition(f"id IN ({', '.join(str(dict(k)['id']) for k in keys)})")


def test_a_repair_snapshots_the_differing_chunks_and_the_extra_keys_after_their_tombstones() -> (
    None
):
    report = Report("s.t", "p.s.t")
    report.differing_chunks = [([1], [9])]
    report.differences = [
        Difference((("id", 4),), "missing", None),
        Difference((("id", 12),), "extra", "0/7", tombstone=(0, b"k12")),
    ]
    fix = _repair_of(report, Reader())  # type: ignore[arg-type]
    assert isinstance(fix, Repair)
    assert (fix.table, fix.topic, fix.tombstones) == ("s.t", "p.s.t", [(0, b"k12")])
    assert "BETWEEN 1 AND 9" in fix.condition and "IN (12)" in fix.condition


def test_nothing_to_repair_is_no_repair() -> None:
    assert _repair_of(Report("s.t", "p.s.t"), Reader()) is None  # type: ignore[arg-type]


def test_the_table_side_folds_what_spark_found_and_compares_it_as_the_local_verify() -> None:
    side = CapturedTable(
        {}, "postgresql://u@h/db", CaptureConfig(server="s", tables=("s.t",)), "s.t"
    )
    row = {"id": 1, "name": "a"}
    found = [
        ((("id", 1),), (0, 5, digest_of(row), "0/5", (1,), b"k1")),
        ((("id", 2),), (0, 6, None, "0/6", (2,), b"k2")),
    ]
    state = side.state_of(found)
    assert state.rows == {(("id", 1),): TopicRow(digest_of(row), "0/5", b"k1", 0)}
    assert state.gone == {(("id", 2),): "0/6"}
    chunk = TableChunk([((("id", 1),), [1], digest_of(row))], "lsn 0/9")
    report = side.compared("s.t", "p.s.t", 7, state, iter([chunk]))
    assert (report.table, report.records_read, report.differences) == ("s.t", 7, [])
