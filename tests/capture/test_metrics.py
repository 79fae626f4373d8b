"""Capture's figures as Prometheus reads them: the per-table families, the parking ones,
and the plain gauges, from a :class:`CaptureStats` (no server, no Kafka)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from bizevents.capture.metrics import CaptureStats, _Collector


def _samples(stats: CaptureStats) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``(sample name, its labels but server and slot) -> value`` of every family."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in _Collector(stats).collect():
        for sample in family.samples:
            assert sample.labels["server"] == "shop" and sample.labels["slot"] == "s1"
            rest = tuple(
                sorted((k, v) for k, v in sample.labels.items() if k not in ("server", "slot"))
            )
            out[(sample.name, rest)] = sample.value
    return out


def _stats() -> CaptureStats:
    stats = CaptureStats("shop", "s1")
    stats.events = {"public.b": 7, "public.a": 3}
    stats.snapshot_rows = {"public.a": 2}
    stats.snapshot_expected = {"public.a": 5, "public.b": 0}
    stats.incremental_rows = {"public.b": 11}
    stats.conversion_errors = {
        ("public.a", "park"): 1,
        ("public.a", "parked"): 4,
        ("public.b", "dead-letter"): 2,
    }
    stats.parked_keys = {"public.a": 1}
    stats.redriven = {"public.c": 6}
    return stats


def test_each_per_table_family_has_a_series_per_table_it_counts() -> None:
    """Events, snapshot rows read and expected, incremental rows: one series per table
    each family counts, with its own value, and none for a table it does not count."""
    got = _samples(_stats())
    table = lambda t: (("table", t),)  # noqa: E731
    assert got[("bizevents_capture_events_total", table("public.a"))] == 3
    assert got[("bizevents_capture_events_total", table("public.b"))] == 7
    assert got[("bizevents_capture_snapshot_rows", table("public.a"))] == 2
    assert ("bizevents_capture_snapshot_rows", table("public.b")) not in got
    assert got[("bizevents_capture_snapshot_rows_expected", table("public.a"))] == 5
    assert got[("bizevents_capture_snapshot_rows_expected", table("public.b"))] == 0
    assert got[("bizevents_capture_incremental_rows", table("public.b"))] == 11
    assert ("bizevents_capture_incremental_rows", table("public.a")) not in got


def test_the_families_are_counters_and_gauges_as_documented() -> None:
    """Events are a counter (``_total``), snapshot and incremental rows gauges."""
    kinds = {f.name: f.type for f in _Collector(_stats()).collect()}
    assert kinds["bizevents_capture_events"] == "counter"
    assert kinds["bizevents_capture_snapshot_rows"] == "gauge"
    assert kinds["bizevents_capture_snapshot_rows_expected"] == "gauge"
    assert kinds["bizevents_capture_incremental_rows"] == "gauge"
    assert kinds["bizevents_capture_conversion_errors"] == "counter"


def test_parked_counts_the_changes_that_parked_a_key_and_those_behind_it() -> None:
    """``parked`` adds ``park`` and ``parked``, never a dead letter or a skip."""
    assert _stats().parked() == {"public.a": 5}


def test_a_table_that_had_a_parked_key_has_a_series_in_every_parking_family() -> None:
    """Each table the quarantine counted has a series in each parking family, 0 where
    that family counted nothing of it."""
    got = _samples(_stats())
    for table in ("public.a", "public.c"):
        labels = (("table", table),)
        for name in (
            "bizevents_capture_parked_keys",
            "bizevents_capture_parked_total",
            "bizevents_capture_redriven_total",
            "bizevents_capture_discarded_keys_total",
        ):
            assert (name, labels) in got, (name, table)
    assert got[("bizevents_capture_parked_keys", (("table", "public.a"),))] == 1
    assert got[("bizevents_capture_parked_total", (("table", "public.a"),))] == 5
    assert got[("bizevents_capture_redriven_total", (("table", "public.c"),))] == 6
    assert got[("bizevents_capture_parked_keys", (("table", "public.c"),))] == 0
    assert ("bizevents_capture_parked_keys", (("table", "public.b"),)) not in got


def test_the_plain_gauges_and_the_lag_only_once_known() -> None:
    """The run's single figures are gauges; the lag appears once a heartbeat read it."""
    stats = _stats()
    stats.snapshot_done, stats.acknowledged_lsn, stats.in_flight = True, 0x16B3748, 12
    got = _samples(stats)
    assert got[("bizevents_capture_snapshot_done", ())] == 1
    assert got[("bizevents_capture_acknowledged_lsn", ())] == 0x16B3748
    assert got[("bizevents_capture_in_flight", ())] == 12
    assert not any(name == "bizevents_capture_lag_bytes" for name, _ in got)
    stats.lag_bytes = 4096
    assert _samples(stats)[("bizevents_capture_lag_bytes", ())] == 4096


def test_the_text_exposition_reads_every_family() -> None:
    """What the endpoint serves: the collector registered, its families in the text."""
    registry = CollectorRegistry()
    registry.register(_Collector(_stats()))
    text = generate_latest(registry).decode()
    assert 'bizevents_capture_events_total{server="shop",slot="s1",table="public.b"} 7.0' in text
    line = (
        'bizevents_capture_conversion_errors_total{handling="dead-letter",server="shop",'
        'slot="s1",table="public.b"} 2.0'
    )
    assert line in text.splitlines()
