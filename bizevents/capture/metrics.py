"""Capture metrics: plain counters on the hot path, read by Prometheus at scrape time.

Nothing on the per-event path touches prometheus-client: the runner bumps integers in
:class:`CaptureStats` and a custom collector turns them into metric families when the
text endpoint is scraped. Per-table rates come from ``rate()`` over the counters.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bizevents.plumbing.metrics import serve_metrics as serve

__all__ = ["CaptureStats", "serve_metrics"]


@dataclass
class CaptureStats:
    """What a capture run has done so far (one per process)."""

    server: str
    slot: str
    events: dict[str, int] = field(default_factory=dict)  # table -> events produced
    snapshot_rows: dict[str, int] = field(default_factory=dict)
    snapshot_expected: dict[str, int] = field(default_factory=dict)
    snapshot_done: bool = False
    acknowledged_lsn: int = 0
    received_lsn: int = 0
    lag_bytes: int | None = None
    in_flight: int = 0
    reconnects: int = 0
    backpressure_pauses: int = 0
    #: Changes that could not be converted, per table and what became of them
    #: (``dead-letter``, ``skip``).
    conversion_errors: dict[tuple[str, str], int] = field(default_factory=dict)
    #: New value schemas registered for a type change no Relation message carried.
    schema_refreshes: int = 0
    #: Signals refused (a table not captured, a condition that does not parse, ...).
    signals_refused: int = 0
    #: Rows written by the incremental snapshot under way, per table.
    incremental_rows: dict[str, int] = field(default_factory=dict)
    #: Incremental snapshots queued or running.
    incremental_snapshots: int = 0
    #: Capture quarantine (docs/parking.md), per table: keys parked now (restored at
    #: start, then as keys park and unpark), changes re-driven to the technical topic,
    #: keys discarded. The changes parked are ``conversion_errors`` ``park`` and
    #: ``parked``.
    parked_keys: dict[str, int] = field(default_factory=dict)
    redriven: dict[str, int] = field(default_factory=dict)
    discarded_keys: dict[str, int] = field(default_factory=dict)

    def parked(self) -> dict[str, int]:
        """Changes parked per table: those that parked their key and those behind them."""
        out: dict[str, int] = {}
        for (table, handling), count in list(self.conversion_errors.items()):
            if handling in ("park", "parked"):
                out[table] = out.get(table, 0) + count
        return out


class _Collector(Collector):
    def __init__(self, stats: CaptureStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        labels = ["server", "slot"]
        base = [s.server, s.slot]
        yield _per_table(
            CounterMetricFamily,
            "bizevents_capture_events",
            "Change events produced, per table",
            labels,
            base,
            s.events,
        )
        yield _per_table(
            GaugeMetricFamily,
            "bizevents_capture_snapshot_rows",
            "Rows read by the snapshot, per table",
            labels,
            base,
            s.snapshot_rows,
        )
        yield _per_table(
            GaugeMetricFamily,
            "bizevents_capture_snapshot_rows_expected",
            "Rows in the snapshot, per table",
            labels,
            base,
            s.snapshot_expected,
        )
        yield _per_table(
            GaugeMetricFamily,
            "bizevents_capture_incremental_rows",
            "Rows written by the incremental snapshot of a table (the latest one)",
            labels,
            base,
            s.incremental_rows,
        )
        failed = CounterMetricFamily(
            "bizevents_capture_conversion_errors",
            "Changes whose values could not be converted, per table and handling",
            labels=[*labels, "table", "handling"],
        )
        for (table, handling), count in sorted(s.conversion_errors.items()):
            failed.add_metric([*base, table, handling], count)
        yield failed
        yield from _parking(s, labels, base)
        yield _single(
            CounterMetricFamily,
            "bizevents_capture_schema_refreshes",
            "Value schemas re-registered for a type change (a new enum label)",
            labels,
            base,
            s.schema_refreshes,
        )
        simple: list[tuple[str, str, Any]] = [
            (
                "bizevents_capture_snapshot_done",
                "1 once the initial snapshot is in Kafka",
                int(s.snapshot_done),
            ),
            (
                "bizevents_capture_acknowledged_lsn",
                "Highest LSN confirmed to the slot (all events up to it acknowledged)",
                s.acknowledged_lsn,
            ),
            ("bizevents_capture_received_lsn", "Highest LSN read from the slot", s.received_lsn),
            ("bizevents_capture_in_flight", "Events produced, not yet acknowledged", s.in_flight),
            ("bizevents_capture_reconnects", "Reconnections to the database", s.reconnects),
            (
                "bizevents_capture_backpressure_pauses",
                "Times reading the slot paused for Kafka",
                s.backpressure_pauses,
            ),
            (
                "bizevents_capture_incremental_snapshots",
                "Incremental snapshots queued or running",
                s.incremental_snapshots,
            ),
            (
                "bizevents_capture_signals_refused",
                "Signals refused with a sentence (bad table, condition, duplicate)",
                s.signals_refused,
            ),
        ]
        for name, doc, value in simple:
            yield _single(GaugeMetricFamily, name, doc, labels, base, value)
        if s.lag_bytes is not None:
            yield _single(
                GaugeMetricFamily,
                "bizevents_capture_lag_bytes",
                "pg_current_wal_lsn() - the slot's confirmed_flush_lsn",
                labels,
                base,
                s.lag_bytes,
            )


def _single(
    kind: type[CounterMetricFamily] | type[GaugeMetricFamily],
    name: str,
    doc: str,
    labels: list[str],
    base: list[str],
    value: float,
) -> Metric:
    """A family with the one series ``base``."""
    family = kind(name, doc, labels=labels)
    family.add_metric(base, value)
    return family


def _per_table(
    kind: type[CounterMetricFamily] | type[GaugeMetricFamily],
    name: str,
    doc: str,
    labels: list[str],
    base: list[str],
    counts: dict[str, int],
) -> Metric:
    """A family with one series per table of ``counts``."""
    family = kind(name, doc, labels=[*labels, "table"])
    for table, count in sorted(counts.items()):
        family.add_metric([*base, table], count)
    return family


def _parking(s: CaptureStats, labels: list[str], base: list[str]) -> Iterator[Metric]:
    """Capture quarantine's families: a table that had a parked key has a series in
    each (0 until it counts something; keys parked 0 once all are re-driven)."""
    keys = GaugeMetricFamily(
        "bizevents_capture_parked_keys",
        "Technical keys parked now (on_conversion_error = park), per table",
        labels=[*labels, "table"],
    )
    parked = s.parked()
    tables = sorted({*s.parked_keys, *parked, *s.redriven, *s.discarded_keys})
    for table in tables:
        keys.add_metric([*base, table], s.parked_keys.get(table, 0))
    yield keys
    for name, doc, counts in (
        (
            "bizevents_capture_parked",
            "Changes parked: each that parked its key and those parked behind it",
            parked,
        ),
        (
            "bizevents_capture_redriven",
            "Parked changes re-decoded and written to the technical topic by a re-drive",
            s.redriven,
        ),
        (
            "bizevents_capture_discarded_keys",
            "Parked keys whose changes were discarded (bizevents capture discard)",
            s.discarded_keys,
        ),
    ):
        family = CounterMetricFamily(name, doc, labels=[*labels, "table"])
        for table in tables:
            family.add_metric([*base, table], counts.get(table, 0))
        yield family


def serve_metrics(stats: CaptureStats, host: str, port: int) -> tuple[Any, int]:
    """Serve ``stats`` on ``host:port`` (0: a free port); the server and its port."""
    return serve(_Collector(stats), host, port)
