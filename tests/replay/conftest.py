"""Fixtures of the replay tests: one local Spark session, settings pointing at the stack."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bizevents.devstack import Endpoints
from bizevents.plumbing.settings import KafkaSettings, RegistrySettings
from bizevents.settings import Settings


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """local[2] with the UI off, shared by every replay test (starting one takes ~10 s)."""
    import pyspark.sql as pyspark_sql  # part of the test set-up: missing, the tests fail

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers in this venv
    session = (
        pyspark_sql.SparkSession.builder.master("local[2]")
        .appName("bizevents-replay-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def stack_settings(stack: Endpoints, state_dir: Path, **extra: Any) -> Settings:
    return Settings(
        kafka=KafkaSettings(bootstrap_servers=stack.bootstrap_servers),
        registry=RegistrySettings(url=stack.registry_url),
        state_dir=state_dir,
        **extra,
    )


@pytest.fixture
def settings(bizevents_stack: Endpoints, tmp_path: Path) -> Settings:
    return stack_settings(bizevents_stack, tmp_path / "state")
