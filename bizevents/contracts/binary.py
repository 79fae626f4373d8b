"""Avro's binary primitives, once: varints, strings and bytes, decimals.

Capture's compiled writer, the generated readers and writers of
:mod:`bizevents.contracts.avro_codegen` and the contracts' own encoders all write and read
these through this module (Confluent framing is :mod:`bizevents.plumbing.framing`). Each function
is held to fastavro byte for byte by ``tests/contracts/test_binary.py``.

Decimals have two widths of two's-complement bytes, both read back to the same
number: :func:`signed_bytes` is the minimal one (Java's ``BigInteger.toByteArray``,
which Kafka Connect and Debezium write), :func:`fastavro_signed_bytes` the one fastavro
writes for the ``decimal`` logical type (a byte more for -128, -32768, ...). Where our
bytes must equal fastavro's (the Avro ``decimal`` logical type) we use the latter.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Final

__all__ = [
    "CONTAINER_MAGIC",
    "LENGTHS",
    "NULL_BRANCH",
    "SMALL",
    "VALUE_BRANCH",
    "VARINTS",
    "blob",
    "container_block",
    "container_header",
    "decimal_from_unscaled",
    "fastavro_signed_bytes",
    "read_long",
    "signed_bytes",
    "text",
    "unscaled",
    "varint",
    "zigzag",
]

#: The one-byte varints 0..127 (small values, short lengths, union branches).
SMALL: Final = tuple(bytes([z]) for z in range(128))
#: Branch 0 of a union (``null`` in ``["null", T]``) and branch 1 (the value).
NULL_BRANCH: Final = SMALL[0]
VALUE_BRANCH: Final = SMALL[2]
_MASK64: Final = (1 << 64) - 1


_TABLE_BITS: Final = 14
_TABLE: Final = 1 << _TABLE_BITS


def _varint_by_bytes(z: int) -> bytes:
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


#: The varints of 0..16383 (one or two bytes), and each 14-bit group followed by more
#: groups (two bytes, both with the continuation bit): a long varint is a few lookups
#: rather than a Python loop per byte (a microsecond timestamp is eight bytes).
VARINTS: Final = tuple(_varint_by_bytes(z) for z in range(_TABLE))
_MORE: Final = tuple(bytes([(g & 0x7F) | 0x80, (g >> 7) | 0x80]) for g in range(_TABLE))


def varint(z: int) -> bytes:
    """The base-128 varint of a non-negative (already zig-zagged) integer."""
    if z < 128:
        return SMALL[z]
    if z < _TABLE:
        return VARINTS[z]
    out = _MORE[z & (_TABLE - 1)]
    z >>= _TABLE_BITS
    while z >= _TABLE:
        out += _MORE[z & (_TABLE - 1)]
        z >>= _TABLE_BITS
    return out + VARINTS[z]


def zigzag(n: int) -> bytes:
    """An Avro ``int``/``long``: zig-zag, then a base-128 varint."""
    return varint((n << 1) ^ (n >> 63))


_LENGTH_CACHE: Final = 16_384
#: The encoded lengths of short strings and bytes (the common case, precomputed).
LENGTHS: Final = tuple(zigzag(n) for n in range(_LENGTH_CACHE))


def blob(raw: bytes) -> bytes:
    """Avro ``bytes``: the length, then the bytes."""
    n = len(raw)
    return (LENGTHS[n] if n < _LENGTH_CACHE else zigzag(n)) + raw


def text(value: str) -> bytes:
    """Avro ``string``: the UTF-8 bytes with their length."""
    return blob(value.encode())


def read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint at ``pos``, as fastavro reads it (64-bit wrap-around included)."""
    b = buf[pos]
    pos += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    n &= _MASK64
    return (n >> 1) ^ -(n & 1), pos


# -- decimals ----------------------------------------------------------------------------


def unscaled(value: Decimal, scale: int | None = None) -> tuple[int, int]:
    """``value`` as an unscaled integer and the scale it carries.

    With ``scale`` given the value is written at exactly that scale; a value with more
    fractional digits is refused rather than rounded, as are NaN and the infinities.
    """
    if not value.is_finite():
        raise ValueError(f"{value} has no decimal encoding")
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    own = -exponent
    if scale is None:
        scale = own
    elif own > scale:
        raise ValueError(f"{value} has more than {scale} fractional digits")
    n = int("".join(map(str, digits)) or "0") * 10 ** (scale - own)
    return (-n if sign else n), scale


def signed_bytes(n: int) -> bytes:
    """The minimal big-endian two's complement of ``n`` (Java's ``toByteArray``)."""
    return n.to_bytes((n + (n < 0)).bit_length() // 8 + 1, "big", signed=True)


def fastavro_signed_bytes(n: int) -> bytes:
    """Big-endian two's complement of ``n`` in the width fastavro writes decimals."""
    return n.to_bytes((abs(n).bit_length() + 8) // 8, "big", signed=True)


def decimal_from_unscaled(raw: bytes, scale: int) -> Decimal:
    """A decimal from its two's-complement big-endian unscaled bytes and its scale."""
    n = int.from_bytes(raw, "big", signed=True)
    # From text, not scaleb(): Decimal arithmetic rounds to the context's 28 digits.
    return Decimal(f"{n}E{-scale}")


# -- object container files --------------------------------------------------------------

#: The first four bytes of an Avro object container file.
CONTAINER_MAGIC: Final = b"Obj\x01"


def container_header(schema_json: str, sync: bytes, codec: str = "null") -> bytes:
    """An object container file's header: magic, the metadata map (schema, codec), the
    16-byte sync marker. Blocks follow (:func:`container_block`)."""
    if len(sync) != 16:
        raise ValueError("an Avro sync marker has 16 bytes")
    meta = [("avro.schema", schema_json.encode()), ("avro.codec", codec.encode())]
    body = b"".join(text(k) + blob(v) for k, v in meta)
    return CONTAINER_MAGIC + zigzag(len(meta)) + body + SMALL[0] + sync


def container_block(count: int, data: bytes, sync: bytes) -> bytes:
    """One block of ``count`` records whose encodings, concatenated, are ``data``
    (uncompressed), followed by the sync marker."""
    return zigzag(count) + zigzag(len(data)) + data + sync
