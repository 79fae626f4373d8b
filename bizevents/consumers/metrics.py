"""The consumer kit's metrics: what a member did and the keys parked on its partitions.

Off by default; ``BusinessConsumer(..., metrics_port=N)`` serves them in the Prometheus
text format on loopback while :meth:`~bizevents.consumers.BusinessConsumer.run` runs,
as the worker and capture serve theirs. Nothing per record touches prometheus-client:
the consumer bumps the plain integers of its
:class:`~bizevents.consumers.ConsumerStats`, and a collector reads them at scrape time.
Series, all labelled ``group``:

- ``bizevents_consumer_delivered_total``: events the handler returned for;
- ``bizevents_consumer_duplicates_total``, ``_stale_total``: events skipped by the
  deduplication window;
- ``bizevents_consumer_dead_lettered_total``: records dead-lettered (``on_error =
  "dead-letter"``);
- ``bizevents_consumer_parked_total``: records parked (each that failed and parked its
  key, and those parked behind it);
- ``bizevents_consumer_redriven_total``: parked records handed to the handler by a
  re-drive;
- ``bizevents_consumer_commits_total``: batches committed;
- ``bizevents_consumer_parked_keys``: keys parked now on the partitions this member
  owns (a gauge). Each partition has one owner, which restored the group's parked
  keys when it was assigned and alone parks and unparks its keys since, so the
  members' gauges add up to the group's parked keys (``sum by (group)``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bizevents.plumbing.metrics import serve_metrics as serve
from bizevents.plumbing.parking import ParkedKeys

__all__ = ["COUNTERS", "serve_metrics"]

#: (the stats' field, help text) of each counter, ``bizevents_consumer_<field>_total``
COUNTERS = (
    ("delivered", "Events the handler returned for"),
    ("duplicates", "Events skipped as already handled (same event id)"),
    ("stale", "Events skipped as older than one already handled"),
    ("dead_lettered", "Records sent to the dead-letter topic (on_error = dead-letter)"),
    ("parked", "Records parked: each that parked its key and those parked behind it"),
    ("redriven", "Parked records handed to the handler by a re-drive"),
    ("commits", "Batches whose offsets were committed"),
)


class _Member(Protocol):
    group_id: str
    stats: Any
    parking: ParkedKeys
    owned: frozenset[tuple[str, int]]


class _Collector(Collector):
    def __init__(self, member: _Member) -> None:
        self.member = member

    def collect(self) -> Iterator[Metric]:
        m = self.member
        for name, doc in COUNTERS:
            family = CounterMetricFamily(f"bizevents_consumer_{name}", doc, labels=["group"])
            family.add_metric([m.group_id], getattr(m.stats, name))
            yield family
        owned = m.owned
        # list(): the consumer's event loop parks and unparks while this thread counts
        keys = sum((topic, partition) in owned for _, topic, partition, _ in list(m.parking.parked))
        gauge = GaugeMetricFamily(
            "bizevents_consumer_parked_keys",
            "Keys parked now on the partitions this member owns",
            labels=["group"],
        )
        gauge.add_metric([m.group_id], keys)
        yield gauge


def serve_metrics(member: _Member, host: str, port: int) -> tuple[Any, int]:
    """Serve ``member``'s metrics on ``host:port`` (0: a free port); the HTTP server
    (``shutdown()`` stops it) and the bound port."""
    return serve(_Collector(member), host, port)
