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
