"""Widening a transaction replay's ranges (pure): every record of a selected transaction
lies in the widened ranges, however far back or forward it sits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bizevents.replay.txwiden import Probe, Scan, widen

Log = dict[tuple[str, int], list[int | None]]  # partition -> commit position per offset


def _probe(log: Log) -> Probe:
    def probe(topic: str, partition: int, start: int, end: int) -> list[tuple[int, int | None]]:
        return [(o, log[(topic, partition)][o]) for o in range(start, end)]

    return probe


def _scan(log: Log, spans: dict[tuple[str, int], tuple[int, int]]) -> list[Scan]:
    scans = []
    for where, (s, e) in spans.items():
        found = [(o, log[where][o]) for o in range(s, e)]
        positions = [p for _, p in found if p is not None]
        scans.append(
            Scan(
                *where,
                first=found[0][0] if found else None,
                last=found[-1][0] + 1 if found else None,
                oldest=min(positions, default=None),
                newest=max(positions, default=None),
            )
        )
    return scans


@st.composite
def logs(draw: st.DrawFn) -> Log:
    """Transactions 1..n in commit order, each spread over some of three partitions;
    snapshot reads (None) anywhere."""
    n = draw(st.integers(1, 40))
    log: Log = {("t", p): [] for p in range(3)}
    for tx in range(1, n + 1):
        for p in draw(st.sets(st.integers(0, 2), min_size=1)):
            for _ in range(draw(st.integers(1, 3))):
                log[("t", p)].append(tx)
            if draw(st.booleans()):
                log[("t", p)].append(None)
    return log


@given(logs(), st.integers(0, 60), st.integers(0, 5))
@settings(max_examples=200, deadline=None)
def test_every_selected_transaction_is_whole(log: Log, start: int, width: int) -> None:
    marks = {where: (0, len(records)) for where, records in log.items()}
    spans = {
        where: (min(start, high), min(start + width, high)) for where, (_, high) in marks.items()
    }
    widened = widen(marks, spans, _scan(log, spans), _probe(log))
    selected = {p for where, (s, e) in spans.items() for p in log[where][s:e] if p is not None}
    for where, records in log.items():
        first, last = widened.get(where, (0, 0))
        for offset, tx in enumerate(records):
            if tx in selected:
                assert first <= offset < last, (where, offset, tx, widened)
        assert first <= spans[where][0] or spans[where][0] == spans[where][1]


def test_reads_no_more_than_the_neighbouring_transactions() -> None:
    """Far from the ends, a range grows to its transactions' edges and stops at the
    first record of an older or newer one (windows of PROBE_WINDOW offsets)."""
    log: Log = {("t", 0): [tx for tx in range(1, 5001) for _ in range(2)]}
    spans = {("t", 0): (5001, 5002)}  # the second record of transaction 2501
    widened = widen({("t", 0): (0, 10000)}, spans, _scan(log, spans), _probe(log))
    assert widened == {("t", 0): (5000, 5002)}


def test_ids_without_a_commit_position_read_whole_partitions() -> None:
    marks = {("t", 0): (3, 90), ("t", 1): (0, 7)}
    scans = [Scan("t", 0, first=10, last=11, unpositioned=True)]
    assert widen(marks, {}, scans, _probe({})) == marks


def test_nothing_selected_reads_nothing() -> None:
    assert widen({("t", 0): (0, 9)}, {("t", 0): (4, 4)}, [Scan("t", 0)], _probe({})) == {}
