"""Fixtures of the translator tests: a business serializer on an in-process registry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.contracts.serde import BusinessSerializer
from bizevents.devstack.registry import run_in_thread


@pytest.fixture(scope="module")
def serializer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BusinessSerializer]:
    """A serializer whose registry (the dev stack's, in this process) lives per module."""
    with run_in_thread(Path(tmp_path_factory.mktemp("registry"))) as running:
        yield BusinessSerializer(SchemaRegistryClient({"url": running.url}))
