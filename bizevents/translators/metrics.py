"""Translator-worker metrics: plain counters on the hot path, read by Prometheus at scrape time.

The worker adds a block's :class:`~bizevents.translators.pipeline.Counts` into
:class:`WorkerStats` once per block; nothing per record touches prometheus-client.
A custom collector turns the numbers into metric families when the text endpoint
(loopback only) is scraped. Series, all labelled ``translator`` (``name@version``):

- ``bizevents_translator_consumed_total``, ``_emitted_total``, ``_dropped_total``,
  ``_dead_lettered_total``: what happened to the changes each translator saw;
- ``bizevents_translator_processing_seconds_total``: time spent translating, stamping
  and serializing; divided by ``consumed`` it is the mean per-change processing time;
- ``bizevents_translator_consumer_lag{topic,partition}``: records behind the end of
  each assigned partition the translator reads, from the high watermark of the last
  Fetch (ListOffsets is wrong on the embedded broker, see docs/broker.md);
- ``bizevents_translate_latency_seconds``: a histogram of source-record timestamp to
  produce acknowledgement, one observation per block (its last record);
- ``bizevents_translate_undecodable_total{topic}``, ``_tombstones_total``,
  ``_unrouted_total``: records no translator saw;
- ``bizevents_shadow_changes_total{shadow,live}``, ``bizevents_shadow_events_total{shadow,
  contract,verdict}``, ``bizevents_shadow_field_differs_total{shadow,contract,field}``,
  ``bizevents_shadow_failures_total{shadow,version}``: a shadow version's comparison
  with the live one over the partitions this worker holds (docs/shadow.md).
- ``bizevents_translator_parked_total``: changes parked (docs/parking.md): a failing
  one that parked its key and each change parked behind it;
- ``bizevents_parked_keys{group,translator}``: keys parked now, as this worker knows
  them (its restore of the parked topic, and what it parked and unparked since).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from bizevents.plumbing.metrics import serve_metrics as serve
from bizevents.plumbing.parking import ParkedKeys
from bizevents.translators.records import Counts
from bizevents.translators.shadow import VERDICTS, ShadowBook, ShadowComparison

__all__ = ["LATENCY_BUCKETS", "WorkerStats", "serve_metrics"]

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass
class WorkerStats:
    """What one worker process has done so far; updated once per block."""

    group: str
    counts: dict[str, Counts] = field(default_factory=lambda: defaultdict(Counts))
    undecodable: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    tombstones: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    unrouted: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    #: (topic, partition) -> records behind the high watermark
    lag: dict[tuple[str, int], int] = field(default_factory=dict)
    #: topic -> the translators reading it (the lag gauge is labelled with each)
    readers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    latency_sum: float = 0.0
    blocks: int = 0
    #: technical records whose outputs the broker acknowledged (committable offsets)
    acknowledged: int = 0
    #: wall-clock time of the first block received and of the latest acknowledgement
    first_block_at: float = 0.0
    last_ack_at: float = 0.0
    #: The shadow versions' comparisons, per partition held (docs/shadow.md).
    shadows: ShadowBook = field(default_factory=ShadowBook)
    #: the parked keys of the worker's pipeline (None: nothing parks)
    parking: ParkedKeys | None = None
    #: the transaction worker's parked business keys (None: it does not park here)
    tx_parking: ParkedKeys | None = None
    #: the transaction worker's transactions open and partitions held back at its last
    #: read (None: no transaction worker here; docs/transactions.md, "Catching up")
    tx_open: int | None = None
    tx_held: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(
        self,
        topic: str,
        counts: Mapping[str, Counts],
        undecodable: int = 0,
        tombstones: int = 0,
        unrouted: int = 0,
    ) -> None:
        with self._lock:
            for ref, c in counts.items():
                self.counts[ref].add(c)
            if undecodable:
                self.undecodable[topic] += undecodable
            if tombstones:
                self.tombstones[topic] += tombstones
            if unrouted:
                self.unrouted[topic] += unrouted
            self.blocks += 1

    def compared(self, topic: str, partition: int, shadows: Mapping[str, ShadowComparison]) -> None:
        with self._lock:
            self.shadows.add(topic, partition, shadows)

    def acked(self, records: int, now: float) -> None:
        with self._lock:
            self.acknowledged += records
            self.last_ack_at = now

    def observe_latency(self, seconds: float) -> None:
        with self._lock:
            for i, bound in enumerate(LATENCY_BUCKETS):
                if seconds <= bound:
                    self.latency_buckets[i] += 1
                    break
            else:
                self.latency_buckets[-1] += 1
            self.latency_sum += seconds

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        self.lag[(topic, partition)] = max(lag, 0)

    def forget_partitions(self, keep: Iterable[tuple[str, int]]) -> None:
        """Drop the lag of partitions this worker no longer holds (after a rebalance)."""
        kept = set(keep)
        with self._lock:
            for tp in [tp for tp in self.lag if tp not in kept]:
                del self.lag[tp]


class _Collector(Collector):
    def __init__(self, stats: WorkerStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        with s._lock:
            counts = {ref: dataclasses.replace(c) for ref, c in s.counts.items()}
            lag = dict(s.lag)
            buckets = list(s.latency_buckets)
            progress = (s.acknowledged, s.first_block_at, s.last_ack_at)
            latency_sum = s.latency_sum
            per_topic = {
                "undecodable": dict(s.undecodable),
                "tombstones": dict(s.tombstones),
                "unrouted": dict(s.unrouted),
            }
            shadows = [c for c in map(s.shadows.total, s.shadows.shadows()) if c is not None]
            assembling = (s.tx_open, s.tx_held)
        for name, doc, attr in (
            ("consumed", "Changes a translator received", "consumed"),
            ("emitted", "Business events a translator emitted", "emitted"),
            ("dropped", "Changes a translator found irrelevant (no event)", "dropped"),
            ("dead_lettered", "Changes that went to the dead-letter topic", "dead_lettered"),
            ("parked", "Changes parked behind their key (on the dead-letter topic)", "parked"),
            ("processing_seconds", "Time spent translating and serializing", "seconds"),
        ):
            family = CounterMetricFamily(
                f"bizevents_translator_{name}", doc, labels=["group", "translator"]
            )
            for ref, c in sorted(counts.items()):
                family.add_metric([s.group, ref], getattr(c, attr))
            yield family
        books = [p for p in (s.parking, s.tx_parking) if p is not None]
        if books:
            parked = GaugeMetricFamily(
                "bizevents_parked_keys",
                "Source keys parked now, per translator name",
                labels=["group", "translator"],
            )
            per: dict[str, int] = {}
            for book in books:  # row and transaction translators have their own keys
                for name, n in dict(book.per_translator).items():
                    per[name] = per.get(name, 0) + n
            for name, n in sorted(per.items()):
                parked.add_metric([s.group, name], n)
            yield parked
        open_now, held_now = assembling
        if open_now is not None:  # a transaction worker
            for name, doc, now in (
                ("open", "Transactions open at this member (parts read, not released)", open_now),
                ("held_partitions", "Partitions held back, past the oldest open one", held_now),
            ):
                assembly = GaugeMetricFamily(
                    f"bizevents_transactions_{name}", doc, labels=["group"]
                )
                assembly.add_metric([s.group], now)
                yield assembly
        gauge = GaugeMetricFamily(
            "bizevents_translator_consumer_lag",
            "Records behind the end of each assigned partition (Fetch high watermark)",
            labels=["group", "translator", "topic", "partition"],
        )
        for (topic, partition), behind in sorted(lag.items()):
            for ref in s.readers.get(topic, ("",)):
                gauge.add_metric([s.group, ref, topic, str(partition)], behind)
        yield gauge
        cumulative: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*map(str, LATENCY_BUCKETS), "+Inf"), buckets, strict=True):
            running += n
            cumulative.append((bound, running))
        histogram = HistogramMetricFamily(
            "bizevents_translate_latency_seconds",
            "Source record timestamp to produce acknowledgement (last record of each block)",
            labels=["group"],
        )
        histogram.add_metric([s.group], cumulative, latency_sum)
        yield histogram
        acknowledged = CounterMetricFamily(
            "bizevents_translate_acknowledged",
            "Technical records whose outputs the broker acknowledged (their offsets may commit)",
            labels=["group"],
        )
        acknowledged.add_metric([s.group], progress[0])
        yield acknowledged
        for name, doc, value in (
            ("first_block", "Unix time the first block arrived", progress[1]),
            ("last_ack", "Unix time of the latest acknowledgement", progress[2]),
        ):
            stamp = GaugeMetricFamily(
                f"bizevents_translate_{name}_timestamp_seconds", doc, labels=["group"]
            )
            stamp.add_metric([s.group], value)
            yield stamp
        yield from _shadow_families(s.group, shadows)
        for name, values in per_topic.items():
            family = CounterMetricFamily(
                f"bizevents_translate_{name}",
                f"Technical records that no translator saw ({name})",
                labels=["group", "topic"],
            )
            for topic, n in sorted(values.items()):
                family.add_metric([s.group, topic], n)
            yield family


def _shadow_families(group: str, shadows: list[ShadowComparison]) -> Iterator[Metric]:
    """The shadows' comparisons: changes compared, events per contract and verdict, and
    per field the events that differ on it (over the partitions this worker holds)."""
    changes = CounterMetricFamily(
        "bizevents_shadow_changes",
        "Changes both the live and the shadow version saw",
        labels=["group", "shadow", "live"],
    )
    events = CounterMetricFamily(
        "bizevents_shadow_events",
        "Events of the live and the shadow version, paired by id, by verdict",
        labels=["group", "shadow", "contract", "verdict"],
    )
    fields = CounterMetricFamily(
        "bizevents_shadow_field_differs",
        "Events whose field differs between the live and the shadow version",
        labels=["group", "shadow", "contract", "field"],
    )
    failures = CounterMetricFamily(
        "bizevents_shadow_failures",
        "Changes a version could not translate (version: live or shadow)",
        labels=["group", "shadow", "version"],
    )
    for c in shadows:
        changes.add_metric([group, c.shadow, c.live], c.changes)
        failures.add_metric([group, c.shadow, "live"], c.live_failures)
        failures.add_metric([group, c.shadow, "shadow"], c.shadow_failures)
        for contract, figures in sorted(c.contracts.items()):
            for verdict in VERDICTS:
                events.add_metric([group, c.shadow, contract, verdict], figures.count(verdict))
            for name, n in sorted(figures.fields.items()):
                fields.add_metric([group, c.shadow, contract, name], n)
    yield from (changes, events, fields, failures)


def serve_metrics(stats: WorkerStats, host: str, port: int) -> tuple[Any, int]:
    """Serve ``stats`` on ``host:port`` (0: a free port); the server and its port."""
    return serve(_Collector(stats), host, port)
