"""`bizevents contracts pull`: a consumer's typed events from the registry, without the
producer's package."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from bizevents_store.contracts import OrderLine, OrderPlaced
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.contracts.business import BusinessEvent
from bizevents.contracts.serde import BusinessDeserializer, BusinessSerializer
from bizevents.devstack import Endpoints

pytestmark = pytest.mark.integration


def _pull(registry_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIZEVENTS_")}
    env["BIZEVENTS_REGISTRY__URL"] = registry_url
    return subprocess.run(
        [sys.executable, "-m", "bizevents", "contracts", "pull", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"pulled_{uuid.uuid4().hex}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_pulled_module_reads_the_producers_events(
    bizevents_stack: Endpoints, tmp_path: Path
) -> None:
    topic = f"pull.order-placed-{uuid.uuid4().hex[:8]}"
    registry = bizevents_stack.registry_url
    httpx.post(
        f"{registry}/subjects/{topic}-value/versions",
        json={"schema": OrderPlaced.contract_schema_text()},
    ).raise_for_status()

    out = tmp_path / "store_events.py"
    pulled = _pull(registry, f"{topic}-value", "--out", str(out))
    assert pulled.returncode == 0, pulled.stderr
    assert f"{topic}-value  OrderPlaced  {out}" in pulled.stdout
    module = _load(out)
    theirs = module.OrderPlaced
    assert issubclass(theirs, BusinessEvent) and theirs is not OrderPlaced
    assert theirs.contract_fullname() == "store.orders.OrderPlaced"
    assert theirs.contract_topic() == topic
    assert theirs.contract_schema() == OrderPlaced.contract_schema()

    # the producer's event, written as the worker writes it, read as the pulled class
    client = SchemaRegistryClient({"url": registry})
    at = datetime(2026, 11, 29, 1, 23, tzinfo=UTC)
    line = OrderLine(line_no=1, product_id=3, quantity=2, unit_price=Decimal("4.95"))
    event = OrderPlaced(
        order_id=5812,
        customer_id=9,
        total=Decimal("9.90"),
        currency="EUR",
        placed_at=at,
        items=[line],
    )
    value = BusinessSerializer(client)(event, topic)
    read = BusinessDeserializer(client, theirs)(value, topic)
    assert type(read) is theirs
    assert read.total == Decimal("9.90") and read.placed_at == at
    assert read.items[0].unit_price == Decimal("4.95")


def test_a_subject_the_registry_lacks_is_one_sentence(
    bizevents_stack: Endpoints, tmp_path: Path
) -> None:
    out = tmp_path / "nothing.py"
    missing = _pull(bizevents_stack.registry_url, "pull.nothing-value", "--out", str(out))
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert "has no subject pull.nothing-value" in " ".join(missing.stderr.split())
    assert not out.exists()
