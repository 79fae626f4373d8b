"""Do the columns a translator declares still exist, with the type they had?

A translator may declare the columns it reads (``columns=``). A table's layout is in
the value schemas capture registers for its technical topic, one version per layout.
:func:`column_problems` holds the declaration against those versions: a declared column
that the latest layout no longer has (dropped or renamed), or whose type changed since
the layout before it (retyped, or made nullable), is reported before the translator
or the DDL is deployed. ``bizevents contracts check`` runs it for the pinned
translators. Pure: the caller fetches the schemas.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bizevents.contracts.exceptions import ContractError
from bizevents.translators.api import Translator

__all__ = ["ColumnProblem", "Layout", "column_problems", "row_columns"]

#: Schema annotations that do not change what a translator reads (an enum's allowed
#: labels grow with every new label; docs and defaults are not values).
_IGNORED: Final = frozenset({"doc", "default", "connect.parameters", "connect.version"})


@dataclass(frozen=True)
class Layout:
    """One registered value schema of a technical topic."""

    label: str  # "version 3"
    schema: str  # the Avro schema's JSON text


@dataclass(frozen=True)
class ColumnProblem:
    translator: str
    table: str
    column: str
    message: str

    def __str__(self) -> str:
        return f"{self.translator} reads {self.table}.{self.column}: {self.message}"


def row_columns(envelope_schema: str) -> dict[str, str]:
    """The row columns of a Debezium envelope's value schema, each with its type as
    canonical text (annotations that do not change the value left out)."""
    try:
        envelope = json.loads(envelope_schema)
    except ValueError as exc:
        raise ContractError(f"a technical value schema is not JSON: {exc}") from None
    named: dict[str, Any] = {}
    _collect(envelope, named, envelope.get("namespace", "") if isinstance(envelope, dict) else "")
    fields = envelope.get("fields") if isinstance(envelope, dict) else None
    rows = {f.get("name"): f.get("type") for f in fields or () if isinstance(f, dict)}
    for which in ("after", "before"):
        record = _record(rows.get(which), named)
        if record is not None:
            return {
                str(f["name"]): json.dumps(_signature(f["type"], named), sort_keys=True)
                for f in record.get("fields", ())
            }
    raise ContractError("a technical value schema without a before or after row record")


def column_problems(
    translator: Translator, table: str, layouts: Sequence[Layout]
) -> list[ColumnProblem]:
    """What breaks ``translator``'s declared columns of ``table`` in its latest layout.

    ``layouts`` are the table's value schemas, oldest first. Its declared columns are
    ``columns``, else the ``changes`` it depends on; a translator without a declaration
    reads whatever comes: nothing to hold.
    """
    declared = translator.columns if translator.columns is not None else translator.changes
    if declared is None or not layouts:
        return []
    latest = row_columns(layouts[-1].schema)
    previous = row_columns(layouts[-2].schema) if len(layouts) > 1 else {}
    problems = []
    for column in sorted(declared):
        now = latest.get(column)
        if now is None:
            was = " (it had it in " + layouts[-2].label + ")" if column in previous else ""
            problems.append(
                ColumnProblem(
                    translator.ref,
                    table,
                    column,
                    f"the table's latest layout ({layouts[-1].label}) has no such column{was}",
                )
            )
            continue
        before = previous.get(column)
        if before is not None and before != now:
            problems.append(
                ColumnProblem(
                    translator.ref,
                    table,
                    column,
                    f"its type changed in {layouts[-1].label}, from {before} to {now}",
                )
            )
    return problems


def _collect(schema: Any, named: dict[str, Any], namespace: str) -> None:
    """Every named type defined in ``schema``, by full name and by short name."""
    if isinstance(schema, list):
        for branch in schema:
            _collect(branch, named, namespace)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and "name" in schema:
            space = schema.get("namespace", namespace)
            name = str(schema["name"])
            full = name if "." in name or not space else f"{space}.{name}"
            named.setdefault(full, schema)
            named.setdefault(name, schema)
            namespace = space
        for field in schema.get("fields", ()) if kind in ("record", "error") else ():
            _collect(field.get("type"), named, namespace)
        for part in ("items", "values"):
            if part in schema:
                _collect(schema[part], named, namespace)
        if isinstance(kind, dict | list):
            _collect(kind, named, namespace)


def _record(schema: Any, named: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if isinstance(schema, list):
        for branch in schema:
            found = _record(branch, named)
            if found is not None:
                return found
        return None
    if isinstance(schema, str):
        schema = named.get(schema)
    if isinstance(schema, dict) and schema.get("type") in ("record", "error"):
        return schema
    return None


def _signature(schema: Any, named: Mapping[str, Any], seen: frozenset[str] = frozenset()) -> Any:
    """The type with named references expanded and the ignored annotations dropped."""
    if isinstance(schema, list):
        return [_signature(s, named, seen) for s in schema]
    if isinstance(schema, str):
        definition = named.get(schema)
        if definition is None or schema in seen:
            return schema
        return _signature(definition, named, seen | {schema})
    if isinstance(schema, dict):
        return {
            k: _signature(v, named, seen) if k in ("type", "items", "values", "fields") else v
            for k, v in schema.items()
            if k not in _IGNORED
        }
    return schema
