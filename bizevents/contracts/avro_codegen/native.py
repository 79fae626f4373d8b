"""The compiled reader: the generated reader's work, done by the project's C extension.

:func:`compile_reader` (reader.py) writes a schema out as Python; each field still costs
a few bytecodes per byte read. :func:`compile_native_reader` takes the same arguments,
turns the schema into a *read plan* (nested tuples: one node per Avro type, fields
skipped by a projection marked so), and hands it to ``_native.Program``, a small
interpreter in C (``_native.c``, built by ``scripts/setup``) that reads a datum and
builds only the kept fields. Conversions (logical types, the row decoders' column
conversions) stay the Python functions the generated reader calls, called from C; the
usual decimals and the conversions that say what they do (``native_conversion``) are
done in C.

The two readers give equal results for every plan, and both equal
``fastavro.schemaless_reader`` (tests/contracts/test_fast_decode.py, hypothesis).
Where the extension is not built, :data:`AVAILABLE` is False and callers use the
generated reader.

:func:`compile_native_writer` does the same for the contracts' writer
(:func:`~bizevents.contracts.avro_codegen.compile_model_writer`): its walk as a *write
plan*, checked once and run by ``_native.WritePlan``, the logical types' conversions
still fastavro's prepare functions; the same bytes and the same refusals
(tests/contracts/test_fast_serialize.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
from collections.abc import Callable, Mapping, Set
from typing import Any, Final, TypedDict, TypeVar, Unpack

from fastavro.read import LOGICAL_READERS

from bizevents.contracts.avro_codegen.gen import (
    _PRIMITIVES,
    Converter,
    Reader,
    Unsupported,
    _logical_key,
    _type_of,
)
from bizevents.contracts.avro_codegen.writer import (
    LINEAGE_FIELD,
    ModelWriter,
    _check_model,
    _logical_writers,
    _plain_model,
    _plain_models,
    enum_index,
    union_branches,
)
from bizevents.contracts.logical.decode import native_conversion

try:
    import bizevents.contracts.avro_codegen._native as _extension
except ImportError:  # not built: callers fall back to the generated reader and the Python
    _extension = None

#: The built extension (``scripts/setup`` builds it), or ``None``: not built, or built from
#: an older source that lacks what the code here calls (``scripts/setup`` rebuilds it).
#: The one way the project reaches it: the reader, its makers, the changes gate and the
#: contracts' writer (the replay's file records through :func:`compile_native_plan`). The
#: translators' lineage has its own extension (translators/_lineage.c).
EXTENSION: Final[Any] = _extension if hasattr(_extension, "WritePlan") else None
Program: Any = None if EXTENSION is None else EXTENSION.Program
Slots: Any = None if EXTENSION is None else EXTENSION.Slots
#: A topic's changes gate in one call (bizevents.contracts.technical.avro.AvroDecoder.gate).
unchanged: Any = None if EXTENSION is None else EXTENSION.unchanged

#: Whether the extension is built.
AVAILABLE: Final = EXTENSION is not None

T = TypeVar("T")


def constructor(cls: type[T]) -> Callable[..., T]:
    """What makes a ``cls`` from all its fields' values, positionally: ``cls`` itself,
    or, where the extension is built and ``cls`` is a slotted dataclass whose
    ``__init__`` only sets its fields (no ``__post_init__``, every field in ``__init__``),
    a maker that writes the slots directly: the same object at a fifth of a frozen
    dataclass's cost (tests/contracts/test_native_helpers.py holds them equal)."""
    if Slots is None or not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__"):
        return cls
    fields = dataclasses.fields(cls)
    names = tuple(f.name for f in fields)
    if getattr(cls, "__slots__", None) != names or not all(f.init for f in fields):
        return cls
    made: Callable[..., T] = Slots(cls, names)
    return made


Plan = tuple[Any, ...]
#: Builds a record from its kept fields' values, positionally in the writer's order.
Builder = Callable[..., Any]


class ReadOptions(TypedDict, total=False):
    """What :func:`compile_native_reader` and :func:`read_plan` take beyond the schema."""

    fields: Mapping[str, Mapping[str, Converter]] | None
    convert: Mapping[str, Converter] | None
    keep: Mapping[str, Set[str]] | None
    build: Mapping[str, Builder] | None
    builder: Builder | None


def _decimal_reader(precision: int, scale: int) -> Callable[[bytes], decimal.Decimal]:
    """fastavro's read_decimal, without its per-call schema look-ups (as reader.py)."""
    context = decimal.Context(prec=precision)
    create, from_bytes = context.create_decimal, int.from_bytes

    def read(value: bytes) -> decimal.Decimal:
        return create(from_bytes(value, "big", signed=True)).scaleb(-scale, context)

    return read


class _Named:
    """A plan's walk through a schema's named types (recursive ones are refused)."""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self.named = named
        self.active: set[str] = set()

    def resolve(self, name: str) -> Any:
        if name not in self.named:
            raise Unsupported(f"unknown named type {name!r}")
        if name in self.active:
            raise Unsupported(f"recursive type {name!r}")
        return self.named[name]


class _Planner(_Named):
    def read(
        self,
        schema: Any,
        convert: Mapping[str, Converter] | None = None,
        keep: Set[str] | None = None,
        build: Builder | None = None,
    ) -> Plan:
        """The plan reading one datum of ``schema`` (see reader._read); ``build`` is the
        builder of the record this datum is (through unions and names)."""
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            definition = self.resolve(schema)
            self.active.add(schema)
            try:
                return self.read(definition, convert, keep, build)
            finally:
                self.active.discard(schema)
        if isinstance(schema, list):
            return ("union", tuple(self.read(b, convert, keep, build) for b in schema))
        t = _type_of(schema)
        if isinstance(t, dict | list):
            return self.read(t, convert, keep, build)
        plan = self._base(schema, t, convert, keep, build)
        logical = _logical_key(schema)
        if logical in ("bytes-decimal", "fixed-decimal") and type(schema.get("precision")) is int:
            precision, scale = schema["precision"], int(schema.get("scale", 0))
            # read in C where the value is short and has nothing to round; else by
            # the Python reader (_native.c, read_decimal)
            reader = _decimal_reader(precision, scale)
            return ("decimal", plan, precision, scale, decimal.Decimal, reader)
        if logical is not None:
            return ("call", plan, LOGICAL_READERS[logical], (schema, None))
        return plan

    def _base(
        self,
        schema: Any,
        t: Any,
        convert: Mapping[str, Converter] | None,
        keep: Set[str] | None,
        build: Builder | None = None,
    ) -> Plan:
        if t in _PRIMITIVES:
            return (t,)
        if t == "fixed":
            size = schema.get("size")
            if type(size) is not int or size < 0:
                raise Unsupported("a fixed type without a size")
            return ("fixed", size)
        if t == "enum":
            return ("enum", tuple(schema.get("symbols") or ()))
        if t in ("record", "error"):
            return self.record(schema, convert, keep=keep, builder=build)
        if t == "array":
            return ("array", self.read(schema.get("items")))
        if t == "map":
            return ("map", self.read(schema.get("values")))
        raise Unsupported(f"Avro type {t!r}")

    def skip(self, schema: Any) -> Plan:
        """The plan stepping over one datum of ``schema`` (see reader._skip): its
        logical types and conversions do not matter, nothing is built."""
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            definition = self.resolve(schema)
            self.active.add(schema)
            try:
                return self.skip(definition)
            finally:
                self.active.discard(schema)
        if isinstance(schema, list):
            return ("union", tuple(self.skip(b) for b in schema))
        t = _type_of(schema)
        if isinstance(t, dict | list):
            return self.skip(t)
        if t in ("record", "error"):
            fields = schema.get("fields")
            if not isinstance(fields, list):
                raise Unsupported("a record without fields")
            return ("record", tuple((None, self.skip(f.get("type")), None) for f in fields))
        if t == "array":
            return ("array", self.skip(schema.get("items")))
        if t == "map":
            return ("map", self.skip(schema.get("values")))
        return self._base(schema, t, None, None)

    def record(
        self,
        schema: Mapping[str, Any],
        convert: Mapping[str, Converter] | None,
        nested: Mapping[str, Mapping[str, Converter]] | None = None,
        keep: Set[str] | None = None,
        nested_keep: Mapping[str, Set[str]] | None = None,
        builder: Builder | None = None,
        nested_build: Mapping[str, Builder] | None = None,
    ) -> Plan:
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise Unsupported("a record without fields")
        planned: list[tuple[str | None, Plan, Any]] = []
        for field in fields:
            name = field.get("name")
            if keep is not None and name not in keep:
                planned.append((None, self.skip(field.get("type")), None))
                continue
            plan = self.read(
                field.get("type"),
                None if nested is None else nested.get(name),
                None if nested_keep is None else nested_keep.get(name),
                None if nested_build is None else nested_build.get(name),
            )
            conversion = None if convert is None else convert.get(name)
            planned.append(
                (name, plan, conversion and (native_conversion(conversion) or conversion))
            )
        return ("record", tuple(planned), builder)


def read_plan(parsed: Any, **options: Unpack[ReadOptions]) -> Plan:
    """The read plan of :func:`compile_native_reader`'s arguments."""
    named = parsed.get("__named_schemas") if isinstance(parsed, dict) else None
    planner = _Planner(named if isinstance(named, dict) else {})
    fields, convert = options.get("fields"), options.get("convert")
    keep, build, builder = options.get("keep"), options.get("build"), options.get("builder")
    if fields or convert or keep or build or builder:
        if _type_of(parsed) not in ("record", "error"):
            raise Unsupported("field conversions need a record schema")
        return planner.record(
            parsed, convert, fields, nested_keep=keep, builder=builder, nested_build=build
        )
    return planner.read(parsed)


def compile_native_reader(parsed: Any, **options: Unpack[ReadOptions]) -> Reader:
    """:func:`~bizevents.contracts.avro_codegen.compile_reader`'s reader, run by the extension.

    Same arguments, same results; raises :class:`Unsupported` for the shapes the
    generated reader refuses, and when the extension is not built. Beyond them,
    ``build`` names, for a record schema, builders of the records held by its fields
    (``{"source": make_source}``), and ``builder`` the record's own: a record with a
    builder is read as ``builder(*its kept fields' values, in the writer's order)``
    rather than as a dict.
    """
    if Program is None:
        raise Unsupported("the compiled reader is not built (scripts/setup builds it)")
    plan = read_plan(parsed, **options)
    try:
        reader: Reader = Program(plan)
    except ValueError as exc:  # nested deeper than the interpreter goes: fastavro reads it
        raise Unsupported(str(exc)) from None
    return reader


def compile_gate(
    parsed: Any,
    reader: Reader,
    check: Callable[[Any], Any],
    columns: Set[str],
    checks: Mapping[str, Any],
    source_checks: Mapping[str, Any],
) -> Reader | None:
    """``gate(value, start) -> (True or False, end)`` of a Debezium envelope schema: True
    when the envelope's before and after rows hold the same bytes in ``columns``, its
    fields ``checks`` (``{"op": "u"}``) and its source block's ``source_checks``
    (``{"schema": "store", "table": "orders"}``) hold those values. The envelope is first
    read with ``reader`` (the decoder's compiled reader of ``parsed``, whose plan the gate
    runs) and its datum handed to ``check`` (the decoder's checks, raising where the
    decoder refuses): a record the decoder refuses is never called unchanged
    (_native.c, read_gate). None where the schema has no such layout, the reader is not
    the extension's, or the plan is one the extension refuses."""
    plan = getattr(reader, "plan", None)
    if Program is None or plan is None or _type_of(parsed) != "record":
        return None
    named = parsed.get("__named_schemas") if isinstance(parsed, dict) else None
    named = named if isinstance(named, dict) else {}
    fields = parsed.get("fields") or []
    names = [f.get("name") for f in fields]
    if "before" not in names or "after" not in names or "source" not in names:
        return None
    rows = [_row_names(fields[names.index(n)].get("type"), named) for n in ("before", "after")]
    source_names = _record_names(fields[names.index("source")].get("type"), named)
    if rows[0] is None or rows[0] != rows[1] or source_names is None:
        return None
    if not set(columns) <= set(rows[0]) or max(len(columns), len(checks), len(source_checks)) > 32:
        return None
    try:
        checked = [(names.index(k), v) for k, v in sorted(checks.items())]
        source_type = _resolved(fields[names.index("source")].get("type"), named)
        source_fields = source_type.get("fields") or []
        source_checked = [(source_names.index(k), v) for k, v in sorted(source_checks.items())]
        layout = (
            names.index("before"),
            names.index("after"),
            tuple(rows[0].index(c) for c in sorted(columns)),
            tuple(i for i, _ in checked),
            tuple(_encoded(fields[i].get("type"), v, named) for i, v in checked),
            names.index("source"),
            tuple(i for i, _ in source_checked),
            tuple(_encoded(source_fields[i].get("type"), v, named) for i, v in source_checked),
        )
        gate: Reader = Program(("gate", plan, layout, check))
    except Exception:  # a field it cannot name, a value its type does not take: none
        return None
    return gate


def _resolved(schema: Any, named: Mapping[str, Any]) -> Any:
    """``schema`` with names and type wrappers resolved."""
    if isinstance(schema, str) and schema in named:
        return _resolved(named[schema], named)
    inner = _type_of(schema)
    if isinstance(inner, dict):
        return _resolved(inner, named)
    return schema


def _record_names(schema: Any, named: Mapping[str, Any]) -> list[str] | None:
    resolved = _resolved(schema, named)
    if not isinstance(resolved, dict) or resolved.get("type") not in ("record", "error"):
        return None
    return [f.get("name") for f in resolved.get("fields") or []]


def _row_names(schema: Any, named: Mapping[str, Any]) -> list[str] | None:
    """The field names of a row field's record: a union of null and one record."""
    if not isinstance(schema, list):
        return None
    records = [b for b in schema if _record_names(b, named) is not None]
    if len(records) != 1 or any(b != "null" for b in schema if b is not records[0]):
        return None
    return _record_names(records[0], named)


def _encoded(schema: Any, value: Any, named: Mapping[str, Any]) -> bytes:
    """The Avro bytes of ``value`` as ``schema`` (a field's type) writes it."""
    import io

    import fastavro

    buffer = io.BytesIO()
    fastavro.schemaless_writer(
        buffer, fastavro.parse_schema(schema, named_schemas=dict(named)), value
    )
    return buffer.getvalue()


# -- the compiled writer ---------------------------------------------------------------------

#: The write plan's node kinds (_native.c, write_node).
(W_NULL, W_BOOLEAN, W_LONG, W_FLOAT, W_DOUBLE, W_STRING, W_BYTES, W_FIXED, W_ENUM) = range(9)
(W_RECORD, W_ARRAY, W_MAP, W_UNION, W_CALL, W_DECIMAL, W_MICROS) = range(9, 16)
#: What fastavro's prepare_timestamp_micros subtracts from an aware datetime.
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

_WRITE_PRIMITIVES: Final = {
    "null": (W_NULL,),
    "boolean": (W_BOOLEAN,),
    "int": (W_LONG, 32),
    "long": (W_LONG, 64),
    "float": (W_FLOAT,),
    "double": (W_DOUBLE,),
    "string": (W_STRING,),
    "bytes": (W_BYTES,),
}


class _WritePlanner(_Named):
    """The write plan of a contract's schema: the generated writer's walk
    (bizevents.contracts.avro_codegen.writer), node for node."""

    def node(self, schema: Any, prewritten: str | None = None) -> Plan:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            definition = self.resolve(schema)
            self.active.add(schema)
            try:
                return self.node(definition, prewritten)
            finally:
                self.active.discard(schema)
        if isinstance(schema, list):
            null, other, branch = union_branches(schema)
            return (W_UNION, null, other, self.node(branch))
        t = _type_of(schema)
        if isinstance(t, dict | list):
            return self.node(t, prewritten)
        plain = self.plain(schema, t, prewritten)
        if isinstance(schema, dict) and isinstance(schema.get("logicalType"), str):
            key = f"{t}-{schema['logicalType']}"
            prepare = _logical_writers().get(key)
            if prepare is not None:
                return _prepared(key, prepare, schema, plain)
        return plain

    def plain(self, schema: Any, t: Any, prewritten: str | None) -> Plan:
        if t in _WRITE_PRIMITIVES:
            return _WRITE_PRIMITIVES[t]
        if t == "fixed":
            return (W_FIXED, int(schema.get("size", -1)))
        if t == "enum":
            return (W_ENUM, enum_index(schema))
        if t in ("record", "error"):
            fields = schema.get("fields")
            if not isinstance(fields, list):
                raise Unsupported("a record without fields")
            names = tuple(str(f.get("name")) for f in fields)
            return (
                W_RECORD,
                names,
                tuple(self.node(f.get("type")) for f in fields),
                _plain_models,
                _check_model,
                names.index(prewritten) if prewritten in names else -1,
            )
        if t == "array":
            return (W_ARRAY, self.node(schema.get("items")))
        if t == "map":
            return (W_MAP, self.node(schema.get("values")))
        raise Unsupported(f"Avro type {t!r}")


def _prepared(key: str, prepare: Any, schema: dict[str, Any], plain: Plan) -> Plan:
    """A logical type's node: ``prepare(value, schema)`` (fastavro's conversion) written by
    ``plain``; decimals and timestamp-micros with the extension's own conversion of their
    usual values (the same bytes: tests/contracts/test_fast_serialize.py)."""
    if key == "bytes-decimal" and plain == (W_BYTES,):
        precision, scale = schema.get("precision"), schema.get("scale", 0)
        if type(precision) is int and type(scale) is int and precision >= 0 and 0 <= scale <= 10**6:
            return (W_DECIMAL, prepare, schema, plain, decimal.Decimal, precision, scale)
    if key == "long-timestamp-micros" and plain == (W_LONG, 64):
        return (W_MICROS, prepare, schema, plain, _EPOCH)
    return (W_CALL, prepare, schema, plain)


def compile_native_writer(model: type, parsed: Any) -> ModelWriter:
    """:func:`~bizevents.contracts.avro_codegen.compile_model_writer`'s writer, run by the
    extension (``_native.c``, ``WritePlan``): the same bytes, and an error where it
    raises one (tests/contracts/test_fast_serialize.py holds them together). Raises
    :class:`Unsupported` for the shapes the generated writer refuses, and when the
    extension is not built."""
    if EXTENSION is None:
        raise Unsupported("the compiled writer is not built (scripts/setup builds it)")
    if not _plain_model(model):
        raise Unsupported(f"{model.__name__} has custom serialization")
    if _type_of(parsed) not in ("record", "error"):
        raise Unsupported("a model's schema is a record")
    named = parsed.get("__named_schemas") if isinstance(parsed, dict) else None
    plan = _WritePlanner(named if isinstance(named, dict) else {}).node(parsed, LINEAGE_FIELD)
    writer: ModelWriter = EXTENSION.WritePlan(plan)
    return writer


def compile_native_plan(schema: Any) -> Callable[[Any], bytes] | None:
    """``write(record) -> bytes`` of a record schema whose records are given as tuples of
    their fields' values in order (nested records too): the write plan the contracts'
    writer runs (``_native.c``, ``WritePlan``), for records that are no model (the
    replay's file records). Raises TypeError or ValueError for a value its type does not
    take; None where the extension is not built or the schema has a shape it does not
    cover."""
    if EXTENSION is None:
        return None
    import fastavro

    try:
        parsed = fastavro.parse_schema(schema)
        named = parsed.get("__named_schemas") if isinstance(parsed, dict) else None
        plan = _WritePlanner(named if isinstance(named, dict) else {}).node(parsed)
    except Unsupported:
        return None
    writer: Callable[[Any], bytes] = EXTENSION.WritePlan(plan)
    return writer
