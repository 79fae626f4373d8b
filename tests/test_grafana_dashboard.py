"""Issue 16: the Grafana dashboard asks only for what the services export.

The exported names come from the services' own metrics endpoints (capture's, the
translator worker's and the consumer kit's collectors, served and scraped as Prometheus
would), not from a list kept by hand: a renamed metric or label fails here.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from bizevents.capture.metrics import CaptureStats
from bizevents.capture.metrics import serve_metrics as serve_capture
from bizevents.consumers import ConsumerStats
from bizevents.consumers.metrics import serve_metrics as serve_consumer
from bizevents.plumbing.parking import ParkedKeys
from bizevents.translators.metrics import WorkerStats
from bizevents.translators.metrics import serve_metrics as serve_worker

DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana" / "bizevents.json"


def _exported() -> dict[str, set[str]]:
    """Every sample name the services serve → its label names."""
    capture = CaptureStats(server="demo", slot="s", events={"store.orders": 3}, lag_bytes=10)
    capture.conversion_errors[("store.orders", "dead-letter")] = 1
    capture.conversion_errors[("store.orders", "park")] = 1
    capture.parked_keys["store.orders"] = 1
    capture.redriven["store.orders"] = 1
    capture.discarded_keys["store.orders"] = 1
    worker = WorkerStats("g")
    worker.counts["orders@2"].consumed = 5
    worker.lag[("demo.store.orders", 0)] = 2
    worker.readers["demo.store.orders"] = ("orders@2",)
    worker.undecodable["demo.store.orders"] = 1
    worker.parking = ParkedKeys()
    worker.parking.park(("orders", "demo.store.orders", 0, b"k"), 3, "translate", "boom")
    member = SimpleNamespace(
        group_id="billing",
        stats=ConsumerStats(delivered=5, parked=2),
        parking=ParkedKeys(),
        owned=frozenset({("store.order-placed", 0)}),
    )
    names: dict[str, set[str]] = {}
    for server, port in (
        serve_capture(capture, "127.0.0.1", 0),
        serve_worker(worker, "127.0.0.1", 0),
        serve_consumer(member, "127.0.0.1", 0),
    ):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        finally:
            server.shutdown()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                names.setdefault(sample.name, set()).update(sample.labels)
    return names


def _queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    found = [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]
    variables = dashboard["templating"]["list"]
    found += [(v["name"], v["definition"]) for v in variables if v["type"] == "query"]
    return found


def test_every_panel_query_names_an_exported_metric_and_its_labels() -> None:
    exported = _exported()
    assert "bizevents_translator_consumed_total" in exported  # the scrape worked
    queries = _queries()
    assert len(queries) >= 10
    for title, expr in queries:
        metrics = re.findall(r"\bbizevents_\w+", expr)
        assert metrics, f"{title}: {expr} names no bizevents metric"
        for metric in metrics:
            assert metric in exported, f"{title}: {metric} is not exported"
        for grouping in re.findall(r"\bby \(([^)]*)\)", expr):
            for label in (x.strip() for x in grouping.split(",")):
                known = set().union(*(exported[m] for m in metrics))
                assert label in known, f"{title}: no label {label!r} on {metrics}"


def test_the_dashboard_covers_what_operators_need() -> None:
    """Per translator@version consumed/emitted/dropped/dead-lettered, lag and latency;
    capture's changes, slot lag and parking; the consumer kit's parking."""
    text = " ".join(expr for _, expr in _queries())
    for metric in (
        "bizevents_translator_consumed_total",
        "bizevents_translator_emitted_total",
        "bizevents_translator_dropped_total",
        "bizevents_translator_dead_lettered_total",
        "bizevents_translator_consumer_lag",
        "bizevents_translate_latency_seconds_bucket",
        "bizevents_capture_events_total",
        "bizevents_capture_lag_bytes",
        "bizevents_capture_parked_keys",
        "bizevents_capture_parked_total",
        "bizevents_capture_redriven_total",
        "bizevents_consumer_parked_keys",
        "bizevents_consumer_parked_total",
        "bizevents_consumer_redriven_total",
    ):
        assert metric in text, metric
