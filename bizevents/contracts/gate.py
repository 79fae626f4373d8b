"""The contract gate: is each ``.avsc`` compatible with what it replaces?

``bizevents contracts check`` and ``register`` are thin shells over this module:

1. :func:`load_contracts` reads the ``.avsc`` files named (files, or directories
   searched recursively);
2. each contract gets its subject from a naming strategy and its default topic;
3. a :class:`SchemaHistory` supplies the subject's compatibility level and earlier
   schemas: :class:`RegistryHistory` (the registry's live versions and level) or
   :class:`GitHistory` (the same path at a git ref, at a level given by the caller);
4. :func:`check_contracts` runs :func:`bizevents.contracts.compatibility.check`, the very
   function the embedded registry uses, and returns one :class:`Verdict` per contract;
5. :func:`register_contracts` registers the contracts whose verdict passed.
"""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import quote

import httpx

from bizevents.contracts.business import TOPIC_PROPERTY, ContractFile, read_avsc
from bizevents.contracts.compatibility import (
    CompatibilityLevel,
    InvalidSchemaError,
    check,
    parse_level,
    parse_schema,
)
from bizevents.contracts.exceptions import (
    ContractError,
    IncompatibleSchemaError,
    RegistryError,
)
from bizevents.contracts.subjects import SubjectStrategy
from bizevents.plumbing.registry import RegistryUnavailableError
from bizevents.plumbing.settings import RegistrySettings

__all__ = [
    "GitHistory",
    "PriorSchema",
    "Registration",
    "RegistryHistory",
    "SchemaHistory",
    "SchemaRegistrar",
    "Status",
    "Verdict",
    "check_contracts",
    "load_contracts",
    "register_contracts",
]

Status = Literal["compatible", "unchanged", "new", "incompatible", "error"]


@dataclass(frozen=True, slots=True)
class PriorSchema:
    """An earlier schema of a subject: its label in messages and its text."""

    label: str
    schema: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """The gate's answer for one contract."""

    contract: ContractFile
    subject: str
    level: CompatibilityLevel | None
    status: Status
    messages: tuple[str, ...] = ()
    compared_with: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status in ("compatible", "unchanged", "new")


@dataclass(frozen=True, slots=True)
class Registration:
    """What ``register`` did for one contract: an id, or why not."""

    verdict: Verdict
    schema_id: int | None = None
    version: int | None = None
    error: str | None = None


class SchemaHistory(Protocol):
    """Where earlier schemas and the compatibility level of a subject come from."""

    def level(self, subject: str) -> CompatibilityLevel: ...

    def prior(self, subject: str, contract: ContractFile) -> list[PriorSchema]:
        """Earlier schemas, oldest first; empty when the contract is new."""
        ...


class SchemaRegistrar(Protocol):
    """Where ``register`` sends schemas (the registry; a fake in tests)."""

    def register(self, subject: str, schema: str) -> tuple[int, int | None]: ...


def load_contracts(paths: Iterable[Path]) -> list[ContractFile]:
    """Every ``.avsc`` under ``paths``, sorted within each directory; fails on the
    first missing path or invalid file with a sentence naming it."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.avsc") if p.is_file())
            if not found:
                raise ContractError(f"{path}: the directory holds no .avsc contract")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise ContractError(f"{path}: no such file or directory")
    unique = list(dict.fromkeys(files))
    return [read_avsc(path) for path in unique]


def check_contracts(
    contracts: Sequence[ContractFile],
    history: SchemaHistory,
    strategy: SubjectStrategy,
) -> list[Verdict]:
    """One verdict per contract, in the order given."""
    subjects = [strategy(c.default_topic, c.fullname) for c in contracts]
    sharing: dict[str, list[ContractFile]] = defaultdict(list)
    for contract, subject in zip(contracts, subjects, strict=True):
        sharing[subject].append(contract)
    verdicts = []
    for contract, subject in zip(contracts, subjects, strict=True):
        others = [c for c in sharing[subject] if c is not contract]
        if others:
            names = ", ".join(f"{c.path} ({c.fullname})" for c in others)
            verdicts.append(
                Verdict(
                    contract,
                    subject,
                    None,
                    "error",
                    (
                        f"subject {subject} is also the subject of {names}; one subject "
                        "evolves one contract (choose another topic, or the record or "
                        "topic-record strategy)",
                    ),
                )
            )
            continue
        verdicts.append(_verdict(contract, subject, history))
    return verdicts


def _verdict(contract: ContractFile, subject: str, history: SchemaHistory) -> Verdict:
    level = history.level(subject)
    prior = history.prior(subject, contract)
    labels = tuple(p.label for p in prior)
    if not prior:
        return Verdict(contract, subject, level, "new")
    try:
        mine = _normal(contract.schema)
        if any(_normal(p.schema) == mine for p in prior):
            return Verdict(contract, subject, level, "unchanged", (), labels)
        result = check(contract.schema, [p.schema for p in prior], level, labels=list(labels))
    except InvalidSchemaError as exc:
        return Verdict(contract, subject, level, "error", (str(exc),), labels)
    status: Status = "compatible" if result.is_compatible else "incompatible"
    return Verdict(contract, subject, level, status, result.messages, labels)


def _normal(schema: str | dict[str, Any]) -> str:
    """The registry's notion of sameness: avro's parsed form, keys sorted."""
    return json.dumps(parse_schema(schema).to_json(), sort_keys=True)


def register_contracts(
    verdicts: Sequence[Verdict], registry: SchemaRegistrar
) -> list[Registration]:
    """Register every contract whose verdict passed; the others are reported, not sent."""
    done = []
    for verdict in verdicts:
        if not verdict.ok:
            done.append(Registration(verdict, error="not registered: it failed the check"))
            continue
        try:
            schema_id, version = registry.register(verdict.subject, verdict.contract.schema_text)
        except (IncompatibleSchemaError, RegistryError) as exc:
            done.append(Registration(verdict, error=str(exc)))
            continue
        done.append(Registration(verdict, schema_id, version))
    return done


# --- the registry ------------------------------------------------------------------------


@dataclass
class RegistryHistory:
    """A Confluent-compatible registry over its REST API (level, live versions, register)."""

    settings: RegistrySettings
    timeout: float = 10.0
    _client: httpx.Client | None = field(default=None, init=False, repr=False)

    def _http(self) -> httpx.Client:
        if self._client is None:
            conf = self.settings.client_config()
            auth = None
            if "basic.auth.user.info" in conf:
                user, _, password = conf["basic.auth.user.info"].partition(":")
                auth = httpx.BasicAuth(user, password)
            self._client = httpx.Client(
                base_url=self.settings.url.rstrip("/"),
                auth=auth,
                verify=conf.get("ssl.ca.location", True),
                timeout=self.timeout,
                headers={"Accept": "application/vnd.schemaregistry.v1+json, application/json"},
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _request(
        self, method: str, path: str, *, json_body: Any = None, params: Any = None
    ) -> tuple[int, Any]:
        try:
            response = self._http().request(method, path, json=json_body, params=params)
        except httpx.HTTPError as exc:
            raise RegistryUnavailableError(
                f"cannot reach the schema registry at {self.settings.url}: {exc}"
            ) from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 500:
            raise RegistryUnavailableError(
                f"the schema registry at {self.settings.url} failed on {method} {path} "
                f"({response.status_code}): {_message(body)}"
            )
        if response.status_code in (401, 403):
            raise RegistryError(
                f"the schema registry at {self.settings.url} refused the credentials "
                f"({response.status_code}): {_message(body)}",
                status=response.status_code,
                error_code=_code(body),
            )
        return response.status_code, body

    def level(self, subject: str) -> CompatibilityLevel:
        status, body = self._request(
            "GET", f"/config/{_q(subject)}", params={"defaultToGlobal": "true"}
        )
        if status == 404:  # older registries: no subject level and no defaultToGlobal
            status, body = self._request("GET", "/config")
        if status != 200 or not isinstance(body, dict):
            raise self._unexpected("read the compatibility level of", subject, status, body)
        return parse_level(body.get("compatibilityLevel") or body.get("compatibility") or "")

    def prior(self, subject: str, contract: ContractFile) -> list[PriorSchema]:
        return self.versions(subject)

    def versions(self, subject: str) -> list[PriorSchema]:
        """Every registered version of ``subject``, oldest first (none when unknown)."""
        status, body = self._request("GET", f"/subjects/{_q(subject)}/versions")
        if status == 404:
            return []
        if status != 200 or not isinstance(body, list):
            raise self._unexpected("list the versions of", subject, status, body)
        found = []
        for number in sorted(int(v) for v in body):
            status, doc = self._request("GET", f"/subjects/{_q(subject)}/versions/{number}")
            if status == 404:  # deleted meanwhile
                continue
            if status != 200 or not isinstance(doc, dict):
                raise self._unexpected(f"read version {number} of", subject, status, doc)
            found.append(PriorSchema(f"version {number}", str(doc["schema"])))
        return found

    def register(self, subject: str, schema: str) -> tuple[int, int | None]:
        """Register ``schema`` under ``subject``: its id and version."""
        status, body = self._request(
            "POST", f"/subjects/{_q(subject)}/versions", json_body={"schema": schema}
        )
        if status == 409:
            raise IncompatibleSchemaError(
                f"the registry refused {subject} as incompatible: {_message(body)}"
            )
        if status != 200 or not isinstance(body, dict) or "id" not in body:
            raise self._unexpected("register a schema under", subject, status, body)
        schema_id = int(body["id"])
        status, found = self._request(
            "POST", f"/subjects/{_q(subject)}", json_body={"schema": schema}
        )
        version = found.get("version") if status == 200 and isinstance(found, dict) else None
        return schema_id, int(version) if version is not None else None

    def _unexpected(self, what: str, subject: str, status: int, body: Any) -> RegistryError:
        return RegistryError(
            f"could not {what} {subject} at {self.settings.url} ({status}): {_message(body)}",
            status=status,
            error_code=_code(body),
        )


def _q(subject: str) -> str:
    return quote(subject, safe="")


def _message(body: Any) -> str:
    if isinstance(body, dict) and "message" in body:
        return str(body["message"])
    return "no message"


def _code(body: Any) -> int:
    if isinstance(body, dict) and isinstance(body.get("error_code"), int):
        return int(body["error_code"])
    return -1


# --- git ---------------------------------------------------------------------------------


@dataclass
class GitHistory:
    """The same ``.avsc`` path at a git ref (a branch, a tag, ``HEAD``, ``origin/main``)."""

    ref: str
    compatibility: CompatibilityLevel = CompatibilityLevel.BACKWARD
    _checked: set[Path] = field(default_factory=set, init=False, repr=False)

    def level(self, subject: str) -> CompatibilityLevel:
        return self.compatibility

    def prior(self, subject: str, contract: ContractFile) -> list[PriorSchema]:
        top = self._toplevel(contract.path)
        relative = contract.path.resolve().relative_to(top).as_posix()
        exists = _git(top, "cat-file", "-e", f"{self.ref}:{relative}")
        if exists.returncode != 0:
            return []
        shown = _git(top, "show", f"{self.ref}:{relative}")
        if shown.returncode != 0:
            raise ContractError(f"git show {self.ref}:{relative} failed: {shown.stderr.strip()}")
        try:
            document = json.loads(shown.stdout)
        except ValueError as exc:
            raise InvalidSchemaError(f"{relative} at {self.ref} is not valid JSON: {exc}") from None
        if isinstance(document, dict):
            document.pop(TOPIC_PROPERTY, None)
        return [PriorSchema(f"{self.ref}:{relative}", json.dumps(document))]

    def _toplevel(self, path: Path) -> Path:
        directory = path.resolve().parent
        found = _git(directory, "rev-parse", "--show-toplevel")
        if found.returncode != 0:
            raise ContractError(
                f"{path} is not inside a git work tree; --against needs one "
                f"({found.stderr.strip()})"
            )
        top = Path(found.stdout.strip()).resolve()
        if top not in self._checked:
            ref = _git(top, "rev-parse", "--verify", "--quiet", f"{self.ref}^{{commit}}")
            if ref.returncode != 0:
                raise ContractError(f"git ref {self.ref!r} names no commit in {top}")
            self._checked.add(top)
        return top


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60
        )
    except FileNotFoundError:
        raise ContractError("git is not installed; --against needs it") from None
