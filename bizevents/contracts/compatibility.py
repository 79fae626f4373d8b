"""Avro schema compatibility: the one verdict the registry and the CI gate share.

``check(new, existing_newest_last, level)`` applies the Avro specification's schema
resolution rules (https://avro.apache.org/docs/current/specification/#schema-resolution)
in the direction(s) a compatibility level asks for, and returns every problem found,
each naming the field path and the reason.

Why not ``avro.compatibility.ReaderWriterCompatibilityChecker``: it compares aliases
without resolving them against the namespace (``"aliases": ["Old"]`` in namespace
``shop`` never matches ``shop.Old``), treats an enum-level ``default`` as if it were
a field default when a reader field is missing, and reports locations as JSON pointers
that are hard to read. The rules themselves are small, so they live here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, KeysView, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeAlias

import avro.errors
import avro.name
import avro.schema

from bizevents.contracts.exceptions import InvalidSchemaError
from bizevents.plumbing.errors import ConfigError

__all__ = [
    "CompatibilityLevel",
    "CompatibilityResult",
    "InvalidSchemaError",
    "SchemaInput",
    "check",
    "parse_level",
    "parse_schema",
    "reader_problems",
]

SchemaInput: TypeAlias = "str | Mapping[str, Any] | Sequence[Any] | avro.schema.Schema"
# avro's schema classes type their attributes loosely (``fields`` lives on RecordSchema
# only, and so on); the walk below dispatches on ``.type``, so nodes are duck-typed.
_Node: TypeAlias = Any

_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)

# Which writer types each reader type accepts besides its own (the spec's promotions).
_PROMOTIONS: dict[str, frozenset[str]] = {
    "long": frozenset({"int"}),
    "float": frozenset({"int", "long"}),
    "double": frozenset({"int", "long", "float"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
_NAMED = frozenset({"record", "error", "enum", "fixed"})


class CompatibilityLevel(StrEnum):
    """The levels Confluent's registry knows, with the same names."""

    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"
    NONE = "NONE"

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        """The new schema must read data written with the old ones."""
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        """The old schemas must read data written with the new one."""
        return self.value.startswith(("FORWARD", "FULL"))


@dataclass(frozen=True, slots=True)
class CompatibilityResult:
    """The verdict and, when incompatible, one sentence per problem."""

    is_compatible: bool
    messages: tuple[str, ...] = ()


def parse_level(value: str | CompatibilityLevel) -> CompatibilityLevel:
    """Read a level name case-insensitively; a wrong name raises ``ConfigError``."""
    try:
        return CompatibilityLevel(str(value).strip().upper())
    except ValueError:
        valid = ", ".join(level.value for level in CompatibilityLevel)
        raise ConfigError(
            f"unknown compatibility level {value!r}; valid levels are {valid}"
        ) from None


class _Brief(dict[str, Any]):
    """A schema's JSON object that shows itself by type and name only.

    avro wraps an error in a nested type once per level, each time with the text of the
    whole subtree (and, for an array, every name known so far): a message, and a chain
    of them, quadratic in the depth, hundreds of megabytes for a body of one. Shown
    briefly, the message grows by a line a level.
    """

    def __repr__(self) -> str:
        shown = ", ".join(f"{k!r}: {self[k]!r:.80}" for k in ("type", "name") if k in self)
        return "{" + shown + ", ...}"


class _BriefKeys(KeysView[str]):
    def __repr__(self) -> str:
        return f"{len(self)} names"


class _NameTable(dict[str, Any]):
    """avro's table of the names a schema defined, listed by their count."""

    def keys(self) -> _BriefKeys:  # type: ignore[override]
        return _BriefKeys(self)


def parse_schema(schema: SchemaInput) -> avro.schema.Schema:
    """Parse and validate an Avro schema given as JSON text, parsed JSON or a schema.

    Beyond what ``avro.schema.parse`` checks, field defaults must match their type
    (for a union, its first branch), as the specification requires: a wrong default
    would only fail later, when a reader needs it.
    """
    if isinstance(schema, avro.schema.Schema):
        return schema
    text = schema if isinstance(schema, str) else json.dumps(schema)
    try:
        data = json.loads(text, object_hook=_Brief)
    except ValueError as exc:
        raise InvalidSchemaError(f"schema is not valid JSON: {exc}") from exc
    try:
        names = avro.name.Names(validate_names=True)
        names.names = _NameTable()
        parsed = avro.schema.make_avsc_object(data, names)
    except (avro.errors.AvroException, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise InvalidSchemaError(f"invalid Avro schema: {exc}") from exc
    for record in _records(parsed):
        for field in record.fields:
            if field.has_default:
                reason = _default_problem(field.type, field.default)
                if reason is not None:
                    raise InvalidSchemaError(
                        f"invalid default for field '{record.fullname}.{field.name}': {reason}"
                    )
    return parsed


def check(
    new_schema: SchemaInput,
    existing_schemas: Sequence[SchemaInput],
    level: str | CompatibilityLevel,
    *,
    labels: Sequence[str] | None = None,
) -> CompatibilityResult:
    """Is ``new_schema`` compatible with ``existing_schemas`` (oldest first) at ``level``?

    Non-transitive levels look at the newest existing schema only, transitive ones at
    all of them. ``labels`` names the existing schemas in messages (e.g. "version 3");
    by default they are numbered from 1.
    """
    lvl = parse_level(level)
    if labels is not None and len(labels) != len(existing_schemas):
        raise ValueError("labels must name each existing schema once")
    if lvl is CompatibilityLevel.NONE or not existing_schemas:
        return CompatibilityResult(True)
    new = parse_schema(new_schema)
    indices = range(len(existing_schemas)) if lvl.transitive else [len(existing_schemas) - 1]
    messages: list[str] = []
    # Newest first: the most recent break is usually the one the author is after.
    for index in reversed(indices):
        old = parse_schema(existing_schemas[index])
        label = labels[index] if labels is not None else f"schema {index + 1}"
        if lvl.backward:
            messages += [
                f"new schema cannot read data written with {label}: {problem}"
                for problem in reader_problems(reader=new, writer=old)
            ]
        if lvl.forward:
            messages += [
                f"{label} cannot read data written with the new schema: {problem}"
                for problem in reader_problems(reader=old, writer=new)
            ]
    return CompatibilityResult(not messages, tuple(dict.fromkeys(messages)))


def reader_problems(reader: SchemaInput, writer: SchemaInput) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
    reader_schema, writer_schema = parse_schema(reader), parse_schema(writer)
    return list(
        dict.fromkeys(_Resolver().problems(reader_schema, writer_schema, _root(reader_schema)))
    )


class _Resolver:
    """Walks a reader and a writer schema together, following the spec's rules."""

    def __init__(self) -> None:
        # Named types may be recursive; a pair already being compared is assumed to
        # resolve, and the walk that started it reports whatever does not.
        self._seen: set[tuple[int, int]] = set()

    def problems(self, reader: _Node, writer: _Node, path: str) -> list[str]:
        pair = (id(reader), id(writer))
        if pair in self._seen:
            return []
        self._seen.add(pair)
        return self._compare(reader, writer, path)

    def _compare(self, reader: _Node, writer: _Node, path: str) -> list[str]:
        rtype, wtype = reader.type, writer.type
        if wtype == "union":
            return self._writer_union(reader, writer, path)
        if rtype == "union":
            return self._reader_union(reader, writer, path)
        if not _matches(reader, writer):
            return [_mismatch(reader, writer, path)]
        if rtype in ("record", "error"):
            return self._records(reader, writer, path)
        if rtype == "enum":
            return _enum_problems(reader, writer, path)
        if rtype == "fixed":
            if reader.size != writer.size:
                return [
                    f"at '{path}': fixed '{reader.fullname}' has size {reader.size} in the "
                    f"reader but {writer.size} in the writer"
                ]
            return []
        if rtype == "array":
            return self.problems(reader.items, writer.items, f"{path}[]")
        if rtype == "map":
            return self.problems(reader.values, writer.values, f"{path}{{}}")
        return []  # primitives that match, promotions included

    def _writer_union(self, reader: _Node, writer: _Node, path: str) -> list[str]:
        # Any branch may have been written, so every one must be readable.
        found: list[str] = []
        for branch in writer.schemas:
            if reader.type == "union":
                found += self._reader_union(reader, branch, path)
            else:
                found += self.problems(reader, branch, path)
        return found

    def _reader_union(self, reader: _Node, writer: _Node, path: str) -> list[str]:
        # The spec resolves against the first reader branch that matches the writer;
        # an exact match is preferred over a promotion, as Avro's own resolver does.
        candidates = [b for b in reader.schemas if _matches(b, writer, promote=False)]
        candidates += [b for b in reader.schemas if _matches(b, writer) and b not in candidates]
        if not candidates:
            return [
                f"at '{path}': the reader union {_describe(reader)} has no branch that "
                f"can read writer type {_describe(writer)}"
            ]
        return self.problems(candidates[0], writer, path)

    def _records(self, reader: _Node, writer: _Node, path: str) -> list[str]:
        found: list[str] = []
        writer_fields = {field.name: field for field in writer.fields}
        for field in reader.fields:
            field_path = f"{path}.{field.name}"
            match = writer_fields.get(field.name)
            if match is None:
                aliases = field.props.get("aliases") or []
                match = next((writer_fields[a] for a in aliases if a in writer_fields), None)
            if match is None:
                if not field.has_default:
                    found.append(
                        f"reader field '{field_path}' has no default and is missing in the writer"
                    )
                continue
            found += self.problems(field.type, match.type, field_path)
        return found


def _matches(reader: _Node, writer: _Node, *, promote: bool = True) -> bool:
    """The spec's shallow match: same kind (and name for named types), or a promotion."""
    rtype, wtype = reader.type, writer.type
    if rtype in ("record", "error") and wtype in ("record", "error"):
        return _names_match(reader, writer)
    if rtype == wtype:
        return _names_match(reader, writer) if rtype in _NAMED else True
    return promote and wtype in _PROMOTIONS.get(rtype, frozenset())


def _names_match(reader: _Node, writer: _Node) -> bool:
    # The spec compares unqualified names; a reader alias must name the writer's full name.
    if reader.name == writer.name:
        return True
    return writer.fullname in _full_aliases(reader)


def _full_aliases(schema: _Node) -> set[str]:
    namespace = schema.namespace
    aliases: set[str] = set()
    for alias in schema.props.get("aliases") or []:
        if "." in alias or not namespace:
            aliases.add(alias)
        else:
            aliases.add(f"{namespace}.{alias}")
    return aliases


def _enum_problems(reader: _Node, writer: _Node, path: str) -> list[str]:
    unknown = [symbol for symbol in writer.symbols if symbol not in reader.symbols]
    if not unknown or reader.props.get("default") in reader.symbols:
        return []
    listed = ", ".join(unknown)
    return [
        f"at '{path}': writer enum '{writer.fullname}' has symbols the reader lacks "
        f"({listed}) and the reader enum has no default"
    ]


def _mismatch(reader: _Node, writer: _Node, path: str) -> str:
    if reader.type == writer.type or (
        reader.type in ("record", "error") and writer.type in ("record", "error")
    ):
        return (
            f"at '{path}': reader {reader.type} '{reader.fullname}' does not match writer "
            f"{writer.type} '{writer.fullname}' (different name, and no reader alias names it)"
        )
    return (
        f"at '{path}': reader type {_describe(reader)} cannot read writer type {_describe(writer)}"
    )


def _describe(schema: _Node) -> str:
    if schema.type == "union":
        return "[" + ", ".join(_describe(branch) for branch in schema.schemas) + "]"
    if schema.type in _NAMED:
        return f"{schema.type} '{schema.fullname}'"
    return str(schema.type)


def _root(schema: _Node) -> str:
    return str(schema.name) if schema.type in _NAMED else "<root>"


def _records(schema: _Node) -> Iterator[Any]:
    """Every record reachable from ``schema``, each once."""
    seen: set[int] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.type in ("record", "error"):
            yield node
            stack += [field.type for field in node.fields]
        elif node.type == "array":
            stack.append(node.items)
        elif node.type == "map":
            stack.append(node.values)
        elif node.type == "union":
            stack += list(node.schemas)


def _default_problem(schema: _Node, value: Any) -> str | None:
    """Why ``value`` is not a valid default for ``schema`` (None when it is)."""
    kind = schema.type
    if kind == "union":
        # The spec: a union's default corresponds to its first branch.
        return _default_problem(schema.schemas[0], value)
    if kind == "null":
        return None if value is None else f"{value!r} is not null"
    if kind == "boolean":
        return None if isinstance(value, bool) else f"{value!r} is not a boolean"
    if kind in ("int", "long"):
        low, high = _INT_RANGE if kind == "int" else _LONG_RANGE
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        return None if ok else f"{value!r} is not an {kind}"
    if kind in ("float", "double"):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if isinstance(value, str):  # JSON cannot spell these otherwise
            ok = value in ("NaN", "Infinity", "-Infinity")
        return None if ok else f"{value!r} is not a {kind}"
    if kind in ("string", "bytes"):
        return None if isinstance(value, str) else f"{value!r} is not a {kind}"
    if kind == "enum":
        ok = isinstance(value, str) and value in schema.symbols
        return None if ok else f"{value!r} is not a symbol of enum '{schema.fullname}'"
    if kind == "fixed":
        ok = isinstance(value, str) and len(value) == schema.size
        return None if ok else f"{value!r} is not {schema.size} bytes"
    if kind == "array":
        if not isinstance(value, list):
            return f"{value!r} is not an array"
        return next((p for item in value if (p := _default_problem(schema.items, item))), None)
    if kind == "map":
        if not isinstance(value, dict):
            return f"{value!r} is not a map"
        return next(
            (p for item in value.values() if (p := _default_problem(schema.values, item))), None
        )
    if kind in ("record", "error"):
        if not isinstance(value, dict):
            return f"{value!r} is not a record"
        for field in schema.fields:
            if field.name in value:
                problem = _default_problem(field.type, value[field.name])
                if problem is not None:
                    return problem
            elif not field.has_default:
                return f"record default lacks field '{field.name}'"
        return None
    return None
