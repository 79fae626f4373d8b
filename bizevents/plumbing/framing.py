"""The Confluent wire format, once: magic byte 0, the schema id (4 bytes, big-endian),
then the Avro body. Capture, the worker, the replay and the serde all frame with it."""

from __future__ import annotations

import struct
from typing import Final

__all__ = ["HEADER_SIZE", "MAGIC_BYTE", "FramingError", "header", "schema_id_of", "unframe"]

MAGIC_BYTE: Final = 0
_HEADER: Final = struct.Struct(">bI")
_SCHEMA_ID: Final = struct.Struct(">I").unpack_from
HEADER_SIZE: Final = _HEADER.size


class FramingError(ValueError):
    """Bytes that are not Confluent-framed; the message reads after the thing's name."""


def header(schema_id: int) -> bytes:
    """The five bytes that go before an Avro body written with schema ``schema_id``."""
    return _HEADER.pack(MAGIC_BYTE, schema_id)


def unframe(data: bytes) -> tuple[int, memoryview]:
    """``(schema id, Avro body)`` of a framed message, or :class:`FramingError`."""
    if len(data) < HEADER_SIZE:
        raise FramingError(
            f"is {len(data)} bytes, shorter than the {HEADER_SIZE}-byte Confluent frame"
        )
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC_BYTE:
        raise FramingError(f"starts with magic byte {magic}, not {MAGIC_BYTE}")
    return int(schema_id), memoryview(data)[HEADER_SIZE:]


def schema_id_of(data: bytes) -> int | None:
    """The schema id of a framed message, or ``None`` when ``data`` is not framed: the
    hot path's test, which raises nothing (:func:`unframe` says what is wrong)."""
    if len(data) < HEADER_SIZE or data[0] != MAGIC_BYTE:
        return None
    return int(_SCHEMA_ID(data, 1)[0])
