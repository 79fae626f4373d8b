"""Avro readers and writers generated per schema: the translation hot path's codec.

fastavro's ``schemaless_reader``/``schemaless_writer`` interpret the schema for every
datum (about 20 µs per Debezium envelope here, and 10 µs per business event through
confluent's ``AvroSerializer``). For one schema the work is always the same, so this
module writes it out once as straight-line Python (``exec`` of generated source, as
``capture/encoding.py`` does for its writer) and caches the function per schema.

Both sides are held to fastavro by tests (``tests/contracts/test_fast_*.py``):

* :func:`compile_reader` gives ``read(buf, pos) -> (datum, pos)`` producing exactly
  what ``fastavro.schemaless_reader`` gives for the same writer schema (logical types
  through fastavro's own ``LOGICAL_READERS``). It may raise anything on bad bytes;
  callers then run fastavro, whose verdict (its value or its error) stands. It also
  refuses an Avro int outside 32 bits, which fastavro reads (callers check that after
  fastavro).
* :func:`compile_model_writer` gives ``write(model) -> bytes`` writing a pydantic
  contract instance straight from its attributes, byte for byte what fastavro writes
  for ``to_dict(model)``. It raises :class:`Unsupported` at compile time for a shape it
  does not cover, and anything at run time for a value it does not take (callers then
  run the reference serializer, whose verdict stands).

Covered: records, unions (with null or of several types, by index), null, boolean,
int, long, float, double, string, bytes, fixed, enum, array, map, and the logical
types fastavro converts (decimal, date, time, timestamps, uuid).
"""

from __future__ import annotations

import decimal
import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

from fastavro.read import LOGICAL_READERS

from contracts.binary import SMALL, read_long, varint

__all__ = [
    "ModelWriter",
    "Reader",
    "Unsupported",
    "compile_model_writer",
    "compile_reader",
    "read_int",
]

Reader = Callable[[bytes, int], tuple[Any, int]]
Converter = Callable[[Any], Any]

_PRIMITIVES: Final = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "string", "bytes"}
)
_F32: Final = struct.Struct("<f")
_F64: Final = struct.Struct("<d")


class Unsupported(Exception):
    """The schema (or model) has a shape the generator does not cover."""


_INT32_LOW: Final = -(2**31)
_INT32_HIGH: Final = 2**31 - 1


def read_int(buf: bytes, pos: int) -> tuple[int, int]:
    """:func:`read_long` for an Avro int: fastavro reads any long there, Avro's int is
    32 bits, so a value outside them is refused (the caller then lets fastavro read the
    record and the row decoder say which column it was)."""
    n, pos = read_long(buf, pos)
    if not _INT32_LOW <= n <= _INT32_HIGH:
        raise ValueError(f"{n} does not fit int32")
    return n, pos


def _type_of(schema: Any) -> Any:
    return schema.get("type") if isinstance(schema, dict) else schema


def _logical_key(schema: Any) -> str | None:
    if isinstance(schema, dict) and isinstance(schema.get("logicalType"), str):
        base = schema.get("type")
        if isinstance(base, str):
            key = f"{base}-{schema['logicalType']}"
            if key in LOGICAL_READERS:
                return key
    return None


class _Gen:
    """Source text of one generated function, with the constants it refers to."""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self.named = named
        self.lines: list[str] = []
        self.env: dict[str, Any] = {}
        self._n = 0
        self._active: set[str] = set()

    def var(self, stem: str = "v") -> str:
        self._n += 1
        return f"{stem}{self._n}"

    def const(self, value: Any, stem: str = "k") -> str:
        name = self.var(f"_{stem}")
        self.env[name] = value
        return name

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def resolve(self, schema: Any) -> Any:
        """A named reference replaced by its definition (recursive types are refused)."""
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            if schema not in self.named:
                raise Unsupported(f"unknown named type {schema!r}")
            if schema in self._active:
                raise Unsupported(f"recursive type {schema!r}")
            return self.named[schema]
        return schema


# -- reader ------------------------------------------------------------------------------


def _read_long_into(g: _Gen, d: int, target: str, slow: str = "_long") -> None:
    # One- and two-byte varints inline (small numbers, lengths, union indexes); they
    # hold 14 bits, so only ``slow`` (``_int`` for an Avro int) needs a range check.
    g.emit(d, "b = buf[pos]")
    g.emit(d, "if b < 128:")
    g.emit(d + 1, "pos += 1")
    g.emit(d + 1, f"{target} = (b >> 1) ^ -(b & 1)")
    g.emit(d, "elif buf[pos + 1] < 128:")
    g.emit(d + 1, "b = (b & 127) | (buf[pos + 1] << 7)")
    g.emit(d + 1, "pos += 2")
    g.emit(d + 1, f"{target} = (b >> 1) ^ -(b & 1)")
    g.emit(d, "else:")
    g.emit(d + 1, f"{target}, pos = {slow}(buf, pos)")


def _read_sized(g: _Gen, d: int, target: str, decode: bool) -> None:
    n = g.var("n")
    _read_long_into(g, d, n)
    g.emit(d, f"end = pos + {n}")
    g.emit(d, f"{target} = buf[pos:end]")
    g.emit(d, f"if len({target}) != {n}:")
    g.emit(d + 1, "raise EOFError")
    if decode:
        g.emit(d, f"{target} = {target}.decode()")
    g.emit(d, "pos = end")


def _read(
    g: _Gen, schema: Any, d: int, target: str, convert: Mapping[str, Converter] | None = None
) -> None:
    """Statements at depth ``d`` reading one datum of ``schema`` into ``target``.

    ``convert`` applies to the record this datum is (through unions and names): each
    of its fields named there goes through the function when it is not null.
    """
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        name = schema
        definition = g.resolve(schema)
        g._active.add(name)
        try:
            _read(g, definition, d, target, convert)
        finally:
            g._active.discard(name)
        return
    if isinstance(schema, list):
        _read_union(g, schema, d, target, convert)
        return
    t = _type_of(schema)
    if isinstance(t, dict | list):
        _read(g, t, d, target, convert)
        return
    logical = _logical_key(schema)
    if t == "null":
        g.emit(d, f"{target} = None")
    elif t == "boolean":
        g.emit(d, f"{target} = buf[pos] != 0")
        g.emit(d, "pos += 1")
    elif t == "int":
        _read_long_into(g, d, target, "_int")
    elif t == "long":
        _read_long_into(g, d, target)
    elif t in ("float", "double"):
        unpack = g.const((_F32 if t == "float" else _F64).unpack_from, "unpack")
        g.emit(d, f"{target} = {unpack}(buf, pos)[0]")
        g.emit(d, f"pos += {4 if t == 'float' else 8}")
    elif t == "string":
        _read_sized(g, d, target, decode=True)
    elif t == "bytes":
        _read_sized(g, d, target, decode=False)
    elif t == "fixed":
        size = schema.get("size")
        if type(size) is not int or size < 0:
            raise Unsupported("a fixed type without a size")
        g.emit(d, f"end = pos + {size}")
        g.emit(d, f"{target} = buf[pos:end]")
        g.emit(d, f"if len({target}) != {size}:")
        g.emit(d + 1, "raise EOFError")
        g.emit(d, "pos = end")
    elif t == "enum":
        symbols = g.const(list(schema.get("symbols") or ()), "symbols")
        index = g.var("i")
        _read_long_into(g, d, index)
        g.emit(d, f"{target} = {symbols}[{index}]")
    elif t in ("record", "error"):
        _read_record(g, schema, d, target, convert)
    elif t == "array":
        _read_blocks(g, schema.get("items"), None, d, target)
    elif t == "map":
        _read_blocks(g, schema.get("values"), "string", d, target)
    else:
        raise Unsupported(f"Avro type {t!r}")
    if logical in ("bytes-decimal", "fixed-decimal") and type(schema.get("precision")) is int:
        # fastavro's read_decimal, without its per-call schema look-ups.
        context = g.const(decimal.Context(prec=schema["precision"]), "context")
        scale = int(schema.get("scale", 0))
        g.emit(d, f"{target} = {context}.create_decimal(_from_bytes({target}, 'big', signed=True))")
        g.emit(d, f"{target} = {target}.scaleb({-scale}, {context})")
    elif logical is not None:
        function = g.const(LOGICAL_READERS[logical], "logical")
        written = g.const(schema, "schema")
        g.emit(d, f"{target} = {function}({target}, {written}, None)")


def _read_union(
    g: _Gen, branches: list[Any], d: int, target: str, convert: Mapping[str, Converter] | None
) -> None:
    index = g.var("u")
    _read_long_into(g, d, index)
    count = len(branches)
    for i, branch in enumerate(branches):
        g.emit(d, f"{'if' if i == 0 else 'elif'} {index} == {i} or {index} == {i - count}:")
        if branch == "null":
            g.emit(d + 1, f"{target} = None")
        else:
            _read(g, branch, d + 1, target, convert)
    g.emit(d, "else:")
    g.emit(d + 1, "raise IndexError('union branch out of range')")


def _read_record(
    g: _Gen,
    schema: Mapping[str, Any],
    d: int,
    target: str,
    convert: Mapping[str, Converter] | None,
    nested: Mapping[str, Mapping[str, Converter]] | None = None,
) -> None:
    fields = schema.get("fields")
    if not isinstance(fields, list):
        raise Unsupported("a record without fields")
    names = []
    for field in fields:
        v = g.var()
        name = field.get("name")
        _read(g, field.get("type"), d, v, None if nested is None else nested.get(name))
        function = None if convert is None else convert.get(name)
        if function is not None:
            g.emit(d, f"if {v} is not None:")
            g.emit(d + 1, f"{v} = {g.const(function, 'convert')}({v})")
        names.append((name, v))
    g.emit(d, f"{target} = {{{', '.join(f'{n!r}: {v}' for n, v in names)}}}")


def _read_blocks(g: _Gen, items: Any, key: str | None, d: int, target: str) -> None:
    count, skip, item = g.var("c"), g.var("s"), g.var()
    g.emit(d, f"{target} = {{}}" if key else f"{target} = []")
    g.emit(d, "while True:")
    _read_long_into(g, d + 1, count)
    g.emit(d + 1, f"if {count} == 0:")
    g.emit(d + 2, "break")
    g.emit(d + 1, f"if {count} < 0:")
    g.emit(d + 2, f"{count} = -{count}")
    _read_long_into(g, d + 2, skip)
    g.emit(d + 1, f"for _ in range({count}):")
    if key:
        k = g.var("key")
        _read_sized(g, d + 2, k, decode=True)
        _read(g, items, d + 2, item)
        g.emit(d + 2, f"{target}[{k}] = {item}")
    else:
        _read(g, items, d + 2, item)
        g.emit(d + 2, f"{target}.append({item})")


def _named_of(parsed: Any) -> Mapping[str, Any]:
    named = parsed.get("__named_schemas") if isinstance(parsed, dict) else None
    return named if isinstance(named, dict) else {}


def compile_reader(
    parsed: Any,
    fields: Mapping[str, Mapping[str, Converter]] | None = None,
    convert: Mapping[str, Converter] | None = None,
) -> Reader:
    """``read(buf, pos) -> (datum, pos after it)`` for a schema fastavro parsed.

    ``fields`` converts, for a record schema, the members of the records held by its
    fields: ``{"after": {"total": f}}`` applies ``f`` to ``after.total`` when it is not
    null, as the row decoder would after reading; ``convert`` does the same for the
    record's own fields. Raises :class:`Unsupported` when
    the schema has a shape not covered here.
    """
    g = _Gen(_named_of(parsed))
    g.env["_long"] = read_long
    g.env["_int"] = read_int
    g.env["_from_bytes"] = int.from_bytes
    g.emit(0, "def read(buf, pos):")
    if fields or convert:
        if _type_of(parsed) not in ("record", "error"):
            raise Unsupported("field conversions need a record schema")
        _read_record(g, parsed, 1, "datum", convert, fields)
    else:
        _read(g, parsed, 1, "datum")
    g.emit(1, "return datum, pos")
    source = "\n".join(g.lines)
    exec(compile(source, "<avro reader>", "exec"), g.env)
    reader: Reader = g.env["read"]
    return reader


# -- writer --------------------------------------------------------------------------------

ModelWriter = Callable[[Any], bytes]

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
        symbols = schema.get("symbols") or []
        index = g.const(
            {s: SMALL[2 * i] if i < 64 else varint(2 * i) for i, s in enumerate(symbols)},
            "index",
        )
        g.emit(d, f"ap({index}[{v} if {v}.__class__ is str else {v}.value])")
    elif t in ("record", "error"):
        _write_record(g, schema, d, v)
    elif t == "array":
        item = g.var("x")
        g.emit(d, f"if {v}.__class__ is not list and {v}.__class__ is not tuple:")
        g.emit(d + 1, "raise TypeError('not a list')")
        g.emit(d, f"if {v}:")
        g.emit(d + 1, f"z = len({v}) << 1")
        g.emit(d + 1, "ap(SMALL[z] if z < 128 else _varint(z))")
        g.emit(d + 1, f"for {item} in {v}:")
        _write(g, schema.get("items"), d + 2, item)
        g.emit(d, "ap(b'\\x00')")
    elif t == "map":
        key, item = g.var("key"), g.var("x")
        g.emit(d, f"if not isinstance({v}, dict):")
        g.emit(d + 1, "raise TypeError('not a dict')")
        g.emit(d, f"if {v}:")
        g.emit(d + 1, f"z = len({v}) << 1")
        g.emit(d + 1, "ap(SMALL[z] if z < 128 else _varint(z))")
        g.emit(d + 1, f"for {key}, {item} in {v}.items():")
        _write(g, "string", d + 2, key)
        _write(g, schema.get("values"), d + 2, item)
        g.emit(d, "ap(b'\\x00')")
    else:
        raise Unsupported(f"Avro type {t!r}")


def _write_union(g: _Gen, branches: list[Any], d: int, v: str) -> None:
    others = [i for i, b in enumerate(branches) if b != "null"]
    nulls = [i for i, b in enumerate(branches) if b == "null"]
    if len(others) != 1 or len(nulls) > 1:
        raise Unsupported("a union of several non-null types")
    if nulls:
        g.emit(d, f"if {v} is None:")
        g.emit(d + 1, f"ap({g.const(SMALL[2 * nulls[0]], 'branch')})")
        g.emit(d, "else:")
        d += 1
    g.emit(d, f"ap({g.const(SMALL[2 * others[0]], 'branch')})")
    _write(g, branches[others[0]], d, v)


def _write_record(g: _Gen, schema: Mapping[str, Any], d: int, v: str) -> None:
    fields = schema.get("fields")
    if not isinstance(fields, list):
        raise Unsupported("a record without fields")
    values = g.var("d")
    g.emit(d, f"if {v}.__class__ not in _plain:")
    g.emit(d + 1, f"_check_model({v}.__class__)")
    g.emit(d, f"{values} = {v}.__dict__")
    for field in fields:
        item = g.var()
        g.emit(d, f"{item} = {values}[{field.get('name')!r}]")
        _write(g, field.get("type"), d, item)


def _logical_writers() -> Mapping[str, Callable[[Any, Any], Any]]:
    from fastavro.write import LOGICAL_WRITERS

    return LOGICAL_WRITERS


def compile_model_writer(model: type, parsed: Any) -> ModelWriter:
    """``write(instance) -> bytes``: the Avro body of a pydantic model's instance.

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
    g.emit(0, "def write(model):")
    g.emit(1, "parts = []")
    g.emit(1, "ap = parts.append")
    _write_record(g, parsed, 1, "model")
    g.emit(1, "return b''.join(parts)")
    exec(compile("\n".join(g.lines), f"<avro writer of {model.__name__}>", "exec"), g.env)
    writer: ModelWriter = g.env["write"]
    return writer
