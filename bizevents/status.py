"""``bizevents status``' figures: what the Grafana dashboard shows, from the running
services' Prometheus endpoints, for people without Grafana.

Two scrapes ``interval`` seconds apart give the rates (changes/s, events/s), as
``rate()`` does on the dashboard; the rest is read from the second scrape.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

from bizevents.plumbing.errors import ConfigError

#: Where the demo records its services' endpoints (under the state folder).
ENDPOINTS_FILE = Path("demo") / "metrics.json"
#: The most of a metrics page read (a service's page is tens of kilobytes).
MAX_PAGE = 16 * 1024 * 1024

Samples = dict[str, list[tuple[dict[str, str], float]]]


class StatusError(ConfigError):
    """No endpoint to read, or one that does not answer."""


def parse(text: str) -> Samples:
    """The Prometheus text format: sample name → (labels, value) of each series."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: Samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name].append((dict(sample.labels), float(sample.value)))
    return samples


def _by(samples: Samples, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for labels, value in samples.get(name, []):
        out[labels.get(label, "")] += value
    return dict(out)


def _quantile(samples: Samples, name: str, q: float) -> float | None:
    """The upper bound of the bucket holding quantile ``q`` (as coarse as the buckets)."""
    buckets: dict[float, float] = defaultdict(float)
    for labels, value in samples.get(name, []):
        buckets[float(labels["le"])] += value
    if not buckets or max(buckets.values()) == 0:
        return None
    total = buckets[max(buckets)]
    return next(le for le in sorted(buckets) if buckets[le] >= q * total)


#: capture's parking figures per table: (figure, metric)
_CAPTURE_PARKING = (
    ("parked", "bizevents_capture_parked_total"),
    ("parked_keys", "bizevents_capture_parked_keys"),
    ("redriven", "bizevents_capture_redriven_total"),
    ("discarded_keys", "bizevents_capture_discarded_keys_total"),
)


def _counters(
    before: Samples,
    after: Samples,
    seconds: float,
    label: str,
    prefix: str,
    metrics: tuple[str, ...],
) -> dict[str, dict[str, float]]:
    """Per value of ``label``, each counter ``<prefix>_<metric>_total`` and its rate."""
    rows: dict[str, dict[str, float]] = {}
    for metric in metrics:
        name = f"{prefix}_{metric}_total"
        now, then = _by(after, name, label), _by(before, name, label)
        for owner, value in now.items():
            row = rows.setdefault(owner, {})
            row[metric] = value
            row[f"{metric}_per_s"] = (value - then.get(owner, 0.0)) / seconds
    return rows


def figures(before: Samples, after: Samples, seconds: float) -> dict[str, Any]:
    """Per translator@version, per captured table and per consumer-kit group, what the
    dashboard plots."""
    translators = _counters(
        before,
        after,
        seconds,
        "translator",
        "bizevents_translator",
        ("consumed", "emitted", "dropped", "dead_lettered", "parked"),
    )
    for ref, behind in _by(after, "bizevents_translator_consumer_lag", "translator").items():
        if ref in translators:
            translators[ref]["lag"] = behind
    # parked keys are per translator name (a re-drive runs another version of it)
    for name, keys in _by(after, "bizevents_parked_keys", "translator").items():
        for ref, row in translators.items():
            if ref.partition("@")[0] == name:
                row["parked_keys"] = keys
    events_now = _by(after, "bizevents_capture_events_total", "table")
    events_then = _by(before, "bizevents_capture_events_total", "table")
    tables = {
        table: {"changes": n, "changes_per_s": (n - events_then.get(table, 0.0)) / seconds}
        for table, n in events_now.items()
    }
    # capture quarantine (docs/parking.md): only captures that park serve these
    for figure, metric in _CAPTURE_PARKING:
        for table, n in _by(after, metric, "table").items():
            tables.setdefault(table, {"changes": 0.0, "changes_per_s": 0.0})[figure] = n
    slot_lag = _by(after, "bizevents_capture_lag_bytes", "slot")
    shadows: dict[str, dict[str, float]] = {}
    for shadow, n in _by(after, "bizevents_shadow_changes_total", "shadow").items():
        shadows[shadow] = {"changes": n}
    for labels, value in after.get("bizevents_shadow_events_total", []):
        row = shadows.setdefault(labels.get("shadow", ""), {"changes": 0.0})
        row[labels.get("verdict", "")] = row.get(labels.get("verdict", ""), 0.0) + value
    consumers = _counters(
        before,
        after,
        seconds,
        "group",
        "bizevents_consumer",
        ("delivered", "dead_lettered", "parked", "redriven"),
    )
    # each member counts the keys of the partitions it owns: their sum is the group's
    for group, keys in _by(after, "bizevents_consumer_parked_keys", "group").items():
        consumers.setdefault(group, {})["parked_keys"] = keys
    return {
        "translators": translators,
        "consumers": consumers,
        "shadows": shadows,
        "latency_p50_s": _quantile(after, "bizevents_translate_latency_seconds_bucket", 0.5),
        "latency_p99_s": _quantile(after, "bizevents_translate_latency_seconds_bucket", 0.99),
        "capture": {"tables": tables, "slot_lag_bytes": slot_lag},
        "interval_s": seconds,
    }


def _checked(url: str) -> str:
    """``url`` when it is an http(s) address with a host: urllib would open a file:// URL
    (and quote the file in its error)."""
    try:
        parts = urllib.parse.urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is not a number, a bracket left open
        ok = False
    if not ok:
        raise StatusError(
            f"--url {url[:200]!r} is not an http(s) address; give a service's "
            "metrics address, such as http://127.0.0.1:9100/metrics"
        )
    return url


def endpoints_of(state_dir: Path, urls: tuple[str, ...]) -> list[str]:
    """The URLs given, else those the demo recorded in the state folder."""
    if urls:
        return [_checked(url) for url in urls]
    path = state_dir / ENDPOINTS_FILE
    try:
        recorded: dict[str, str] = json.loads(path.read_text())
    except (OSError, ValueError):
        raise StatusError(
            f"no metrics endpoint to read: give --url (a service's /metrics address) "
            f"or run `bizevents demo`, which records its services in {path}"
        ) from None
    return list(recorded.values())


def scrape(urls: list[str]) -> Samples:
    merged: Samples = defaultdict(list)
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                text = response.read(MAX_PAGE).decode(errors="replace")
        except (OSError, urllib.error.URLError) as exc:
            raise StatusError(f"the metrics endpoint {url} does not answer: {exc}") from None
        for name, series in parse(text).items():
            merged[name].extend(series)
    return merged


def status(urls: list[str], interval: float) -> dict[str, Any]:
    before = scrape(urls)
    started = time.monotonic()
    time.sleep(interval)
    after = scrape(urls)
    return {"endpoints": urls, **figures(before, after, time.monotonic() - started)}


def promotions(kafka: dict[str, Any], topic: str, group: str) -> list[dict[str, Any]]:
    """The last promotion of each translator, from the promotions topic (docs/shadow.md),
    with its time and the figures that passed its gate."""
    from bizevents.plumbing.kafka import read_latest
    from bizevents.translators.promotion import Promotion, decode

    found = []
    for key, value in read_latest(kafka, topic, group, timeout_s=3, wait_s=0).items():
        if value is None or not key.startswith(b"promotion|"):
            continue
        record = decode(value, f"{topic} key {key!r}")
        if isinstance(record, Promotion):
            found.append(
                {
                    "translator": record.name,
                    "live": f"{record.name}@{record.to}",
                    "previous": f"{record.name}@{record.previous}",
                    "at": record.at,
                    "figures": dict(record.figures),
                }
            )
    return sorted(found, key=lambda row: str(row["translator"]))
