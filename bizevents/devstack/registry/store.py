"""The registry's state: schemas by id, subjects' versions, compatibility settings.

Plain synchronous code with no I/O except ``save``/``load`` of one JSON file, written
atomically (temporary file, fsync, ``os.replace``) after every change, so ids and
versions survive a restart and a crash never leaves half a file. Callers serialise
mutations (the server holds one asyncio lock around them).

Semantics follow Confluent's registry: ids are global and never reused; the same
schema gets the same id under every subject; versions number per subject from 1;
a soft-deleted version keeps its number (and its id stays readable) until it is
deleted permanently; compatibility is checked against the subject's live versions.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import avro.schema
import structlog

from bizevents.contracts.compatibility import (
    CompatibilityLevel,
    CompatibilityResult,
    InvalidSchemaError,
    check,
    parse_level,
    parse_schema,
)
from bizevents.contracts.exceptions import RegistryError
from bizevents.devstack.registry import errors
from bizevents.plumbing.errors import ConfigError

log = structlog.get_logger(__name__)

STATE_FILE = "registry.json"
FORMAT_VERSION = 1
DEFAULT_LEVEL = CompatibilityLevel.BACKWARD
SUPPORTED_TYPES = ("AVRO",)
_MAX_VERSION = 2**31 - 1
#: How deep a request body or a schema may nest JSON objects and arrays: about a
#: hundred records within records (three levels each), the depth the suite's hostile
#: schemas reach to test the readers' fallbacks. Deeper, the parsers' recursion (avro's
#: failed at about 500 records) costs more than any schema needs.
MAX_NESTING = 320
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def too_deep(text: str) -> bool:
    """Whether the JSON ``text`` nests deeper than :data:`MAX_NESTING`, read without
    recursion (brackets inside strings do not count)."""
    depth = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if bracket.group() in "[{" else -1
        if depth > MAX_NESTING:
            return True
    return False


@dataclass(frozen=True, slots=True)
class StoredSchema:
    """One schema under its global id; ``key`` is its normalised form, for equality."""

    id: int
    schema_type: str
    schema: str
    key: str


@dataclass(slots=True)
class SubjectVersion:
    version: int
    schema_id: int
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class Candidate:
    """A schema as a client submitted it, parsed and normalised."""

    schema_type: str
    schema: str
    key: str
    parsed: avro.schema.Schema


def parse_candidate(body: Any) -> Candidate:
    """Validate a request body ``{"schema": ..., "schemaType": ...}``.

    Equality uses avro's normalised JSON with sorted keys rather than the Parsing
    Canonical Form: PCF drops defaults, aliases and logical types, and two schemas
    that differ only there must not share an id, since compatibility depends on them.
    Whitespace, key order and ``{"type": "string"}`` versus ``"string"`` do not matter.
    """
    if not isinstance(body, dict):
        raise errors.bad_request("the request body must be a JSON object")
    schema_type = body.get("schemaType") or "AVRO"
    if schema_type not in SUPPORTED_TYPES:
        raise errors.invalid_schema(
            f"Invalid schema type {schema_type!r}: this registry supports AVRO only"
        )
    if body.get("references"):
        raise errors.invalid_schema("Schema references are not supported by this registry")
    text = body.get("schema")
    if not isinstance(text, str) or not text.strip():
        raise errors.invalid_schema("Empty schema")
    if too_deep(text):
        raise errors.invalid_schema(
            f"Invalid schema: it nests deeper than {MAX_NESTING} JSON objects and arrays"
        )
    try:
        parsed = parse_schema(text)
    except InvalidSchemaError as exc:
        raise errors.invalid_schema(f"Invalid schema: {exc}") from exc
    normal = parsed.to_json()
    return Candidate(
        schema_type=schema_type,
        schema=json.dumps(normal, separators=(",", ":")),
        key=json.dumps(normal, sort_keys=True, separators=(",", ":")),
        parsed=parsed,
    )


def parse_version(text: str) -> int | None:
    """A version path segment: a number in [1, 2^31-1], or ``latest``/``-1`` (None)."""
    if text == "latest":
        return None
    try:
        number = int(text)
    except ValueError:
        raise errors.invalid_version(text) from None
    if number == -1:
        return None
    if not 1 <= number <= _MAX_VERSION:
        raise errors.invalid_version(text)
    return number


class RegistryStore:
    """The registry's whole state, persisted in ``data_dir`` (or memory only if None)."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self._path = None if data_dir is None else Path(data_dir) / STATE_FILE
        self._schemas: dict[int, StoredSchema] = {}
        self._by_key: dict[str, int] = {}
        self._subjects: dict[str, list[SubjectVersion]] = {}
        self._global_level: CompatibilityLevel | None = None
        self._subject_levels: dict[str, CompatibilityLevel] = {}
        self._next_id = 1
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            if self._path.exists():
                self._load(json.loads(self._path.read_text(encoding="utf-8")))

    # persistence -----------------------------------------------------------------------

    def _to_doc(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "next_id": self._next_id,
            "global_level": None if self._global_level is None else self._global_level.value,
            "subject_levels": {s: lvl.value for s, lvl in self._subject_levels.items()},
            "schemas": [asdict(s) for s in self._schemas.values()],
            "subjects": {
                subject: [asdict(v) for v in versions]
                for subject, versions in self._subjects.items()
            },
        }

    def _load(self, doc: dict[str, Any]) -> None:
        if doc.get("format") != FORMAT_VERSION:
            raise ConfigError(
                f"{self._path} has state format {doc.get('format')!r}; "
                f"this registry reads format {FORMAT_VERSION}"
            )
        self._schemas = {s["id"]: StoredSchema(**s) for s in doc["schemas"]}
        self._by_key = {s.key: s.id for s in self._schemas.values()}
        self._subjects = {
            subject: [SubjectVersion(**v) for v in versions]
            for subject, versions in doc["subjects"].items()
        }
        level = doc.get("global_level")
        self._global_level = None if level is None else CompatibilityLevel(level)
        self._subject_levels = {
            s: CompatibilityLevel(lvl) for s, lvl in doc["subject_levels"].items()
        }
        self._next_id = doc["next_id"]

    def _save(self) -> None:
        if self._path is None:
            return
        data = json.dumps(self._to_doc(), indent=1, sort_keys=True).encode("utf-8")
        fd, tmp = tempfile.mkstemp(prefix=".registry-", suffix=".tmp", dir=self._path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self._path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        # The rename itself must reach the disk too, or a crash could undo it.
        dir_fd = os.open(self._path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    @contextmanager
    def _change(self) -> Iterator[None]:
        """Apply a mutation and persist it; if it cannot be persisted, undo it."""
        before = self._to_doc()
        try:
            yield
            self._save()
        except OSError as exc:
            self._load(before)
            log.error("registry.persist_failed", path=str(self._path), error=str(exc))
            raise errors.store_failed(f"could not write the registry state: {exc}") from exc
        except BaseException:
            self._load(before)
            raise

    # schemas ---------------------------------------------------------------------------

    def schema_by_id(self, schema_id: int) -> StoredSchema:
        stored = self._schemas.get(schema_id)
        if stored is None:
            raise errors.schema_not_found(schema_id)
        return stored

    def usages(self, schema_id: int, *, deleted: bool = False) -> list[tuple[str, int]]:
        """(subject, version) pairs that use ``schema_id``."""
        self.schema_by_id(schema_id)
        return [
            (subject, v.version)
            for subject, versions in sorted(self._subjects.items())
            for v in versions
            if v.schema_id == schema_id and (deleted or not v.deleted)
        ]

    # subjects and versions -------------------------------------------------------------

    def subjects(
        self, *, prefix: str = "", deleted: bool = False, deleted_only: bool = False
    ) -> list[str]:
        found = []
        for subject, versions in sorted(self._subjects.items()):
            if not subject.startswith(prefix) or not versions:
                continue
            live = any(not v.deleted for v in versions)
            if deleted_only:
                if not live:
                    found.append(subject)
            elif live or deleted:
                found.append(subject)
        return found

    def versions(
        self, subject: str, *, deleted: bool = False, deleted_only: bool = False
    ) -> list[int]:
        chosen = [
            v.version
            for v in self._subjects.get(subject, [])
            if (v.deleted if deleted_only else (deleted or not v.deleted))
        ]
        if not chosen and not deleted_only:
            raise errors.subject_not_found(subject)
        return chosen

    def version(
        self, subject: str, version: int | None, *, deleted: bool = False
    ) -> SubjectVersion:
        """One version of a subject (``None``: the latest), as Confluent resolves it."""
        candidates = [v for v in self._subjects.get(subject, []) if deleted or not v.deleted]
        if not candidates:
            raise errors.subject_not_found(subject)
        if version is None:
            return candidates[-1]
        for v in candidates:
            if v.version == version:
                return v
        raise errors.version_not_found(version)

    def lookup(
        self, subject: str, candidate: Candidate, *, deleted: bool = False
    ) -> SubjectVersion:
        """The version of ``subject`` holding this schema (the newest if several)."""
        versions = [v for v in self._subjects.get(subject, []) if deleted or not v.deleted]
        if not versions:
            raise errors.subject_not_found(subject)
        schema_id = self._by_key.get(candidate.key)
        matches = [v for v in versions if v.schema_id == schema_id]
        if not matches:
            raise errors.schema_not_found()
        live = [v for v in matches if not v.deleted]
        return (live or matches)[-1]

    def register(self, subject: str, candidate: Candidate) -> tuple[int, bool]:
        """Register ``candidate`` under ``subject``: (schema id, whether a version was added)."""
        versions = self._subjects.get(subject, [])
        existing_id = self._by_key.get(candidate.key)
        for v in reversed(versions):
            if not v.deleted and v.schema_id == existing_id:
                return v.schema_id, False
        result = self.check(subject, candidate, None)
        if not result.is_compatible:
            raise errors.incompatible_schema(subject, result.messages)
        with self._change():
            if existing_id is None:
                existing_id = self._next_id
                self._next_id += 1
                stored = StoredSchema(
                    existing_id, candidate.schema_type, candidate.schema, candidate.key
                )
                self._schemas[existing_id] = stored
                self._by_key[candidate.key] = existing_id
            number = versions[-1].version + 1 if versions else 1
            self._subjects.setdefault(subject, []).append(SubjectVersion(number, existing_id))
        log.info("registry.registered", subject=subject, schema_id=existing_id, version=number)
        return existing_id, True

    def delete_version(self, subject: str, version: int | None, *, permanent: bool) -> int:
        versions = self._subjects.get(subject, [])
        if not versions:
            raise errors.subject_not_found(subject)
        if version is None:
            live = [v for v in versions if not v.deleted]
            if not live and not permanent:
                raise errors.subject_not_found(subject)
            target = (live or versions)[-1]
        else:
            found = [v for v in versions if v.version == version]
            if not found:
                raise errors.version_not_found(version)
            target = found[0]
        if permanent and not target.deleted:
            raise errors.version_not_soft_deleted(subject, target.version)
        if not permanent and target.deleted:
            raise errors.version_soft_deleted(subject, target.version)
        with self._change():
            if permanent:
                versions.remove(target)
                if not versions:
                    del self._subjects[subject]
            else:
                target.deleted = True
        log.info(
            "registry.version_deleted", subject=subject, version=target.version, permanent=permanent
        )
        return target.version

    def delete_subject(self, subject: str, *, permanent: bool) -> list[int]:
        versions = self._subjects.get(subject, [])
        if not versions:
            raise errors.subject_not_found(subject)
        live = [v for v in versions if not v.deleted]
        if permanent and live:
            raise errors.subject_not_soft_deleted(subject)
        if not permanent and not live:
            raise errors.subject_soft_deleted(subject)
        deleted = [v.version for v in (versions if permanent else live)]
        with self._change():
            if permanent:
                del self._subjects[subject]
                # Confluent drops a subject's settings with the subject itself.
                self._subject_levels.pop(subject, None)
            else:
                for v in live:
                    v.deleted = True
        log.info("registry.subject_deleted", subject=subject, versions=deleted, permanent=permanent)
        return deleted

    # compatibility ---------------------------------------------------------------------

    def level_for(self, subject: str) -> CompatibilityLevel:
        return self._subject_levels.get(subject) or self._global_level or DEFAULT_LEVEL

    def check(
        self, subject: str, candidate: Candidate, version: int | None, *, all_versions: bool = True
    ) -> CompatibilityResult:
        """Check ``candidate`` under the subject's level against its live versions.

        With ``all_versions`` false, only ``version`` (None: the latest) is compared,
        as ``POST /compatibility/subjects/{s}/versions/{v}`` does.
        """
        live = [v for v in self._subjects.get(subject, []) if not v.deleted]
        if not all_versions:
            if not live:
                # As Confluent: checking against a version of a subject that has none is
                # an error, so a mistyped subject does not pass a compatibility gate.
                raise errors.subject_not_found(subject)
            if version is None:
                live = live[-1:]
            else:
                live = [v for v in live if v.version == version]
                if not live:
                    raise errors.version_not_found(version)
        return check(
            candidate.parsed,
            [self._schemas[v.schema_id].schema for v in live],
            self.level_for(subject),
            labels=[f"version {v.version}" for v in live],
        )

    # configuration ---------------------------------------------------------------------

    def global_level(self) -> CompatibilityLevel:
        return self._global_level or DEFAULT_LEVEL

    def subject_level(self, subject: str, *, default_to_global: bool) -> CompatibilityLevel:
        level = self._subject_levels.get(subject)
        if level is not None:
            return level
        if default_to_global:
            return self.global_level()
        raise errors.compatibility_not_configured(subject)

    def set_level(self, subject: str | None, value: Any) -> CompatibilityLevel:
        if not isinstance(value, str):
            raise errors.invalid_compatibility_level()
        try:
            level = parse_level(value)
        except ConfigError:
            raise errors.invalid_compatibility_level() from None
        with self._change():
            if subject is None:
                self._global_level = level
            else:
                self._subject_levels[subject] = level
        log.info("registry.level_set", subject=subject, level=level.value)
        return level

    def delete_level(self, subject: str | None) -> CompatibilityLevel:
        """Remove a setting and return it; the global one reverts to the default."""
        if subject is None:
            old = self.global_level()
            with self._change():
                self._global_level = None
            return old
        level = self._subject_levels.get(subject)
        if level is None:
            raise errors.subject_not_found(subject)
        with self._change():
            del self._subject_levels[subject]
        return level


__all__ = [
    "Candidate",
    "RegistryError",
    "RegistryStore",
    "StoredSchema",
    "SubjectVersion",
    "parse_candidate",
    "parse_version",
]
