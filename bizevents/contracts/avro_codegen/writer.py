"""Avro writers generated per pydantic contract, equal to fastavro for to_dict(model)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from bizevents.contracts.avro_codegen.gen import (
    _F32,
    _F64,
    _PRIMITIVES,
    Unsupported,
    _Gen,
    _type_of,
)
from bizevents.contracts.avro_codegen.reader import _named_of
from bizevents.contracts.binary import SMALL, varint

# -- writer --------------------------------------------------------------------------------


class ModelWriter(Protocol):
    def __call__(self, model: Any, lineage: bytes | None = None) -> bytes: ...


#: The contracts' envelope field whose Avro bytes a caller may hand the writer ready-made.
LINEAGE_FIELD: Final = "lineage"

_INT32: Final = (-(2**31), 2**31)
_INT64: Final = (-(2**63), 2**63)


def _plain_model(cls: type) -> bool:
    """Whether ``model_dump`` of this pydantic model gives its attributes as they are
    (no custom serializers, excluded or aliased fields, computed fields)."""
    from pydantic import BaseModel

    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        return False
    if cls.model_config.get("extra") == "allow" or cls.__pydantic_computed_fields__:
        return False
    if cls.model_config.get("serialize_by_alias"):
        return False
    for info in cls.model_fields.values():
        if info.exclude or info.serialization_alias is not None:
            return False
    return not _has_serializer(cls.__pydantic_core_schema__)


def _has_serializer(schema: Any) -> bool:
    if isinstance(schema, dict):
        return "serialization" in schema or any(_has_serializer(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_serializer(v) for v in schema)
    return False


_plain_models: set[type] = set()


def _check_model(cls: type) -> None:
    """Raises unless instances of ``cls`` can be written from their attributes."""
    if not _plain_model(cls):
        raise TypeError(f"{cls.__name__} is not written from its attributes")
    _plain_models.add(cls)


def _write_long(g: _Gen, d: int, v: str, bounds: tuple[int, int]) -> None:
    low, high = bounds
    g.emit(d, f"if {v}.__class__ is not int or not {low} <= {v} < {high}:")
    g.emit(d + 1, "raise TypeError('not an integer of the Avro type')")
    g.emit(d, f"z = ({v} << 1) ^ ({v} >> 63)")  # binary.zigzag, inlined
    g.emit(d, "ap(SMALL[z] if z < 128 else _varint(z))")


def _write_blob(g: _Gen, d: int, raw: str) -> None:
    g.emit(d, f"z = len({raw}) << 1")
    g.emit(d, "ap(SMALL[z] if z < 128 else _varint(z))")
    g.emit(d, f"ap({raw})")


def _open_block(g: _Gen, d: int, v: str) -> None:
    """An array's or a map's one block when ``v`` has items: their count, zigzag encoded."""
    g.emit(d, f"if {v}:")
    g.emit(d + 1, f"z = len({v}) << 1")
    g.emit(d + 1, "ap(SMALL[z] if z < 128 else _varint(z))")


def _write(g: _Gen, schema: Any, d: int, v: str) -> None:
    """Statements at depth ``d`` appending the Avro bytes of the value ``v``."""
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        name = schema
        definition = g.resolve(schema)
        g._active.add(name)
        try:
            _write(g, definition, d, v)
        finally:
            g._active.discard(name)
        return
    if isinstance(schema, list):
        _write_union(g, schema, d, v)
        return
    t = _type_of(schema)
    if isinstance(t, dict | list):
        _write(g, t, d, v)
        return
    if isinstance(schema, dict) and isinstance(schema.get("logicalType"), str):
        key = f"{t}-{schema['logicalType']}"
        if key in _logical_writers():
            prepare = g.const(_logical_writers()[key], "prepare")
            g.emit(d, f"{v} = {prepare}({v}, {g.const(schema, 'schema')})")
    if t == "null":
        g.emit(d, f"if {v} is not None:")
        g.emit(d + 1, "raise TypeError('not null')")
    elif t == "boolean":
        g.emit(d, f"if {v} is True:")
        g.emit(d + 1, "ap(b'\\x01')")
        g.emit(d, f"elif {v} is False:")
        g.emit(d + 1, "ap(b'\\x00')")
        g.emit(d, "else:")
        g.emit(d + 1, "raise TypeError('not a boolean')")
    elif t in ("int", "long"):
        _write_long(g, d, v, _INT32 if t == "int" else _INT64)
    elif t in ("float", "double"):
        g.emit(d, f"if {v}.__class__ is not float:")
        g.emit(d + 1, "raise TypeError('not a float')")
        pack = g.const((_F32 if t == "float" else _F64).pack, "pack")
        g.emit(d, f"ap({pack}({v}))")
    elif t == "string":
        g.emit(d, f"if {v}.__class__ is not str:")
        g.emit(d + 1, "raise TypeError('not a string')")
        raw = g.var("raw")
        g.emit(d, f"{raw} = {v}.encode()")
        _write_blob(g, d, raw)
    elif t == "bytes":
        g.emit(d, f"if {v}.__class__ is not bytes:")
        g.emit(d + 1, "raise TypeError('not bytes')")
        _write_blob(g, d, v)
    elif t == "fixed":
        g.emit(d, f"if {v}.__class__ is not bytes or len({v}) != {int(schema.get('size', -1))}:")
        g.emit(d + 1, "raise TypeError('not bytes of the fixed size')")
        g.emit(d, f"ap({v})")
    elif t == "enum":
        index = g.const(enum_index(schema), "index")
        g.emit(d, f"ap({index}[{v} if {v}.__class__ is str else {v}.value])")
    elif t in ("record", "error"):
        _write_record(g, schema, d, v)
    elif t == "array":
        item = g.var("x")
        g.emit(d, f"if {v}.__class__ is not list and {v}.__class__ is not tuple:")
        g.emit(d + 1, "raise TypeError('not a list')")
        _open_block(g, d, v)
        g.emit(d + 1, f"for {item} in {v}:")
        _write(g, schema.get("items"), d + 2, item)
        g.emit(d, "ap(b'\\x00')")
    elif t == "map":
        key, item = g.var("key"), g.var("x")
        g.emit(d, f"if not isinstance({v}, dict):")
        g.emit(d + 1, "raise TypeError('not a dict')")
        _open_block(g, d, v)
        g.emit(d + 1, f"for {key}, {item} in {v}.items():")
        _write(g, "string", d + 2, key)
        _write(g, schema.get("values"), d + 2, item)
        g.emit(d, "ap(b'\\x00')")
    else:
        raise Unsupported(f"Avro type {t!r}")


def enum_index(schema: Mapping[str, Any]) -> dict[str, bytes]:
    """An enum's symbols and the bytes of their indexes."""
    symbols = schema.get("symbols") or []
    return {s: SMALL[2 * i] if i < 64 else varint(2 * i) for i, s in enumerate(symbols)}


def union_branches(branches: list[Any]) -> tuple[bytes | None, bytes, Any]:
    """The bytes of a union's null branch (None: it has none), those of its other branch,
    and that branch's schema; :class:`Unsupported` for a union of several non-null types."""
    others = [i for i, b in enumerate(branches) if b != "null"]
    nulls = [i for i, b in enumerate(branches) if b == "null"]
    if len(others) != 1 or len(nulls) > 1:
        raise Unsupported("a union of several non-null types")
    null = SMALL[2 * nulls[0]] if nulls else None
    return null, SMALL[2 * others[0]], branches[others[0]]


def _write_union(g: _Gen, branches: list[Any], d: int, v: str) -> None:
    null, other, schema = union_branches(branches)
    if null is not None:
        g.emit(d, f"if {v} is None:")
        g.emit(d + 1, f"ap({g.const(null, 'branch')})")
        g.emit(d, "else:")
        d += 1
    g.emit(d, f"ap({g.const(other, 'branch')})")
    _write(g, schema, d, v)


def _write_record(
    g: _Gen, schema: Mapping[str, Any], d: int, v: str, prewritten: str | None = None
) -> None:
    """Statements writing a record from a model's attributes; the field ``prewritten``,
    when the record has it, is taken as bytes from the writer's ``lineage`` argument
    when that is given (see :func:`compile_model_writer`)."""
    fields = schema.get("fields")
    if not isinstance(fields, list):
        raise Unsupported("a record without fields")
    values = g.var("d")
    g.emit(d, f"if {v}.__class__ not in _plain:")
    g.emit(d + 1, f"_check_model({v}.__class__)")
    g.emit(d, f"{values} = {v}.__dict__")
    for field in fields:
        item = g.var()
        name = field.get("name")
        if name == prewritten:
            g.emit(d, "if lineage is not None:")
            g.emit(d + 1, "ap(lineage)")
            g.emit(d, "else:")
            g.emit(d + 1, f"{item} = {values}[{name!r}]")
            _write(g, field.get("type"), d + 1, item)
            continue
        g.emit(d, f"{item} = {values}[{name!r}]")
        _write(g, field.get("type"), d, item)


def _logical_writers() -> Mapping[str, Callable[[Any, Any], Any]]:
    from fastavro.write import LOGICAL_WRITERS

    return LOGICAL_WRITERS


def compile_model_writer(model: type, parsed: Any) -> ModelWriter:
    """``write(instance, lineage=None) -> bytes``: the Avro body of a pydantic model's
    instance. ``lineage``, when given, is the Avro encoding of the instance's ``lineage``
    field, written as it is in place of the instance's own (the runtime encodes the
    lineage of an event from parts shared by many events, bizevents.translators.lineage).

    ``parsed`` is the model's schema as fastavro parsed it. The bytes are those of
    ``fastavro.schemaless_writer(parsed, to_dict(instance))``; a value the writer
    does not take as it is raises (``TypeError``, ``KeyError``, ...). Raises
    :class:`Unsupported` for a model or schema shape not covered here.
    """
    if not _plain_model(model):
        raise Unsupported(f"{model.__name__} has custom serialization")
    if _type_of(parsed) not in ("record", "error"):
        raise Unsupported("a model's schema is a record")
    g = _Gen(_named_of(parsed))
    g.env.update(
        SMALL=SMALL,
        _varint=varint,
        _plain=_plain_models,
        _check_model=_check_model,
    )
    g.emit(0, "def write(model, lineage=None):")
    g.emit(1, "parts = []")
    g.emit(1, "ap = parts.append")
    _write_record(g, parsed, 1, "model", prewritten=LINEAGE_FIELD)
    g.emit(1, "return b''.join(parts)")
    exec(compile("\n".join(g.lines), f"<avro writer of {model.__name__}>", "exec"), g.env)
    writer: ModelWriter = g.env["write"]
    return writer
