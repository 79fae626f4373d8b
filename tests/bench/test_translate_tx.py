"""The pure parts of the transaction bench (bench/translate_tx.py): the workload's
transactions and placement, END's counts, and the figures it prints."""

from __future__ import annotations

import pytest

from bench.translate_tx import (
    CPU_TARGET,
    Figures,
    Span,
    across,
    against,
    crossing,
    orders_in_transactions,
    partition_counts,
    per_100k,
    placement,
    quiet,
    steady,
    summary,
)
from bizevents.contracts.technical.routing import partition_for, routing_key
from bizevents.contracts.technical.transaction import TransactionRecord


def test_every_order_once_one_or_two_per_transaction() -> None:
    """Order ids 1..n each in one transaction, one order and two alternately."""
    groups = orders_in_transactions(10)
    assert groups == [(1,), (2, 3), (4,), (5, 6), (7,), (8, 9), (10,)]
    assert [o for g in groups for o in g] == list(range(1, 11))


@pytest.mark.parametrize("partitions", [4, 8])
def test_orders_spread_and_a_third_across(partitions: int) -> None:
    """Every partition gets orders, and at least a third of the transactions place
    orders on several partitions (the exchange is measured, not bypassed)."""
    groups = orders_in_transactions(3_000)
    used = {placement(o, partitions) for g in groups for o in g}
    crossed = sum(len({placement(o, partitions) for o in g}) > 1 for g in groups)
    assert used == set(range(partitions))
    assert crossed / len(groups) >= 1 / 3


def test_placement_is_captures_routing_by_order_id() -> None:
    """An order's changes go where a capture routing by business key puts them."""
    assert [placement(o, 8) for o in (1, 2, 77)] == [
        partition_for(routing_key([o]), 8) for o in (1, 2, 77)
    ]


def test_partition_counts_per_table_and_partition() -> None:
    changes = [
        ("store.orders", 2),
        ("store.order_items", 2),
        ("store.order_items", 0),
        ("store.order_items", 2),
        ("store.orders", 2),
    ]
    assert partition_counts(changes) == (
        ("store.order_items", 0, 1),
        ("store.order_items", 2, 2),
        ("store.orders", 2, 2),
    )


def test_across_counts_transactions_on_several_partitions() -> None:
    def end(*partitions: int) -> TransactionRecord:
        counts = tuple(("store.orders", p, 1) for p in partitions)
        return TransactionRecord("END", "1:2", 0, len(partitions), None, counts)

    assert across([end(1), end(1, 3), end(2, 2), end(0, 1)]) == 0.5


def test_crossing_counts_only_the_tables_read_by_partition_number() -> None:
    """The fault suite's share: only transactions that wrote to the given tables count,
    and a transaction is across when those tables' changes sit on more than one
    partition number (an order on 1 with its items on 1 is not; a customer's change on
    another partition does not make it so)."""

    def end(*counts: tuple[str, int]) -> TransactionRecord:
        return TransactionRecord(
            "END", "1:2", 0, len(counts), None, tuple((t, p, 1) for t, p in counts)
        )

    ends = [
        end(("store.orders", 1), ("store.order_items", 1)),
        end(("store.orders", 1), ("store.order_items", 2)),
        end(("store.customers", 0)),
        end(("store.orders", 2), ("store.customers", 0)),
        end(("store.orders", 0), ("store.orders", 2)),
        TransactionRecord("END", "3:4", 0, 1, None, None),
    ]
    assert crossing(ends, ("store.orders", "store.order_items")) == (2, 4)
    assert crossing(ends) == (3, 5)


def test_cpu_per_100k_changes_per_role() -> None:
    span = Span({"workers": 4.0, "broker": 1.0, "reader": 0.5}, 10.0, 40_000)
    assert per_100k(span, 5) == {"workers": 2.0, "broker": 0.5, "reader": 0.25}


def test_against_a_ceiling_and_a_floor() -> None:
    assert against([1.2, 1.0, 1.4], 1.15, at_most=True) == (
        "1.20 (1.00-1.40); / 1.15 target: 1.04 (≤ 1.15: MISSED)"
    )
    assert against([1.7, 1.6, 1.65], 1.6) == "1.65 (1.60-1.70); / 1.6 target: 1.03 (≥ 1.6: met)"


def test_summary_ratios_pair_the_runs() -> None:
    """Two ÷ one per run (each pair measured in the same minutes), then the median."""

    def run(rate: float, workers_cpu: float) -> Figures:
        return Figures(rate, {"workers": workers_cpu, "broker": 1.0}, 1.5, 0)

    one = [run(40_000, 2.0), run(30_000, 3.0), run(35_000, 2.0)]
    two = [run(44_000, 2.2), run(30_000, 3.6), run(42_000, 2.2)]
    lines = summary(4, 2, "today's path", one, two)
    assert lines[0] == "4 technical partitions, today's path; median of 3 runs (min-max):"
    assert lines[-2] == (
        f"  2 ÷ 1, the workers' CPU-s per 100,000 changes: 1.10 (1.10-1.20); / {CPU_TARGET} "
        "target: 0.96 (≤ 1.15: met)"
    )
    assert lines[-1] == "  2 ÷ 1, changes/s: 1.10 (1.00-1.20); / 1.6 target: 0.69 (≥ 1.6: MISSED)"
    assert "workers 2.00 (2.00-3.00), broker 1.00 (1.00-1.00)" in lines[1]


def test_the_span_begins_once_the_group_settled() -> None:
    """Start-up, group join and the first rebalance (before the last sample ahead of
    the steady state) are left out; what the processes spent from there to the last
    event is in, over the distinct events appended since."""
    samples = [(100.0, {"workers": 0.5}), (101.0, {"workers": 2.0}), (102.0, {"workers": 2.1})]
    stamps = [100_500, 101_200, 101_900, 101_900, 109_000]
    ids = [b"a", b"b", b"c", b"c", b"d"]
    last = (110.0, {"workers": 6.0, "broker": 1.0})
    span = steady(samples, 101.5, last, stamps, ids)
    assert span == Span({"workers": 4.0, "broker": 1.0}, 9.0, 3, pytest.approx(0.2))


def test_the_work_before_the_first_event_is_in_the_span() -> None:
    """A worker catching up reads and assembles for seconds before it releases its
    first transaction: that CPU is part of the work of the events it then releases, so
    the span begins when the group settled, not at the first event (counted from the
    first event, one member's CPU per change read 40 % low)."""
    samples = [(100.0, {"workers": 0.5}), (101.0, {"workers": 1.5}), (104.0, {"workers": 4.5})]
    stamps = [104_000, 105_000, 106_000]
    ids = [b"a", b"b", b"c"]
    last = (106.0, {"workers": 6.5})
    span = steady(samples, 101.2, last, stamps, ids)
    assert span == Span({"workers": 5.0}, 5.0, 3, 3.0)


def test_the_span_ends_once_the_workers_go_quiet_after_the_last_event() -> None:
    """What the changes left the workers to do after the last event is theirs (one
    member reads the slices it forwarded to itself then): the span ends at the first
    sample after which they spend no more than idle workers do."""
    spent = iter([10.0, 10.4, 10.7, 10.72, 10.73, 10.74])
    clock = iter(range(100, 200))

    def sample() -> tuple[float, dict[str, float]]:
        return float(next(clock)) / 4, {"workers": next(spent), "broker": 1.0}

    # two workers are quiet at 2 x IDLE_CPU per second or less: 0.05 CPU-s in 0.25 s
    assert quiet(sample, 2, sleep=lambda _s: None) == (25.5, {"workers": 10.7, "broker": 1.0})


def test_workers_that_never_go_quiet_end_the_span_at_the_limit() -> None:
    busy = iter(float(i) for i in range(100))
    clock = iter(range(100))

    def sample() -> tuple[float, dict[str, float]]:
        return float(next(clock)), {"workers": next(busy)}

    assert quiet(sample, 1, step=1.0, limit=3.0, sleep=lambda _s: None)[0] == 3.0
