"""The embedded schema registry: a small Confluent-compatible registry, persisted on disk.

``python -m bizevents.devstack.registry`` runs it as a process; ``run_in_thread`` and ``start``
run it inside another program (tests, the dev stack). See docs/schema-registry.md.
"""

from __future__ import annotations

from bizevents.devstack.registry.server import (
    BasicAuth,
    RegistryThread,
    RunningRegistry,
    create_app,
    run_in_thread,
    start,
)
from bizevents.devstack.registry.store import RegistryStore

__all__ = [
    "BasicAuth",
    "RegistryStore",
    "RegistryThread",
    "RunningRegistry",
    "create_app",
    "run_in_thread",
    "start",
]
