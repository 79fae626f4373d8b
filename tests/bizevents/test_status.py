"""Issue 16: `bizevents status` reads the figures the dashboard shows from the services'
own metrics endpoints (served here by capture's and the worker's real collectors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from bizevents.capture.metrics import CaptureStats
from bizevents.capture.metrics import serve_metrics as serve_capture
from bizevents.consumers import ConsumerStats
from bizevents.consumers.metrics import serve_metrics as serve_consumer
from bizevents.plumbing.parking import ParkedKeys
from bizevents.status import figures, parse
from bizevents.translators.metrics import WorkerStats
from bizevents.translators.metrics import serve_metrics as serve_worker
from bizevents.translators.pipeline import Counts
from bizevents.translators.shadow import ShadowComparison

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def services() -> Iterator[tuple[CaptureStats, WorkerStats, list[str]]]:
    capture = CaptureStats(server="demo", slot="bizevents_demo", lag_bytes=4096)
    capture.events["store.orders"] = 100
    capture.conversion_errors[("store.orders", "park")] = 1
    capture.conversion_errors[("store.orders", "parked")] = 5
    capture.conversion_errors[("store.orders", "dead-letter")] = 9  # not parked
    capture.parked_keys["store.orders"] = 1
    capture.redriven["store.orders"] = 2
    worker = WorkerStats("bizevents-translate")
    worker.add("demo.store.orders", {"orders@2": Counts(consumed=10, emitted=8, dropped=2)})
    worker.readers["demo.store.orders"] = ("orders@2",)
    worker.lag[("demo.store.orders", 0)] = 7
    worker.observe_latency(0.04)
    comparison = ShadowComparison("orders@2", "orders@1")
    comparison.add_change([("e1", "Placed", {"total": 1})], [("e1", "Placed", {"total": 2})])
    worker.compared("demo.store.orders", 0, {"orders@1": comparison})
    parking = ParkedKeys()  # a key parked on the member's partition, one on another's
    parking.park(("billing", "store.order-placed", 0, b"7"), 3, "consume-handler", "boom")
    parking.park(("billing", "store.order-placed", 1, b"8"), 4, "consume-handler", "boom")
    member = SimpleNamespace(
        group_id="billing",
        stats=ConsumerStats(delivered=40, parked=5, redriven=2),
        parking=parking,
        owned=frozenset({("store.order-placed", 0)}),
    )
    servers = [
        serve_capture(capture, "127.0.0.1", 0),
        serve_worker(worker, "127.0.0.1", 0),
        serve_consumer(member, "127.0.0.1", 0),
    ]
    yield capture, worker, [f"http://127.0.0.1:{port}/metrics" for _, port in servers]
    for server, _ in servers:
        server.shutdown()


def _run(*args: str, state: Path, kafka: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIZEVENTS_")}
    env["BIZEVENTS_STATE_DIR"] = str(state)
    if kafka is not None:
        env["BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS"] = kafka
    return subprocess.run(
        [sys.executable, "-m", "bizevents", "status", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def test_figures_are_totals_and_rates_between_two_scrapes() -> None:
    before = parse('bizevents_capture_events_total{table="store.orders"} 10\n')
    after = parse(
        'bizevents_capture_events_total{table="store.orders"} 30\n'
        'bizevents_translator_emitted_total{translator="orders@2"} 5\n'
        'bizevents_translate_latency_seconds_bucket{le="0.1"} 90\n'
        'bizevents_translate_latency_seconds_bucket{le="1.0"} 100\n'
        'bizevents_translate_latency_seconds_bucket{le="+Inf"} 100\n'
    )
    result = figures(before, after, 2.0)
    assert result["capture"]["tables"]["store.orders"] == {"changes": 30, "changes_per_s": 10.0}
    assert result["translators"]["orders@2"] == {"emitted": 5.0, "emitted_per_s": 2.5}
    assert result["latency_p50_s"] == 0.1 and result["latency_p99_s"] == 1.0


def test_capture_parking_figures_are_per_table() -> None:
    """Capture quarantine's metrics (docs/parking.md) join the table's row; a table
    whose keys were all re-driven shows 0 keys parked, not nothing."""
    labels = 'server="shop",slot="s",table'
    before = parse(f'bizevents_capture_events_total{{{labels}="store.orders"}} 10\n')
    after = parse(
        f'bizevents_capture_events_total{{{labels}="store.orders"}} 30\n'
        f'bizevents_capture_parked_keys{{{labels}="store.orders"}} 2\n'
        f'bizevents_capture_parked_total{{{labels}="store.orders"}} 7\n'
        f'bizevents_capture_redriven_total{{{labels}="store.orders"}} 4\n'
        f'bizevents_capture_discarded_keys_total{{{labels}="store.orders"}} 1\n'
        f'bizevents_capture_parked_keys{{{labels}="store.items"}} 0\n'
        f'bizevents_capture_redriven_total{{{labels}="store.items"}} 3\n'
    )
    tables = figures(before, after, 2.0)["capture"]["tables"]
    assert tables["store.orders"] == {
        "changes": 30,
        "changes_per_s": 10.0,
        "parked_keys": 2,
        "parked": 7,
        "redriven": 4,
        "discarded_keys": 1,
    }
    assert tables["store.items"] == {
        "changes": 0,
        "changes_per_s": 0.0,
        "parked_keys": 0,
        "redriven": 3,
    }


def test_consumer_groups_figures_add_up_their_members() -> None:
    """Each member serves the parked keys of the partitions it owns: the group's figure
    is their sum, as are its counts."""
    after = parse(
        'bizevents_consumer_delivered_total{group="billing"} 90\n'
        'bizevents_consumer_delivered_total{group="billing"} 10\n'
        'bizevents_consumer_parked_total{group="billing"} 7\n'
        'bizevents_consumer_redriven_total{group="billing"} 0\n'
        'bizevents_consumer_dead_lettered_total{group="billing"} 1\n'
        'bizevents_consumer_parked_keys{group="billing"} 2\n'
        'bizevents_consumer_parked_keys{group="billing"} 1\n'
    )
    before = parse('bizevents_consumer_delivered_total{group="billing"} 40\n')
    billing = figures(before, after, 2.0)["consumers"]["billing"]
    assert (billing["delivered"], billing["delivered_per_s"]) == (100, 30.0)
    assert (billing["parked"], billing["parked_keys"], billing["redriven"]) == (7, 3, 0)
    assert billing["dead_lettered"] == 1


def test_status_json_reads_the_running_services(
    services: tuple[CaptureStats, WorkerStats, list[str]], tmp_path: Path, closed_address: str
) -> None:
    """The promotions are read from a broker address known to be closed: said on stderr,
    the figures stand (the default address may have a stack behind it, or not)."""
    _, _, urls = services
    args = [a for url in urls for a in ("--url", url)]
    result = _run(*args, "--json", "--interval", "0.2", state=tmp_path, kafka=closed_address)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    orders = data["translators"]["orders@2"]
    assert (orders["consumed"], orders["emitted"], orders["dropped"]) == (10, 8, 2)
    assert orders["dead_lettered"] == 0 and orders["lag"] == 7
    orders_table = data["capture"]["tables"]["store.orders"]
    assert orders_table["changes"] == 100
    assert (orders_table["parked"], orders_table["parked_keys"]) == (6, 1)
    assert (orders_table["redriven"], orders_table["discarded_keys"]) == (2, 0)
    assert data["capture"]["slot_lag_bytes"] == {"bizevents_demo": 4096}
    assert data["latency_p99_s"] == 0.05
    billing = data["consumers"]["billing"]
    assert (billing["delivered"], billing["parked"], billing["redriven"]) == (40, 5, 2)
    assert (billing["parked_keys"], billing["dead_lettered"]) == (1, 0)  # its partition's
    assert data["shadows"] == {
        "orders@1": {"changes": 1, "identical": 0, "differing": 1, "only_live": 0, "only_shadow": 0}
    }
    assert data["promotions"] == []
    assert f"promotions not read: the Kafka cluster at {closed_address} did not answer" in (
        result.stderr
    )
    text = _run(*args, "--interval", "0.2", state=tmp_path, kafka=closed_address)
    assert text.returncode == 0 and "orders@2" in text.stdout and "4,096 bytes" in text.stdout
    assert "parked-keys" in text.stdout and "redriven" in text.stdout
    assert "consumer groups" in text.stdout and "billing" in text.stdout


def test_status_without_endpoints_says_what_to_give(tmp_path: Path) -> None:
    result = _run("--json", state=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "no metrics endpoint to read: give --url" in result.stderr
    down = _run("--url", "http://127.0.0.1:9/metrics", state=tmp_path)
    assert down.returncode == 1 and "does not answer" in down.stderr


def test_status_shows_parked_changes_and_keys(tmp_path: Path, closed_address: str) -> None:
    worker = WorkerStats("bizevents-translate")
    worker.add("demo.store.orders", {"orders@2": Counts(consumed=10, emitted=6, parked=3)})
    worker.parking = ParkedKeys()
    for key in (b"1", b"2"):
        worker.parking.park(("orders", "demo.store.orders", 0, key), 4, "translate", "boom")
    server, port = serve_worker(worker, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        result = _run(
            *("--url", url, "--json", "--interval", "0.1"), state=tmp_path, kafka=closed_address
        )
        text = _run("--url", url, "--interval", "0.1", state=tmp_path, kafka=closed_address)
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    orders = json.loads(result.stdout)["translators"]["orders@2"]
    assert (orders["parked"], orders["parked_keys"]) == (3, 2)
    assert text.returncode == 0 and "parked" in text.stdout
