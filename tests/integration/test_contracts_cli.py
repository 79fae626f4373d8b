"""`bizevents contracts check | register` as CI runs them, against the embedded registry."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from bizevents.contracts.business import TOPIC_PROPERTY
from bizevents.devstack import Endpoints
from tests.cli import bizevents

pytestmark = pytest.mark.integration


def order(*extra: dict[str, Any]) -> dict[str, Any]:
    fields = [{"name": "order_id", "type": "string"}, *extra]
    return {"type": "record", "name": "OrderPlaced", "namespace": "store.orders", "fields": fields}


V1 = order()
COMPATIBLE = order({"name": "note", "type": ["null", "string"], "default": None})
BREAKING = order({"name": "total", "type": "double"})


def write(path: Path, schema: dict[str, Any], topic: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**schema, TOPIC_PROPERTY: topic}, indent=2))
    return path


def one_line(text: str) -> str:
    """stderr as one line: the shared error printer (rich) wraps long sentences."""
    return " ".join(text.split())


def run(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return bizevents("contracts", *args, env=env, cwd=cwd)


@pytest.fixture
def env(bizevents_stack: Endpoints) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("BIZEVENTS_")},
        "BIZEVENTS_REGISTRY__URL": bizevents_stack.registry_url,
        "BIZEVENTS_LOG_FORMAT": "json",
    }


@pytest.fixture
def topic() -> str:
    return f"cli.orders-{uuid.uuid4().hex[:8]}"


def register_directly(registry_url: str, subject: str, schema: dict[str, Any]) -> None:
    response = httpx.post(
        f"{registry_url}/subjects/{subject}/versions", json={"schema": json.dumps(schema)}
    )
    response.raise_for_status()


def versions(registry_url: str, subject: str) -> list[int]:
    response = httpx.get(f"{registry_url}/subjects/{subject}/versions")
    return list(response.json()) if response.status_code == 200 else []


@pytest.mark.parametrize(
    ("schema", "code", "lines"),
    [
        # an optional field added to a registered contract: one line per subject
        (COMPATIBLE, 0, ["{topic}-value  BACKWARD  compatible", "against version 1"]),
        # a required field added: the field path and the reason
        (
            BREAKING,
            1,
            [
                "{topic}-value  BACKWARD  INCOMPATIBLE",
                "'OrderPlaced.total' has no default and is missing in the writer",
            ],
        ),
    ],
    ids=["compatible", "breaking"],
)
def test_check_against_the_registered_version(
    env: dict[str, str],
    bizevents_stack: Endpoints,
    tmp_path: Path,
    topic: str,
    schema: dict[str, Any],
    code: int,
    lines: list[str],
) -> None:
    """``contracts check`` against version 1: exit 0 or 1 and the lines that say why."""
    register_directly(bizevents_stack.registry_url, f"{topic}-value", V1)
    result = run(env, "check", str(write(tmp_path / "order.avsc", schema, topic)))
    assert result.returncode == code, result.stdout + result.stderr
    for line in lines:
        assert line.format(topic=topic) in result.stdout


def test_check_reads_the_subjects_own_level(
    env: dict[str, str], bizevents_stack: Endpoints, tmp_path: Path, topic: str
) -> None:
    """A subject set to NONE lets the breaking change pass; the line says NONE."""
    subject = f"{topic}-value"
    register_directly(bizevents_stack.registry_url, subject, V1)
    httpx.put(
        f"{bizevents_stack.registry_url}/config/{subject}", json={"compatibility": "NONE"}
    ).raise_for_status()
    result = run(env, "check", str(write(tmp_path / "order.avsc", BREAKING, topic)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{subject}  NONE  compatible" in result.stdout


def test_register_registers_only_what_passes(
    env: dict[str, str], bizevents_stack: Endpoints, tmp_path: Path, topic: str
) -> None:
    """One new, one compatible, one breaking contract: two registered, exit 1 naming the third."""
    url = bizevents_stack.registry_url
    good_topic, bad_topic, new_topic = f"{topic}-good", f"{topic}-bad", f"{topic}-new"
    register_directly(url, f"{good_topic}-value", V1)
    register_directly(url, f"{bad_topic}-value", V1)
    catalogue = tmp_path / "catalogue"
    write(catalogue / "good.avsc", COMPATIBLE, good_topic)
    write(catalogue / "bad.avsc", BREAKING, bad_topic)
    write(catalogue / "new.avsc", V1, new_topic)
    result = run(env, "register", str(catalogue))
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"registered {good_topic}-value version 2" in result.stdout
    assert f"registered {new_topic}-value version 1" in result.stdout
    assert f"NOT registered {bad_topic}-value" in result.stdout
    assert versions(url, f"{good_topic}-value") == [1, 2]
    assert versions(url, f"{bad_topic}-value") == [1]
    assert versions(url, f"{new_topic}-value") == [1]

    again = run(env, "check", str(catalogue / "good.avsc"), str(catalogue / "new.avsc"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("unchanged") == 2


@pytest.mark.parametrize(
    ("strategy", "subject"),
    [("record", "{ns}.OrderPlaced"), ("topic-record", "{topic}-{ns}.OrderPlaced")],
)
def test_register_with_other_strategies(
    env: dict[str, str],
    bizevents_stack: Endpoints,
    tmp_path: Path,
    topic: str,
    strategy: str,
    subject: str,
) -> None:
    """--strategy names the subject as Confluent's serializers would."""
    namespace = f"cli.n{uuid.uuid4().hex[:8]}"
    schema = {**V1, "namespace": namespace}
    path = write(tmp_path / "o.avsc", schema, topic)
    result = run(env, "register", "--strategy", strategy, str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    expected = subject.format(ns=namespace, topic=topic)
    assert versions(bizevents_stack.registry_url, expected) == [1]


def test_against_git_ref(env: dict[str, str], tmp_path: Path) -> None:
    """--against HEAD compares with the committed file: breaking exits 1, compatible 0."""
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=repo,
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    path = write(repo / "contracts" / "order.avsc", V1, "store.order-placed")
    git("add", ".")
    git("commit", "-q", "-m", "v1")

    write(path, BREAKING, "store.order-placed")
    broken = run(env, "check", "--against", "HEAD", "contracts", cwd=repo)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "store.order-placed-value  BACKWARD  INCOMPATIBLE" in broken.stdout
    assert "'OrderPlaced.total'" in broken.stdout
    assert "HEAD:contracts/order.avsc" in broken.stdout

    write(path, COMPATIBLE, "store.order-placed")
    fine = run(env, "check", "--against", "HEAD", "contracts", cwd=repo)
    assert fine.returncode == 0, fine.stdout + fine.stderr
    assert "store.order-placed-value  BACKWARD  compatible" in fine.stdout

    forward = run(env, "check", "--against", "HEAD", "--level", "forward", "contracts", cwd=repo)
    assert forward.returncode == 0, forward.stdout + forward.stderr
    assert "FORWARD  compatible" in forward.stdout

    bad_ref = run(env, "check", "--against", "nope", "contracts", cwd=repo)
    assert bad_ref.returncode == 1
    assert "git ref 'nope' names no commit" in one_line(bad_ref.stderr)


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: p / "missing.avsc", "no such file or directory"),
        (lambda p: (p / "bad.avsc").write_text("{oops") and p / "bad.avsc", "not valid JSON"),
    ],
    ids=["missing", "invalid"],
)
def test_bad_input_exits_1_with_a_sentence(
    env: dict[str, str], tmp_path: Path, make: Any, needle: str
) -> None:
    """A missing path or an invalid .avsc: exit 1 and one sentence on stderr."""
    result = run(env, "check", str(make(tmp_path)))
    assert result.returncode == 1
    assert needle in one_line(result.stderr)
    assert "Traceback" not in result.stderr


def test_unreachable_registry_exits_1_with_a_sentence(env: dict[str, str], tmp_path: Path) -> None:
    """No registry at the URL: exit 1 naming it, no traceback."""
    path = write(tmp_path / "o.avsc", V1, "store.o")
    result = run({**env, "BIZEVENTS_REGISTRY__URL": "http://127.0.0.1:9"}, "check", str(path))
    assert result.returncode == 1
    assert "cannot reach the schema registry at http://127.0.0.1:9" in one_line(result.stderr)
    assert "Traceback" not in result.stderr


def test_sample_catalogue_checks_clean(env: dict[str, str]) -> None:
    """The committed sample catalogue passes the gate (new subjects or unchanged)."""
    catalogue = Path(__file__).parent.parent / "contracts" / "fixtures" / "avsc"
    result = run(env, "check", str(catalogue))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 contract(s) checked, all compatible" in result.stdout


def test_check_names_a_column_a_pinned_translator_reads_that_a_ddl_dropped(
    env: dict[str, str], bizevents_stack: Endpoints, tmp_path: Path, topic: str
) -> None:
    """orders@2 declares store.orders.status; capture registered a layout without it (the
    column was dropped): the check names translator, column and version, and exits 1;
    with the column back it passes."""
    from bizevents.contracts.technical import AvroEncoder
    from tests.store_technical import orders_table

    prefix = f"ddl{uuid.uuid4().hex[:8]}"
    subject = f"{prefix}.store.orders-value"
    layout = AvroEncoder(orders_table(prefix), 0, 0).schemas.value
    register_directly(bizevents_stack.registry_url, subject, layout)
    pinned = {
        **env,
        "BIZEVENTS_TRANSLATORS": json.dumps({"orders": 2}),
        "BIZEVENTS_TRANSLATE__TOPIC_PREFIX": prefix,
    }
    contract = write(tmp_path / "order.avsc", V1, topic)
    result = run(pinned, "check", str(contract))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"orders@2  store.orders  ok against version 1 of {prefix}.store.orders" in (
        result.stdout
    )

    dropped = json.loads(json.dumps(layout))
    row = next(f for f in dropped["fields"] if f["name"] == "before")["type"][1]
    row["fields"] = [f for f in row["fields"] if f["name"] != "status"]
    register_directly(bizevents_stack.registry_url, subject, dropped)
    result = run(pinned, "check", str(contract))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "orders@2  store.orders  BROKEN against version 2" in result.stdout
    assert (
        "orders@2 reads store.orders.status: the table's latest layout (version 2) has no "
        "such column (it had it in version 1)"
    ) in result.stdout
    assert run(pinned, "check", "--no-translators", str(contract)).returncode == 0
