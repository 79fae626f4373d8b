"""One metrics endpoint per process: a collector served on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bizevents.plumbing.metrics import serve_metrics
from tests.metrics import scrape


class _Answer(Collector):
    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("answer", "The answer", value=42)


def test_a_collector_is_served_on_the_port_it_was_given() -> None:
    ports: list[int] = []

    def serve(host: str, port: int) -> tuple[object, int]:
        server, bound = serve_metrics(_Answer(), host, port)
        ports.append(bound)
        return server, bound

    assert scrape(serve) == {("answer", ()): 42.0}
    assert ports[0] > 0  # port 0 asked for a free one; the one bound is returned
