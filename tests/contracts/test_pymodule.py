"""A consumer's module of contracts from their schemas (bizevents.contracts.pymodule):
classes that give the schemas back, and a schema that would write code refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bizevents.contracts.exceptions import ContractError
from bizevents.contracts.pymodule import PulledSchema, contracts_module

STORE = Path(__file__).parents[2] / "examples" / "store" / "contracts"


def _schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((STORE / f"{name}.avsc").read_text())
    return loaded


def test_every_store_contract_comes_back_in_one_module() -> None:
    """Seven contracts, the enum two of them share written once; each class is checked
    against its schema as the module is written."""
    pulled = [PulledSchema(p.stem, _schema(p.stem), None) for p in sorted(STORE.glob("*.avsc"))]
    module = contracts_module(pulled, "The store's contracts.")
    assert module.count("class OrderStatus(") == 1
    assert 'topic = "store.order-placed"' in module


def test_a_schema_that_would_write_a_statement_is_refused(tmp_path: Path) -> None:
    """A fixed's size is written into the module as it is: code there is refused before
    anything runs."""
    marker = tmp_path / "ran"
    schema = _schema("store.orders.OrderPlaced")
    size = f"__import__('pathlib').Path({str(marker)!r}).touch() or 1"
    for hostile in (size, "1)\nimport os\n#"):
        evil = {**schema, "fields": [*schema["fields"], _fixed(hostile)]}
        with pytest.raises(ContractError, match="would write code into the module"):
            contracts_module([PulledSchema("evil-value", evil, "evil")], "x")
    assert not marker.exists()


def _fixed(size: str) -> dict[str, Any]:
    return {"name": "f", "type": {"type": "fixed", "name": "F", "size": size}}
