"""python-schema-registry-client, unchanged, against the embedded registry.

It is the registry client many Python services use besides confluent-kafka's; it asks
for paths with a trailing slash (``/config/``), as Confluent's registry allows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from schema_registry.client import AsyncSchemaRegistryClient, SchemaRegistryClient, schema

from bizevents.devstack.registry import RegistryThread, run_in_thread

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "store",
    "fields": [{"name": "id", "type": "long"}],
}
ORDER_V2 = {
    **ORDER,
    "fields": [*ORDER["fields"], {"name": "note", "type": "string", "default": ""}],
}
BREAKING = {**ORDER, "fields": [{"name": "id", "type": "string"}]}


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[RegistryThread]:
    with run_in_thread(tmp_path / "registry") as handle:
        yield handle


@pytest.fixture
def client(registry: RegistryThread) -> SchemaRegistryClient:
    return SchemaRegistryClient(url=registry.url)


def test_register_and_read_back(client: SchemaRegistryClient) -> None:
    """Register, look up by id, the latest version and the subject's versions."""
    schema_id = client.register("orders-value", schema.AvroSchema(ORDER))
    by_id = client.get_by_id(schema_id)
    assert by_id is not None and by_id.schema == schema.AvroSchema(ORDER).schema
    latest = client.get_schema("orders-value")
    assert latest is not None and (latest.schema_id, latest.version) == (schema_id, 1)
    second = client.register("orders-value", schema.AvroSchema(ORDER_V2))
    assert second != schema_id
    assert client.get_versions("orders-value") == [1, 2]
    found = client.check_version("orders-value", schema.AvroSchema(ORDER_V2))
    assert found is not None and (found.schema_id, found.version) == (second, 2)
    assert client.get_subjects() == ["orders-value"]


def test_versions_of_an_id_and_deletes(client: SchemaRegistryClient) -> None:
    """Where an id is used, one version by number, then a version and the subject deleted."""
    first = client.register("orders-value", schema.AvroSchema(ORDER))
    client.register("orders-value", schema.AvroSchema(ORDER_V2))
    client.register("archive-value", schema.AvroSchema(ORDER))
    used = client.get_schema_subject_versions(first) or []
    assert [(v.subject, v.version) for v in used] == [("archive-value", 1), ("orders-value", 1)]
    one = client.get_schema("orders-value", version=1)
    assert one is not None and one.schema_id == first

    assert client.delete_version("orders-value", 2) == 2
    assert client.get_versions("orders-value") == [1]
    assert client.delete_version("orders-value", 9) is None  # the client's "no such version"
    assert client.delete_subject("orders-value") == [1]
    assert client.get_subjects() == ["archive-value"]
    assert client.get_schema("orders-value") is None


def test_compatibility_checks_and_levels(client: SchemaRegistryClient) -> None:
    """Test a schema, then read and set the global and the subject's level."""
    client.register("orders-value", schema.AvroSchema(ORDER))
    assert client.test_compatibility("orders-value", schema.AvroSchema(ORDER_V2)) is True
    assert client.test_compatibility("orders-value", schema.AvroSchema(BREAKING)) is False

    assert client.get_compatibility() == "BACKWARD"
    assert client.update_compatibility("FULL") is True
    assert client.get_compatibility() == "FULL"

    assert client.update_compatibility("NONE", "orders-value") is True
    assert client.get_compatibility("orders-value") == "NONE"
    assert client.test_compatibility("orders-value", schema.AvroSchema(BREAKING)) is True


def test_the_async_client(registry: RegistryThread) -> None:
    """The client's asyncio flavour, as a Faust or FastAPI service would use it."""

    async def session() -> tuple[int, str, str, object]:
        client = AsyncSchemaRegistryClient(url=registry.url)
        schema_id = await client.register("orders-value", schema.AvroSchema(ORDER))
        before = await client.get_compatibility()
        await client.update_compatibility("FORWARD")
        after = await client.get_compatibility()
        compatible = await client.test_compatibility("orders-value", schema.AvroSchema(ORDER_V2))
        latest = await client.get_schema("orders-value")
        assert latest is not None and latest.schema_id == schema_id
        return schema_id, before, after, compatible

    assert asyncio.run(session()) == (1, "BACKWARD", "FORWARD", True)


@pytest.mark.parametrize("path", ["/config", "/config/", "/subjects/", "/mode", "/mode/"])
def test_paths_answer_with_or_without_a_trailing_slash(registry: RegistryThread, path: str) -> None:
    """Confluent's registry serves both forms; so does ours."""
    response = httpx.get(registry.url + path, timeout=10)
    assert response.status_code == 200, response.text


def test_mode_reads_and_sets_readwrite(registry: RegistryThread) -> None:
    """``/mode`` and a subject's read, set and delete READWRITE, the only mode."""
    assert httpx.get(f"{registry.url}/mode/orders-value", timeout=10).json() == {
        "mode": "READWRITE"
    }
    for path in ("/mode", "/mode/orders-value"):
        for mode in ("READWRITE", "readwrite"):  # Confluent reads it case-insensitively
            ok = httpx.put(registry.url + path, json={"mode": mode}, timeout=10)
            assert ok.status_code == 200 and ok.json() == {"mode": "READWRITE"}, ok.text
    deleted = httpx.delete(f"{registry.url}/mode/orders-value", timeout=10)
    assert deleted.status_code == 200 and deleted.json() == {"mode": "READWRITE"}


@pytest.mark.parametrize(
    ("path", "body", "said"),
    [
        ("/mode", {"mode": "READONLY"}, "Invalid mode 'READONLY'"),
        ("/mode/orders-value", {"mode": "IMPORT"}, "Invalid mode 'IMPORT'"),
        ("/mode", {"compatibility": "NONE"}, "The request body names no mode"),
    ],
)
def test_other_modes_are_refused_in_one_sentence(
    registry: RegistryThread, path: str, body: dict[str, str], said: str
) -> None:
    """Refused with Confluent's 422/42204, saying what was asked and what is served."""
    refused = httpx.put(registry.url + path, json=body, timeout=10)
    assert refused.status_code == 422
    assert refused.json()["error_code"] == 42204
    message = refused.json()["message"]
    assert message.startswith(said) and "READWRITE only" in message, message
