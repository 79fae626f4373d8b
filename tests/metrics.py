"""Scraping a metrics endpoint the way Prometheus does, for the tests of what it serves."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

#: (sample name, its labels as sorted pairs) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(serve: Callable[[str, int], tuple[Any, int]]) -> Samples:
    """Serves on a free loopback port with ``serve(host, port)``, scrapes once, stops."""
    server, port = serve("127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    finally:
        server.shutdown()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
