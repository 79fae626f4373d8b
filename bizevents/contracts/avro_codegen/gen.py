"""What the generated reader and writer share: the source-text builder and schema helpers."""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

from fastavro.read import LOGICAL_READERS

from bizevents.contracts.binary import read_long

Reader = Callable[[bytes, int], tuple[Any, int]]
Converter = Callable[[Any], Any]

_PRIMITIVES: Final = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "string", "bytes"}
)
_F32: Final = struct.Struct("<f")
_F64: Final = struct.Struct("<d")


class Unsupported(Exception):
    """The schema (or model) has a shape the generator does not cover."""


class Refused(ValueError):
    """Bytes both readers refuse outright where fastavro would read them: a datum holding
    more array items of no width (null, fixed(0), empty records) than one per byte of its
    buffer and :data:`SPARE_ITEMS` more, which fastavro builds item by item (six bytes
    can ask for 2**62). Callers give this verdict, not fastavro's."""


#: Items of no width a datum may hold beyond one per byte of its buffer (see Refused).
SPARE_ITEMS: Final = 65536


def zero_width(schema: Any, named: Mapping[str, Any], active: frozenset[str] = frozenset()) -> bool:
    """Whether a datum of ``schema`` takes no bytes at all (null, fixed(0), records of
    such; a union's index, an array's count take one at least)."""
    if isinstance(schema, str) and schema in named:
        if schema in active:  # a recursive type (the readers refuse it)
            return False
        return zero_width(named[schema], named, active | {schema})
    t = _type_of(schema)
    if isinstance(t, dict):
        return zero_width(t, named, active)
    if t == "null":
        return True
    if t == "fixed":
        return bool(schema.get("size") == 0)
    if t in ("record", "error"):
        fields = schema.get("fields")
        return isinstance(fields, list) and all(
            zero_width(f.get("type"), named, active) for f in fields
        )
    return False


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
        #: Whether the code counts items of no width (``spare``: see Refused).
        self.counts_spare = False

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
