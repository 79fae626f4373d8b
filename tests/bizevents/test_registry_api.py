"""The embedded registry against confluent-kafka's own client, serializers and raw HTTP."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from bizevents.devstack.registry import BasicAuth, RegistryThread, run_in_thread
from bizevents.plumbing.errors import ConfigError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def order(*extra_fields: dict[str, Any]) -> str:
    fields = [{"name": "id", "type": "long"}, *extra_fields]
    return json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": fields})


V1 = order()
V2 = order({"name": "note", "type": "string", "default": ""})
BREAKING = order({"name": "total", "type": "double"})


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "registry"


@pytest.fixture
def registry(data_dir: Path) -> Iterator[RegistryThread]:
    with run_in_thread(data_dir) as handle:
        yield handle


@pytest.fixture
def client(registry: RegistryThread) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url, "max.retries": 0})


@pytest.fixture
def http(registry: RegistryThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=registry.url, timeout=10) as session:
        yield session


def avro(text: str) -> Schema:
    return Schema(text, "AVRO")


def refused(excinfo: pytest.ExceptionInfo[SchemaRegistryError]) -> tuple[int, int]:
    return excinfo.value.http_status_code, excinfo.value.error_code


# the client, unchanged ---------------------------------------------------------------------


def test_register_is_idempotent_and_ids_are_global(client: SchemaRegistryClient) -> None:
    """The same schema, however spelt, keeps its id and version; other subjects share the id."""
    first = client.register_schema("orders-value", avro(V1))
    respaced = json.dumps(json.loads(V1), indent=4, sort_keys=True)
    fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})
    assert fresh.register_schema("orders-value", avro(respaced)) == first
    assert fresh.get_versions("orders-value") == [1]
    assert fresh.register_schema("archive-value", avro(V1)) == first
    assert fresh.register_schema("orders-value", avro(V2)) != first
    assert fresh.get_versions("orders-value") == [1, 2]


def test_client_reads_what_was_registered(client: SchemaRegistryClient) -> None:
    """get_schema, get_latest_version, get_version, get_subjects and lookup_schema agree."""
    id1 = client.register_schema("orders-value", avro(V1))
    id2 = client.register_schema("orders-value", avro(V2))
    client.register_schema("customers-value", avro(V1))

    assert json.loads(client.get_schema(id1).schema_str) == json.loads(V1)
    latest = client.get_latest_version("orders-value")
    assert (latest.schema_id, latest.version, latest.subject) == (id2, 2, "orders-value")
    assert json.loads(latest.schema.schema_str) == json.loads(V2)
    assert client.get_version("orders-value", 1).schema_id == id1
    assert client.get_subjects() == ["customers-value", "orders-value"]
    assert client.get_versions("orders-value") == [1, 2]
    found = client.lookup_schema("orders-value", avro(V1))
    assert (found.schema_id, found.version) == (id1, 1)
    assert client.get_schema_types() == ["AVRO"]
    assert sorted(client.get_subjects_by_schema_id(id1)) == ["customers-value", "orders-value"]
    pairs = {(v.subject, v.version) for v in client.get_schema_versions(id1)}
    assert pairs == {("orders-value", 1), ("customers-value", 1)}


def test_lookup_distinguishes_unknown_subject_and_schema(client: SchemaRegistryClient) -> None:
    """lookup_schema: 40401 for an unknown subject, 40403 for a schema not under it."""
    client.register_schema("orders-value", avro(V1))
    with pytest.raises(SchemaRegistryError) as no_subject:
        client.lookup_schema("nobody-value", avro(V1))
    assert refused(no_subject) == (404, 40401)
    with pytest.raises(SchemaRegistryError) as no_schema:
        client.lookup_schema("orders-value", avro(V2))
    assert refused(no_schema) == (404, 40403)


def test_compatibility_settings_and_checks(client: SchemaRegistryClient) -> None:
    """Levels are set per subject and globally; test_compatibility follows them."""
    client.register_schema("orders-value", avro(V1))
    assert client.get_compatibility() == "BACKWARD"
    assert not client.test_compatibility("orders-value", avro(BREAKING))
    assert client.test_compatibility("orders-value", avro(V2))

    client.set_compatibility("orders-value", "forward")
    assert client.get_compatibility("orders-value") == "FORWARD"
    assert client.test_compatibility("orders-value", avro(BREAKING))
    assert client.test_compatibility_all_versions("orders-value", avro(BREAKING))
    client.register_schema("orders-value", avro(BREAKING))

    client.set_compatibility(level="NONE")
    assert client.get_compatibility() == "NONE"
    assert client.get_compatibility("orders-value") == "FORWARD"


def test_incompatible_registration_is_refused(client: SchemaRegistryClient) -> None:
    """Registration checks the subject's level and refuses with 409."""
    client.register_schema("orders-value", avro(V1))
    with pytest.raises(SchemaRegistryError) as excinfo:
        client.register_schema("orders-value", avro(BREAKING))
    assert refused(excinfo) == (409, 409)
    assert "'Order.total' has no default" in excinfo.value.error_message
    assert client.get_versions("orders-value") == [1]


def test_soft_then_permanent_deletes(client: SchemaRegistryClient) -> None:
    """Deletes are soft first and permanent after, with Confluent's codes in between."""
    id1 = client.register_schema("orders-value", avro(V1))
    client.register_schema("orders-value", avro(V2))

    with pytest.raises(SchemaRegistryError) as not_soft:
        client.delete_version("orders-value", 1, permanent=True)
    assert refused(not_soft) == (404, 40407)
    assert client.delete_version("orders-value", 1) == 1
    assert client.get_versions("orders-value") == [2]
    assert client.get_versions("orders-value", deleted=True) == [1, 2]
    assert client.get_version("orders-value", 1, deleted=True).schema_id == id1
    assert json.loads(client.get_schema(id1).schema_str) == json.loads(V1)  # ids stay readable
    with pytest.raises(SchemaRegistryError) as twice:
        client.delete_version("orders-value", 1)
    assert refused(twice) == (404, 40406)
    assert client.delete_version("orders-value", 1, permanent=True) == 1
    assert client.get_versions("orders-value", deleted=True) == [2]

    with pytest.raises(SchemaRegistryError) as subject_not_soft:
        client.delete_subject("orders-value", permanent=True)
    assert refused(subject_not_soft) == (404, 40405)
    assert client.delete_subject("orders-value") == [2]
    assert client.get_subjects() == []
    assert client.get_subjects(deleted=True) == ["orders-value"]
    with pytest.raises(SchemaRegistryError) as soft_again:
        client.delete_subject("orders-value")
    assert refused(soft_again) == (404, 40404)
    assert client.delete_subject("orders-value", permanent=True) == [2]
    with pytest.raises(SchemaRegistryError) as gone:
        client.get_versions("orders-value")
    assert refused(gone) == (404, 40401)
    # The subject starts over, but the schema keeps its id.
    assert client.register_schema("orders-value", avro(V1)) == id1
    assert client.get_versions("orders-value") == [1]


def test_serializer_round_trip(client: SchemaRegistryClient) -> None:
    """AvroSerializer registers and frames a record; AvroDeserializer reads it back."""
    serializer = AvroSerializer(client, V2)
    deserializer = AvroDeserializer(client)
    ctx = SerializationContext("orders", MessageField.VALUE)
    record = {"id": 42, "note": "gift"}

    payload = serializer(record, ctx)
    assert payload is not None
    magic, schema_id = struct.unpack(">bI", payload[:5])
    assert magic == 0
    assert schema_id == client.get_latest_version("orders-value").schema_id

    fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})
    assert AvroDeserializer(fresh)(payload, ctx) == record
    assert deserializer(payload, ctx) == record


def test_concurrent_registrations_agree(client: SchemaRegistryClient) -> None:
    """Many clients registering at once get one id and one version per distinct schema."""
    url = client._rest_client.base_urls[0]

    def register(text: str) -> int:
        return SchemaRegistryClient({"url": url}).register_schema("orders-value", avro(text))

    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(register, [V1] * 16))
    assert len(set(ids)) == 1
    assert client.get_versions("orders-value") == [1]


# raw HTTP ----------------------------------------------------------------------------------


def post(http: httpx.Client, path: str, schema: str, **params: str) -> httpx.Response:
    return http.post(path, json={"schema": schema}, params=params)


def assert_error(response: httpx.Response, status: int, error_code: int) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == CONTENT_TYPE
    body = response.json()
    assert body["error_code"] == error_code
    assert isinstance(body["message"], str) and body["message"]


def test_root_health_and_content_type(http: httpx.Client) -> None:
    """GET / is {} and /health is ok, in the registry's content type."""
    root = http.get("/")
    assert (root.status_code, root.json()) == (200, {})
    assert root.headers["content-type"] == CONTENT_TYPE
    assert http.get("/health").json() == {"status": "ok"}


def test_register_response_shapes(http: httpx.Client) -> None:
    """Registration answers {"id"}, and both content types are accepted."""
    plain = post(http, "/subjects/orders-value/versions", V1)
    assert plain.status_code == 200
    assert plain.json() == {"id": 1}
    vendor = http.post(
        "/subjects/other-value/versions",
        content=json.dumps({"schema": V1}),
        headers={"Content-Type": CONTENT_TYPE},
    )
    assert vendor.json() == {"id": 1}
    version = http.get("/subjects/orders-value/versions/latest").json()
    assert version["subject"] == "orders-value"
    assert (version["version"], version["id"], version["schemaType"]) == (1, 1, "AVRO")
    assert json.loads(http.get("/subjects/orders-value/versions/1/schema").text) == json.loads(V1)
    assert json.loads(http.get("/schemas/ids/1").json()["schema"]) == json.loads(V1)
    looked_up = post(http, "/subjects/orders-value", V1).json()
    assert {k: looked_up[k] for k in ("subject", "id", "version")} == {
        "subject": "orders-value",
        "id": 1,
        "version": 1,
    }


def test_not_found_codes(http: httpx.Client) -> None:
    """404s carry 40401 (subject), 40402 (version), 40403 (schema)."""
    post(http, "/subjects/orders-value/versions", V1)
    assert_error(http.get("/subjects/nobody/versions"), 404, 40401)
    assert_error(http.get("/subjects/nobody/versions/1"), 404, 40401)
    assert_error(http.get("/subjects/orders-value/versions/7"), 404, 40402)
    assert_error(http.get("/schemas/ids/99"), 404, 40403)
    assert_error(post(http, "/subjects/orders-value", V2), 404, 40403)
    assert_error(http.delete("/subjects/nobody"), 404, 40401)
    assert_error(http.delete("/subjects/orders-value/versions/3"), 404, 40402)


def test_conflict_and_unprocessable_codes(http: httpx.Client) -> None:
    """409 for an incompatible schema; 42201, 42202 and 42203 for invalid input."""
    post(http, "/subjects/orders-value/versions", V1)
    assert_error(post(http, "/subjects/orders-value/versions", BREAKING), 409, 409)
    assert_error(post(http, "/subjects/orders-value/versions", "{not json"), 422, 42201)
    bad_default = order({"name": "n", "type": "int", "default": "x"})
    assert_error(post(http, "/subjects/orders-value/versions", bad_default), 422, 42201)
    protobuf = http.post(
        "/subjects/p-value/versions", json={"schema": "message M {}", "schemaType": "PROTOBUF"}
    )
    assert_error(protobuf, 422, 42201)
    assert_error(http.get("/subjects/orders-value/versions/abc"), 422, 42202)
    assert_error(http.get("/subjects/orders-value/versions/0"), 422, 42202)
    assert_error(http.put("/config", json={"compatibility": "SIDEWAYS"}), 422, 42203)
    assert_error(http.put("/config/orders-value", json={"compatibility": 3}), 422, 42203)


def test_compatibility_endpoints(http: httpx.Client) -> None:
    """Compatibility answers is_compatible, with messages only when verbose."""
    post(http, "/subjects/orders-value/versions", V1)
    quiet = post(http, "/compatibility/subjects/orders-value/versions/latest", BREAKING)
    assert quiet.json() == {"is_compatible": False}
    verbose = post(
        http, "/compatibility/subjects/orders-value/versions/1", BREAKING, verbose="true"
    ).json()
    assert verbose["is_compatible"] is False
    assert any("'Order.total'" in m for m in verbose["messages"])
    every = post(http, "/compatibility/subjects/orders-value/versions", V2, verbose="true")
    assert every.json() == {"is_compatible": True, "messages": []}
    new_subject = post(http, "/compatibility/subjects/new-value/versions/latest", BREAKING)
    assert_error(new_subject, 404, 40401)  # as Confluent: no version to compare with
    every_of_new = post(http, "/compatibility/subjects/new-value/versions", BREAKING)
    assert every_of_new.json() == {"is_compatible": True}
    missing = post(http, "/compatibility/subjects/orders-value/versions/5", V2)
    assert_error(missing, 404, 40402)
    invalid = post(http, "/compatibility/subjects/orders-value/versions", "{", verbose="true")
    assert invalid.json()["is_compatible"] is False


def test_config_endpoints(http: httpx.Client) -> None:
    """Subject config: 40408 unless set or defaultToGlobal; DELETE reverts."""
    assert http.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
    assert_error(http.get("/config/orders-value"), 404, 40408)
    defaulted = http.get("/config/orders-value", params={"defaultToGlobal": "true"})
    assert defaulted.json() == {"compatibilityLevel": "BACKWARD"}
    put = http.put("/config/orders-value", json={"compatibility": "full_transitive"})
    assert put.json() == {"compatibility": "FULL_TRANSITIVE"}
    assert http.get("/config/orders-value").json() == {"compatibilityLevel": "FULL_TRANSITIVE"}
    deleted = http.delete("/config/orders-value")
    assert deleted.json() == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert_error(http.delete("/config/orders-value"), 404, 40401)
    assert http.put("/config", json={"compatibility": "NONE"}).json() == {"compatibility": "NONE"}
    assert http.delete("/config").json() == {"compatibilityLevel": "NONE"}
    assert http.get("/config").json() == {"compatibilityLevel": "BACKWARD"}


def test_unknown_route_answers_in_json(http: httpx.Client) -> None:
    """Routes outside the API still answer in the registry's error shape."""
    assert_error(http.get("/no/such/thing"), 404, 404)
    assert_error(http.patch("/subjects"), 405, 405)


# persistence and auth ----------------------------------------------------------------------


def test_state_survives_a_restart(data_dir: Path) -> None:
    """Ids, versions, deletions and settings are the same after a restart."""
    with run_in_thread(data_dir) as first:
        client = SchemaRegistryClient({"url": first.url})
        id1 = client.register_schema("orders-value", avro(V1))
        id2 = client.register_schema("orders-value", avro(V2))
        client.register_schema("gone-value", avro(BREAKING))
        client.delete_subject("gone-value")
        client.set_compatibility("orders-value", "FULL")

    with run_in_thread(data_dir) as second:
        client = SchemaRegistryClient({"url": second.url})
        assert client.get_versions("orders-value") == [1, 2]
        assert client.get_version("orders-value", 2).schema_id == id2
        assert json.loads(client.get_schema(id1).schema_str) == json.loads(V1)
        assert client.get_subjects() == ["orders-value"]
        assert client.get_subjects(deleted=True) == ["gone-value", "orders-value"]
        assert client.get_compatibility("orders-value") == "FULL"
        # Ids are never reused, even after a restart.
        fresh = order({"name": "x", "type": "int", "default": 0})
        assert client.register_schema("orders-value", avro(fresh)) == 4


def test_one_registry_per_data_dir(registry: RegistryThread, data_dir: Path) -> None:
    """A second registry on the same data directory refuses to start."""
    with pytest.raises(ConfigError, match="already using"):
        run_in_thread(data_dir)


def test_basic_auth(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With basic auth, requests need the credentials; /health stays open; no password logged."""
    password = "s3cret-Pa55"
    auth = BasicAuth("bizevents", password)
    assert password not in repr(auth)
    with run_in_thread(tmp_path / "auth", basic_auth=auth) as server:
        assert_error(httpx.get(f"{server.url}/subjects"), 401, 401)
        assert_error(httpx.get(f"{server.url}/subjects", auth=("bizevents", "wrong")), 401, 401)
        assert_error(httpx.get(f"{server.url}/subjects", auth=("someone", password)), 401, 401)
        assert_error(httpx.get(f"{server.url}/subjects/"), 401, 401)
        assert httpx.get(f"{server.url}/health").status_code == 200
        assert httpx.get(f"{server.url}/health/").status_code == 200

        anonymous = SchemaRegistryClient({"url": server.url, "max.retries": 0})
        with pytest.raises(SchemaRegistryError) as excinfo:
            anonymous.get_subjects()
        assert refused(excinfo) == (401, 401)
        client = SchemaRegistryClient(
            {"url": server.url, "basic.auth.user.info": f"bizevents:{password}"}
        )
        assert client.register_schema("orders-value", avro(V1)) == 1
        assert client.get_subjects() == ["orders-value"]
    captured = capsys.readouterr()
    assert password not in captured.out + captured.err


def test_command_line_serves_until_sigterm(tmp_path: Path) -> None:
    """``python -m bizevents.devstack.registry`` serves with auth from a file; SIGTERM exits 0."""
    password = "file-Pa55word"
    password_file = tmp_path / "password"
    password_file.write_text(password + "\n")
    command = [
        sys.executable, "-m", "bizevents.devstack.registry", "--port", "0",
        "--data-dir", str(tmp_path / "cli"),
        "--basic-auth-user", "ci", "--basic-auth-password-file", str(password_file),
    ]  # fmt: skip
    env = {**os.environ, "BIZEVENTS_LOG_FORMAT": "json"}
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        url = None
        deadline = time.monotonic() + 20
        lines: list[str] = []
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if '"registry.started"' in line:
                url = json.loads(line)["url"]
        assert url is not None, "".join(lines)
        assert httpx.get(f"{url}/health").json() == {"status": "ok"}
        assert httpx.get(f"{url}/subjects").status_code == 401
        assert httpx.get(f"{url}/subjects", auth=("ci", password)).json() == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert password not in "".join(lines) + rest
    assert '"registry.stopped"' in rest
