"""What both sources' table codecs share: the envelope schemas as the registry keeps
them, the Confluent frames their records start with once it gave the ids, and the
envelope a record's value is (Debezium's, from encoded rows and an encoded source); and
the converters registered in place of a source's built-in ones."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from bizevents.contracts.binary import NULL_BRANCH, VALUE_BRANCH, zigzag
from bizevents.contracts.technical import AVRO_OPS, EnvelopeSchemas
from bizevents.plumbing.framing import header

#: ``source.version``: who wrote the event.
SOURCE_VERSION: Final = "bizevents-capture-1"
_NULL: Final = NULL_BRANCH
_SOME: Final = VALUE_BRANCH  # union branch 1 (after "null")


K = TypeVar("K")


class Converters(Generic[K]):
    """Converters registered in place of a source's built-in ones (each source's
    ``register_converter``), by type, and a generation that changes with every
    registration (a codec built before it is out of date)."""

    def __init__(self) -> None:
        self._by_type: dict[K, Callable[[Any], Any]] = {}
        self.generation = 0

    def __bool__(self) -> bool:
        return bool(self._by_type)

    def get(self, key: K) -> Callable[[Any], Any] | None:
        """The converter registered for ``key``, if any."""
        return self._by_type.get(key)

    def register(self, key: K, converter: Callable[[Any], Any] | None) -> None:
        """Convert ``key``'s values with ``converter`` from now on; ``None`` removes it."""
        if converter is None:
            self._by_type.pop(key, None)
        else:
            self._by_type[key] = converter
        self.generation += 1


def encoded_ts(ts_ms: int) -> bytes:
    """The envelope's ``ts_ms`` and (null) ``transaction``, encoded."""
    return _SOME + zigzag(ts_ms) + _NULL


class RegisteredCodec:
    """The registration side of a table codec (PostgreSQL's ``TableCodec``, MySQL's
    ``MyTableCodec``): its schemas go to the registry, the ids come back; and the
    envelope its records' values are."""

    schemas: EnvelopeSchemas
    key_schema_id: int | None = None
    value_schema_id: int | None = None
    #: the frames records are written with; empty until the registry gave the ids
    _key_frame: bytes = b""
    _value_frame: bytes = b""

    def key_schema_json(self) -> str | None:
        """The key schema as registered (``None`` for a table without key columns)."""
        return None if self.schemas.key is None else json.dumps(self.schemas.key)

    def value_schema_json(self) -> str:
        """The value (envelope) schema as registered."""
        return json.dumps(self.schemas.value)

    def set_schema_ids(self, key_id: int | None, value_id: int) -> None:
        """The ids the registry gave; events are framed with them from now on."""
        self.key_schema_id = key_id
        self.value_schema_id = value_id
        self._key_frame = b"" if key_id is None else header(key_id)
        self._value_frame = header(value_id)

    @property
    def value_frame(self) -> bytes:
        """The Confluent frame of the value schema (an envelope's first five bytes)."""
        return self._value_frame

    def envelope(
        self,
        op: str,
        before: bytes | None,
        after: bytes | None,
        source: bytes,
        ts_ms: int | bytes,
    ) -> bytes:
        """A framed envelope from encoded rows and an encoded source.

        ``ts_ms`` may be given already encoded (:func:`encoded_ts`), as the stream does
        once per transaction.
        """
        return b"".join(
            (
                self._value_frame,
                _NULL if before is None else _SOME + before,
                _NULL if after is None else _SOME + after,
                source,
                AVRO_OPS[op],
                ts_ms if ts_ms.__class__ is bytes else encoded_ts(ts_ms),  # type: ignore[arg-type]
            )
        )
