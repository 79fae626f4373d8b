"""bench/latency.py's capture setting, as the capture CLI reads it from the file the
bench writes."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.latency import capture_config
from bizevents.capture.config import load_capture_config
from tests.capture.capture_helpers import write_config


def _read_back(tmp_path: Path, by_partition: bool) -> dict[str, tuple[str, ...]]:
    args = argparse.Namespace(transactions=True, by_partition=by_partition, capture_linger_ms=None)
    written = write_config(tmp_path / "capture.toml", capture_config(args, "t", tmp_path))
    return load_capture_config(written).routing


def test_by_partition_routes_the_orders_and_their_items_by_order_id(tmp_path: Path) -> None:
    """``--by-partition``: capture routes orders by id and items by order id (the worker
    by partition refuses unrouted topics); else nothing is routed, as before."""
    assert _read_back(tmp_path, True) == {
        "store.orders": ("id",),
        "store.order_items": ("order_id",),
    }
    assert _read_back(tmp_path, False) == {}
