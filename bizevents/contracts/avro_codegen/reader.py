"""Avro readers generated per writer schema, equal to fastavro.schemaless_reader."""

from __future__ import annotations

import decimal
from collections.abc import Callable, Mapping, Set
from functools import partial
from typing import Any

from fastavro.read import LOGICAL_READERS

from bizevents.contracts.avro_codegen.gen import (
    _F32,
    _F64,
    _PRIMITIVES,
    SPARE_ITEMS,
    Converter,
    Reader,
    Refused,
    Unsupported,
    _Gen,
    _logical_key,
    _type_of,
    read_int,
    zero_width,
)
from bizevents.contracts.binary import read_long

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
    g: _Gen,
    schema: Any,
    d: int,
    target: str,
    convert: Mapping[str, Converter] | None = None,
    keep: Set[str] | None = None,
) -> None:
    """Statements at depth ``d`` reading one datum of ``schema`` into ``target``.

    ``convert`` applies to the record this datum is (through unions and names): each
    of its fields named there goes through the function when it is not null. ``keep``,
    when given, names the only fields of that record read; the others are skipped.
    """
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        name = schema
        definition = g.resolve(schema)
        g._active.add(name)
        try:
            _read(g, definition, d, target, convert, keep)
        finally:
            g._active.discard(name)
        return
    if isinstance(schema, list):
        _read_union(g, schema, d, target, convert, keep)
        return
    t = _type_of(schema)
    if isinstance(t, dict | list):
        _read(g, t, d, target, convert, keep)
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
        _read_record(g, schema, d, target, convert, keep=keep)
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


def _skip(g: _Gen, schema: Any, d: int) -> None:
    """Statements at depth ``d`` moving ``pos`` past one datum of ``schema`` without
    building it (a column nobody reads). Its bytes are not validated: a string is
    not decoded, an int not range-checked."""
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        definition = g.resolve(schema)
        g._active.add(schema)
        try:
            _skip(g, definition, d)
        finally:
            g._active.discard(schema)
        return
    if isinstance(schema, list):
        # The branch index (the negative indexes fastavro also takes: -1 is the last);
        # a varint of one byte for the usual unions, of more where a writer padded it.
        branches = len(schema)
        if branches > 32:
            raise Unsupported("a union of more than 32 branches")
        index = g.var("u")
        _read_long_into(g, d, index)
        for i, branch in enumerate(schema):
            keyword = "if" if i == 0 else "elif"
            g.emit(d, f"{keyword} {index} == {i} or {index} == {i - branches}:")
            _body(g, d + 1, partial(_skip, g, branch, d + 1))
        g.emit(d, "else:")
        g.emit(d + 1, "raise IndexError('union branch out of range')")
        return
    t = _type_of(schema)
    if isinstance(t, dict | list):
        _skip(g, t, d)
        return
    if t == "null":
        return
    if t == "boolean":
        g.emit(d, "pos += 1")
    elif t in ("int", "long", "enum"):
        # a varint's value is not needed: step over its continuation bytes
        g.emit(d, "while buf[pos] > 127:")
        g.emit(d + 1, "pos += 1")
        g.emit(d, "pos += 1")
    elif t in ("float", "double"):
        g.emit(d, f"pos += {4 if t == 'float' else 8}")
    elif t in ("string", "bytes"):
        g.emit(d, "b = buf[pos]")
        g.emit(d, "if b < 128 and not b & 1:")  # a length below 64 in one byte
        g.emit(d + 1, "pos += 1 + (b >> 1)")
        g.emit(d, "else:")
        n = g.var("n")
        g.emit(d + 1, f"{n}, pos = _long(buf, pos)")
        g.emit(d + 1, f"if {n} < 0:")
        g.emit(d + 2, "raise ValueError('a negative length')")
        g.emit(d + 1, f"pos += {n}")
    elif t == "fixed":
        size = schema.get("size")
        if type(size) is not int or size < 0:
            raise Unsupported("a fixed type without a size")
        g.emit(d, f"pos += {size}")
    elif t in ("record", "error"):
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise Unsupported("a record without fields")
        for field in fields:
            _skip(g, field.get("type"), d)
    elif t in ("array", "map"):
        count = g.var("c")
        g.emit(d, "while True:")
        items = schema.get("values") if t == "map" else schema.get("items")
        _block_count(g, d + 1, count, t == "array" and zero_width(items, g.named))
        g.emit(d + 1, f"for _ in range({count}):")
        if t == "map":
            _skip(g, "string", d + 2)
        _body(g, d + 2, lambda: _skip(g, items, d + 2))
    else:
        raise Unsupported(f"Avro type {t!r}")


def _read_union(
    g: _Gen,
    branches: list[Any],
    d: int,
    target: str,
    convert: Mapping[str, Converter] | None,
    keep: Set[str] | None,
) -> None:
    index = g.var("u")
    _read_long_into(g, d, index)
    count = len(branches)
    for i, branch in enumerate(branches):
        g.emit(d, f"{'if' if i == 0 else 'elif'} {index} == {i} or {index} == {i - count}:")
        if branch == "null":
            g.emit(d + 1, f"{target} = None")
        else:
            _read(g, branch, d + 1, target, convert, keep)
    g.emit(d, "else:")
    g.emit(d + 1, "raise IndexError('union branch out of range')")


def _read_record(
    g: _Gen,
    schema: Mapping[str, Any],
    d: int,
    target: str,
    convert: Mapping[str, Converter] | None,
    nested: Mapping[str, Mapping[str, Converter]] | None = None,
    keep: Set[str] | None = None,
    nested_keep: Mapping[str, Set[str]] | None = None,
) -> None:
    fields = schema.get("fields")
    if not isinstance(fields, list):
        raise Unsupported("a record without fields")
    names = []
    for field in fields:
        name = field.get("name")
        if keep is not None and name not in keep:
            _skip(g, field.get("type"), d)
            continue
        v = g.var()
        _read(
            g,
            field.get("type"),
            d,
            v,
            None if nested is None else nested.get(name),
            None if nested_keep is None else nested_keep.get(name),
        )
        function = None if convert is None else convert.get(name)
        if function is not None:
            g.emit(d, f"if {v} is not None:")
            g.emit(d + 1, f"{v} = {g.const(function, 'convert')}({v})")
        names.append((name, v))
    g.emit(d, f"{target} = {{{', '.join(f'{n!r}: {v}' for n, v in names)}}}")


def _read_blocks(g: _Gen, items: Any, key: str | None, d: int, target: str) -> None:
    count, item = g.var("c"), g.var()
    g.emit(d, f"{target} = {{}}" if key else f"{target} = []")
    g.emit(d, "while True:")
    _block_count(g, d + 1, count, not key and zero_width(items, g.named))
    g.emit(d + 1, f"for _ in range({count}):")
    if key:
        k = g.var("key")
        _read_sized(g, d + 2, k, decode=True)
        _read(g, items, d + 2, item)
        g.emit(d + 2, f"{target}[{k}] = {item}")
    else:
        _read(g, items, d + 2, item)
        g.emit(d + 2, f"{target}.append({item})")


def _block_count(g: _Gen, d: int, count: str, no_width: bool) -> None:
    """Statements at depth ``d`` (in the loop over an array's or a map's blocks) reading a
    block's item count into ``count``, leaving the loop at the count of zero that ends
    them. A negative count is followed by the block's byte size, read and not trusted:
    the items are read one by one, as fastavro reads them, so a projected read and a
    full one agree; -2**63 holds no items (as fastavro reads it). A count the bytes left
    cannot hold is refused before any item is read (EOFError); items that take no bytes
    (``no_width``: null, fixed(0), empty records) are counted against ``spare`` instead,
    past which they are :class:`Refused` (the extension's ``block_count`` does the
    same)."""
    _read_long_into(g, d, count)
    g.emit(d, f"if {count} == 0:")
    g.emit(d + 1, "break")
    g.emit(d, f"if {count} < 0:")
    g.emit(d + 1, f"{count} = -{count} & 0x7FFFFFFFFFFFFFFF")
    g.emit(d + 1, "_, pos = _long(buf, pos)")
    if no_width:
        g.counts_spare = True
        g.emit(d, f"if {count} > spare:")
        message = "f'an array block of {%s} items of no width, more than {spare}'"
        g.emit(d + 1, f"raise _Refused({message % (count,)})")
        g.emit(d, f"spare -= {count}")
    else:
        g.emit(d, f"if {count} > len(buf) - pos:")
        g.emit(d + 1, "raise EOFError('a block of more items than bytes left')")


def _body(g: _Gen, d: int, emit: Callable[[], None]) -> None:
    """``emit``'s statements at depth ``d``, or ``pass`` where it emits none (a datum of
    no bytes to step over: a block needs a statement)."""
    before = len(g.lines)
    emit()
    if len(g.lines) == before:
        g.emit(d, "pass")


def _named_of(parsed: Any) -> Mapping[str, Any]:
    named = parsed.get("__named_schemas") if isinstance(parsed, dict) else None
    return named if isinstance(named, dict) else {}


def compile_reader(
    parsed: Any,
    fields: Mapping[str, Mapping[str, Converter]] | None = None,
    convert: Mapping[str, Converter] | None = None,
    keep: Mapping[str, Set[str]] | None = None,
) -> Reader:
    """``read(buf, pos) -> (datum, pos after it)`` for a schema fastavro parsed.

    ``fields`` converts, for a record schema, the members of the records held by its
    fields: ``{"after": {"total": f}}`` applies ``f`` to ``after.total`` when it is not
    null, as the row decoder would after reading; ``convert`` does the same for the
    record's own fields. ``keep`` projects, for a record schema, the records held by
    its fields: ``{"after": {"id", "status"}}`` reads only those two members of
    ``after`` and skips the others' bytes without building them. Raises
    :class:`Unsupported` when the schema has a shape not covered here.
    """
    g = _Gen(_named_of(parsed))
    g.env["_long"] = read_long
    g.env["_int"] = read_int
    g.env["_from_bytes"] = int.from_bytes
    g.env["_Refused"] = Refused
    g.emit(0, "def read(buf, pos):")
    if fields or convert or keep:
        if _type_of(parsed) not in ("record", "error"):
            raise Unsupported("field conversions need a record schema")
        _read_record(g, parsed, 1, "datum", convert, fields, nested_keep=keep)
    else:
        _read(g, parsed, 1, "datum")
    if keep:
        g.emit(1, "if pos > len(buf):")  # a skipped value ran past the end
        g.emit(2, "raise EOFError")
    g.emit(1, "return datum, pos")
    if g.counts_spare:
        g.lines.insert(1, f"    spare = len(buf) + {SPARE_ITEMS}")
    source = "\n".join(g.lines)
    try:
        code = compile(source, "<avro reader>", "exec")
    except (SyntaxError, RecursionError, MemoryError) as exc:
        # Python's own limits (100 levels of indentation: a schema nesting unions that
        # deep): fastavro reads such a schema
        raise Unsupported(f"a schema too deep for the generated reader ({exc})") from None
    exec(code, g.env)
    reader: Reader = g.env["read"]
    return reader
