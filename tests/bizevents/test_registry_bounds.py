"""The embedded registry bounds its work (issue 41): nesting, error messages and memory,
a compatibility gate that a mistyped subject does not pass, writes in JSON only.

The registry runs as the dev stack runs it, a process of its own, so that its memory
can be read from /proc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bizevents.devstack.registry.server import MAX_MESSAGE

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
ORDER = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """The URL and pid of a registry started by ``python -m bizevents.devstack.registry``."""
    data = tmp_path_factory.mktemp("registry")
    command = [sys.executable, "-m", "bizevents.devstack.registry", "--port", "0"]
    env = {**os.environ, "BIZEVENTS_LOG_FORMAT": "json"}
    proc = subprocess.Popen(
        [*command, "--data-dir", str(data)], stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stderr is not None
        url = None
        deadline = time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            if '"registry.started"' in line:
                url = json.loads(line)["url"]
        assert url is not None
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture
def http(registry: tuple[str, int]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=registry[0], timeout=60) as session:
        yield session


def peak_rss_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmHWM")


def nested_records(levels: int, leaf: str = '"int"') -> str:
    """Records within records, as text (json.dumps would recurse as deep)."""
    head = "".join(
        f'{{"type":"record","name":"R{i}","fields":[{{"name":"f","type":' for i in range(levels)
    )
    return head + leaf + "}]}" * levels


def nested_arrays(levels: int, leaf: str = '"int"') -> str:
    return '{"type":"array","items":' * levels + leaf + "}" * levels


def register(http: httpx.Client, subject: str, schema: str) -> httpx.Response:
    return http.post(f"/subjects/{subject}/versions", json={"schema": schema})


def refused(response: httpx.Response, status: int, error_code: int) -> str:
    assert response.status_code == status, response.text[:500]
    body = response.json()
    assert body["error_code"] == error_code, body
    message: str = body["message"]
    assert len(message) <= MAX_MESSAGE + 100, len(message)
    return message


@pytest.mark.parametrize(
    "schema", [nested_records(500), nested_arrays(900)], ids=["500-records", "900-arrays"]
)
def test_deep_schemas_are_422_not_500(http: httpx.Client, schema: str) -> None:
    message = refused(register(http, "deep-value", schema), 422, 42201)
    assert "nests deeper than 320" in message


def test_a_deep_request_body_is_400_not_500(http: httpx.Client) -> None:
    body = "[" * 5000 + "]" * 5000
    response = http.post(
        "/subjects/deep-value/versions", content=body, headers={"Content-Type": CONTENT_TYPE}
    )
    assert "nests deeper than 320" in refused(response, 400, 400)


def test_a_schema_at_the_bound_still_registers(http: httpx.Client) -> None:
    """A hundred and five records within records (316 levels of JSON) are a schema like
    any other."""
    assert register(http, "nested-value", nested_records(105)).status_code == 200


def test_hostile_bodies_make_short_messages_and_little_memory(
    http: httpx.Client, registry: tuple[str, int]
) -> None:
    """What made a 27 MB message and gigabytes of RSS: nested records (219 KB), a wide
    record under twenty levels with an unknown type at the bottom, thirty arrays under
    a union that defines a 900 KB name, a schema that is one long word."""
    wide = ",".join(f'{{"name":"f{i}","type":"int"}}' for i in range(9000))
    bodies = {
        "219 KB of nested records": nested_records(3500, '"nosuch"'),
        "wide under deep": nested_records(
            20, f'{{"type":"record","name":"W","fields":[{wide},{{"name":"z","type":"nosuch"}}]}}'
        ),
        "long names under arrays": json.dumps(
            [{"type": "record", "name": "N" + "a" * 900_000, "fields": []}]
        )[:-1]
        + ","
        + nested_arrays(30, '"nosuch"')
        + "]",
        "one long word": "x" * 500_000,
    }
    for name, schema in bodies.items():
        assert len(schema) > 200_000, name
        started = time.monotonic()
        response = register(http, "hostile-value", schema)
        refused(response, 422, 42201)
        assert time.monotonic() - started < 10, name
    assert peak_rss_mb(registry[1]) < 250


def test_compatibility_with_a_missing_subject_is_40401(http: httpx.Client) -> None:
    """As Confluent: a mistyped subject does not pass a compatibility gate."""
    assert register(http, "known-value", ORDER).status_code == 200
    for path in (
        "/compatibility/subjects/nosuch-value/versions/latest",
        "/compatibility/subjects/nosuch-value/versions/1",
    ):
        missing = http.post(path, json={"schema": ORDER})
        assert "nosuch-value" in refused(missing, 404, 40401)
    known = http.post("/compatibility/subjects/known-value/versions/latest", json={"schema": ORDER})
    assert known.json() == {"is_compatible": True}


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
def test_writes_need_a_json_content_type(http: httpx.Client, content_type: str | None) -> None:
    """A web page's form (text/plain and the others a form can send) cannot write."""
    headers = {} if content_type is None else {"Content-Type": content_type}
    body = json.dumps({"schema": ORDER})
    for method, path, content in (
        ("POST", "/subjects/form-value/versions", body),
        ("PUT", "/config", json.dumps({"compatibility": "NONE"})),
        ("PUT", "/mode", json.dumps({"mode": "READWRITE"})),
        ("DELETE", "/subjects/form-value", body),
    ):
        response = http.request(method, path, content=content, headers=headers)
        assert "is not accepted for a write" in refused(response, 415, 415), (method, path)
    assert "form-value" not in http.get("/subjects").json()
    assert http.get("/config").json() == {"compatibilityLevel": "BACKWARD"}


@pytest.mark.parametrize(
    "content_type",
    [CONTENT_TYPE, "application/vnd.schemaregistry+json", "application/json; charset=utf-8"],
)
def test_json_writes_are_accepted(http: httpx.Client, content_type: str) -> None:
    subject = f"json-{content_type.split(';')[0].replace('/', '-')}"
    response = http.post(
        f"/subjects/{subject}/versions",
        content=json.dumps({"schema": ORDER}),
        headers={"Content-Type": content_type},
    )
    assert response.status_code == 200, response.text
    assert http.delete(f"/subjects/{subject}").status_code == 200  # no body, no type: as clients
