"""The contract gate's logic: loading .avsc files, verdicts, registration, git history."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bizevents.contracts.business import TOPIC_PROPERTY, ContractFile
from bizevents.contracts.compatibility import CompatibilityLevel
from bizevents.contracts.exceptions import (
    ContractError,
    IncompatibleSchemaError,
    InvalidSchemaError,
)
from bizevents.contracts.gate import (
    GitHistory,
    PriorSchema,
    RegistryHistory,
    check_contracts,
    load_contracts,
    register_contracts,
)
from bizevents.contracts.subjects import subject_strategy

TOPIC = subject_strategy("topic")


def order(*extra: dict[str, Any], name: str = "OrderPlaced") -> dict[str, Any]:
    fields = [{"name": "order_id", "type": "string"}, *extra]
    return {"type": "record", "name": name, "namespace": "store.orders", "fields": fields}


V1 = order()
V2_OPTIONAL = order({"name": "note", "type": ["null", "string"], "default": None})
V2_REQUIRED = order({"name": "total", "type": "double"})


def write(path: Path, schema: dict[str, Any], topic: str | None = "store.order-placed") -> Path:
    document = {**schema, TOPIC_PROPERTY: topic} if topic else schema
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2))
    return path


@dataclass
class FakeHistory:
    """Earlier schemas per subject, a level per subject (BACKWARD by default)."""

    versions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    levels: dict[str, CompatibilityLevel] = field(default_factory=dict)
    registered: list[tuple[str, str]] = field(default_factory=list)
    refuse: set[str] = field(default_factory=set)

    def level(self, subject: str) -> CompatibilityLevel:
        return self.levels.get(subject, CompatibilityLevel.BACKWARD)

    def prior(self, subject: str, contract: ContractFile) -> list[PriorSchema]:
        return [
            PriorSchema(f"version {n}", json.dumps(s))
            for n, s in enumerate(self.versions.get(subject, []), 1)
        ]

    def register(self, subject: str, schema: str) -> tuple[int, int | None]:
        if subject in self.refuse:
            raise IncompatibleSchemaError(f"the registry refused {subject}")
        self.registered.append((subject, schema))
        return len(self.registered), 1


def test_load_contracts_from_files_and_directories(tmp_path: Path) -> None:
    """Directories are searched recursively, sorted; a file named twice is read once."""
    b = write(tmp_path / "cat" / "b.avsc", order(name="B"))
    a = write(tmp_path / "cat" / "sub" / "a.avsc", order(name="A"))
    (tmp_path / "cat" / "README.md").write_text("not a contract")
    found = load_contracts([tmp_path / "cat", b])
    assert [c.path for c in found] == [b, a]
    assert found[0].fullname == "store.orders.B"
    assert found[0].topic == "store.order-placed"
    assert TOPIC_PROPERTY not in found[0].schema


@pytest.mark.parametrize(
    ("setup", "error", "match"),
    [
        (lambda p: p / "missing.avsc", ContractError, "no such file or directory"),
        (lambda p: (p / "empty").mkdir() or p / "empty", ContractError, "holds no .avsc"),
        (
            lambda p: (p / "bad.avsc").write_text("{") and p / "bad.avsc",
            InvalidSchemaError,
            "bad.avsc is not valid JSON",
        ),
    ],
    ids=["missing", "empty-dir", "invalid"],
)
def test_load_contracts_fails_with_a_sentence(
    tmp_path: Path, setup: Any, error: type[Exception], match: str
) -> None:
    """A missing path, an empty directory or an invalid file stops the gate, named."""
    with pytest.raises(error, match=match):
        load_contracts([setup(tmp_path)])


@pytest.mark.parametrize(
    ("history", "schema", "status"),
    [
        ([], V1, "new"),
        ([V1], V1, "unchanged"),
        ([V1, V2_OPTIONAL], V1, "unchanged"),
        ([V1], V2_OPTIONAL, "compatible"),
        ([V1], V2_REQUIRED, "incompatible"),
    ],
    ids=["new", "unchanged", "older-version", "compatible", "incompatible"],
)
def test_verdicts(
    tmp_path: Path, history: list[dict[str, Any]], schema: dict[str, Any], status: str
) -> None:
    """New subjects pass, known schemas pass, changes are checked at the subject's level."""
    contracts = load_contracts([write(tmp_path / "o.avsc", schema)])
    fake = FakeHistory({"store.order-placed-value": history})
    [verdict] = check_contracts(contracts, fake, TOPIC)
    assert verdict.subject == "store.order-placed-value"
    assert verdict.level is CompatibilityLevel.BACKWARD
    assert verdict.status == status
    assert verdict.ok is (status != "incompatible")


def test_incompatible_verdict_names_field_and_reason(tmp_path: Path) -> None:
    """The message names the version, the field path and why."""
    contracts = load_contracts([write(tmp_path / "o.avsc", V2_REQUIRED)])
    [verdict] = check_contracts(contracts, FakeHistory({"store.order-placed-value": [V1]}), TOPIC)
    assert verdict.messages == (
        "new schema cannot read data written with version 1: reader field "
        "'OrderPlaced.total' has no default and is missing in the writer",
    )


def test_the_subjects_level_decides(tmp_path: Path) -> None:
    """Removing a field is backward compatible but not forward; NONE lets anything pass."""
    contracts = load_contracts([write(tmp_path / "o.avsc", V1)])
    history = {"store.order-placed-value": [V2_REQUIRED]}
    for level, ok in [
        (CompatibilityLevel.BACKWARD, True),
        (CompatibilityLevel.FORWARD, False),
        (CompatibilityLevel.FULL, False),
        (CompatibilityLevel.NONE, True),
    ]:
        fake = FakeHistory(history, {"store.order-placed-value": level})
        [verdict] = check_contracts(contracts, fake, TOPIC)
        assert verdict.ok is ok, level


def test_transitive_levels_check_every_version(tmp_path: Path) -> None:
    """Only a transitive level sees an incompatibility with an older version."""
    v3 = order({"name": "total", "type": "double", "default": 0.0})
    old_total = order({"name": "total", "type": "string"})
    contracts = load_contracts([write(tmp_path / "o.avsc", v3)])
    history = {"store.order-placed-value": [old_total, V1]}
    plain = FakeHistory(history)
    transitive = FakeHistory(
        history, {"store.order-placed-value": CompatibilityLevel.BACKWARD_TRANSITIVE}
    )
    assert check_contracts(contracts, plain, TOPIC)[0].ok
    [verdict] = check_contracts(contracts, transitive, TOPIC)
    assert not verdict.ok and "version 1" in verdict.messages[0]


def test_contracts_sharing_a_subject_are_refused(tmp_path: Path) -> None:
    """Two records on one topic with the topic strategy: both fail, naming each other."""
    a = write(tmp_path / "a.avsc", order(name="A"))
    b = write(tmp_path / "b.avsc", order(name="B"))
    verdicts = check_contracts(load_contracts([a, b]), FakeHistory(), TOPIC)
    assert [v.status for v in verdicts] == ["error", "error"]
    assert "store.orders.B" in verdicts[0].messages[0]
    record = check_contracts(load_contracts([a, b]), FakeHistory(), subject_strategy("record"))
    assert [v.subject for v in record] == ["store.orders.A", "store.orders.B"]
    assert all(v.ok for v in record)


def test_default_topic_without_the_property(tmp_path: Path) -> None:
    """A plain .avsc (no topic metadata) gets the <domain>.<kebab name> topic."""
    path = write(tmp_path / "o.avsc", V1, topic=None)
    [verdict] = check_contracts(load_contracts([path]), FakeHistory(), TOPIC)
    assert verdict.subject == "store.order-placed-value"


def test_register_only_what_passed(tmp_path: Path) -> None:
    """Failed contracts are not sent; a registry refusal is reported, not raised."""
    good = write(tmp_path / "good.avsc", V2_OPTIONAL, topic="store.good")
    bad = write(tmp_path / "bad.avsc", V2_REQUIRED, topic="store.bad")
    racy = write(tmp_path / "racy.avsc", V1, topic="store.racy")
    fake = FakeHistory(
        {"store.good-value": [V1], "store.bad-value": [V1]}, refuse={"store.racy-value"}
    )
    verdicts = check_contracts(load_contracts([good, bad, racy]), fake, TOPIC)
    done = register_contracts(verdicts, fake)
    assert [s for s, _ in fake.registered] == ["store.good-value"]
    assert [d.error is None for d in done] == [True, False, False]
    assert "failed the check" in (done[1].error or "")
    assert "refused" in (done[2].error or "")


def test_registry_history_reports_an_unreachable_registry() -> None:
    """No registry at the URL: a sentence naming the URL."""
    from bizevents.plumbing.registry import RegistryUnavailableError
    from bizevents.plumbing.settings import RegistrySettings

    registry = RegistryHistory(RegistrySettings(url="http://127.0.0.1:9"), timeout=2)
    with pytest.raises(RegistryUnavailableError, match=r"http://127\.0\.0\.1:9"):
        registry.level("x-value")


# --- git -----------------------------------------------------------------------------


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q")
    write(tmp_path / "contracts" / "o.avsc", V1)
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "v1")
    return tmp_path


def test_git_history_reads_the_file_at_the_ref(repo: Path) -> None:
    """The same path at HEAD is the earlier schema; a file new since then has none."""
    path = write(repo / "contracts" / "o.avsc", V2_REQUIRED)
    fresh = write(repo / "contracts" / "new.avsc", order(name="New"), topic="store.new")
    history = GitHistory("HEAD")
    contracts = load_contracts([path, fresh])
    [prior] = history.prior("s", contracts[0])
    assert prior.label == "HEAD:contracts/o.avsc"
    assert json.loads(prior.schema) == V1
    assert history.prior("s", contracts[1]) == []
    verdicts = check_contracts(contracts, history, TOPIC)
    assert [v.status for v in verdicts] == ["incompatible", "new"]


def test_git_history_level_is_the_callers(repo: Path) -> None:
    """--level FORWARD: dropping a field that the old reader needs fails."""
    git(repo, "commit", "-q", "--allow-empty", "-m", "noop")
    write(repo / "contracts" / "o.avsc", V2_REQUIRED)
    git(repo, "commit", "-q", "-am", "v2")
    path = write(repo / "contracts" / "o.avsc", V1)
    contracts = load_contracts([path])
    assert check_contracts(contracts, GitHistory("HEAD"), TOPIC)[0].ok
    forward = GitHistory("HEAD", CompatibilityLevel.FORWARD)
    assert not check_contracts(contracts, forward, TOPIC)[0].ok


def test_git_history_bad_ref_and_no_repo(
    repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An unknown ref, or a file outside any git work tree, is a clear ContractError."""
    contracts = load_contracts([repo / "contracts" / "o.avsc"])
    with pytest.raises(ContractError, match="names no commit"):
        GitHistory("no-such-branch").prior("s", contracts[0])
    outside = write(tmp_path_factory.mktemp("plain") / "o.avsc", V1)
    with pytest.raises(ContractError, match="not inside a git work tree"):
        GitHistory("HEAD").prior("s", load_contracts([outside])[0])
