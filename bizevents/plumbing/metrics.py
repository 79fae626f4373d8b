"""Serving Prometheus metrics: one endpoint per process, on loopback by default."""

from __future__ import annotations

from typing import Any

__all__ = ["serve_metrics"]


def serve_metrics(collector: Any, host: str, port: int) -> tuple[Any, int]:
    """Serve ``collector`` in the Prometheus text format on ``host:port`` (0: a free
    port); returns the HTTP server (``shutdown()`` stops it) and the bound port."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server, int(server.server_address[1])
