"""The Avro binary primitives every writer and reader shares, held to fastavro."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bizevents.contracts.binary import (
    blob,
    decimal_from_unscaled,
    fastavro_signed_bytes,
    read_long,
    signed_bytes,
    text,
    unscaled,
    zigzag,
)

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def fastavro_bytes(schema: Any, datum: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return out.getvalue()


@pytest.mark.parametrize("n", [0, 1, -1, 63, -64, 64, 2**31, -(2**63), 2**63 - 1])
def test_zigzag_matches_fastavro_at_the_edges(n: int) -> None:
    assert zigzag(n) == fastavro_bytes("long", n)


@given(longs)
def test_zigzag_matches_fastavro_and_reads_back(n: int) -> None:
    raw = zigzag(n)
    assert raw == fastavro_bytes("long", n)
    assert read_long(raw + b"\x99", 0) == (n, len(raw))


@given(st.binary(max_size=20_000))
def test_blob_matches_fastavro(raw: bytes) -> None:
    """Lengths past the precomputed ones (16,384) included."""
    assert blob(raw) == fastavro_bytes("bytes", raw)


@given(st.text(max_size=300))
def test_text_matches_fastavro(value: str) -> None:
    assert text(value) == fastavro_bytes("string", value)


def test_read_long_refuses_a_varint_longer_than_ten_bytes() -> None:
    with pytest.raises(ValueError, match="longer than 10 bytes"):
        read_long(b"\xff" * 11, 0)


@pytest.mark.parametrize(
    ("n", "minimal", "fastavro_width"),
    [
        (0, "00", "00"),
        (-1, "ff", "ff"),
        (127, "7f", "7f"),
        (128, "0080", "0080"),
        (-128, "80", "ff80"),  # Java's toByteArray: 1 byte; fastavro: 2
        (-129, "ff7f", "ff7f"),
        (-32768, "8000", "ff8000"),
    ],
)
def test_the_two_widths_of_signed_bytes(n: int, minimal: str, fastavro_width: str) -> None:
    assert signed_bytes(n).hex() == minimal
    assert fastavro_signed_bytes(n).hex() == fastavro_width


@given(
    st.decimals(
        allow_nan=False, allow_infinity=False, places=4, max_value=10**20, min_value=-(10**20)
    )
)
def test_fastavro_width_is_what_fastavro_writes_for_a_decimal(value: Decimal) -> None:
    schema = {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 4}
    n, _ = unscaled(value, 4)
    assert blob(fastavro_signed_bytes(n)) == fastavro_bytes(schema, value)


@given(st.integers(min_value=-(2**200), max_value=2**200))
def test_both_widths_read_back_to_the_same_number(n: int) -> None:
    assert decimal_from_unscaled(signed_bytes(n), 0) == n
    assert decimal_from_unscaled(fastavro_signed_bytes(n), 0) == n
    assert len(signed_bytes(n)) <= len(fastavro_signed_bytes(n))


@pytest.mark.parametrize(
    ("raw", "scale", "expected"),
    [
        (b"\x00", 0, Decimal(0)),
        (b"\xff", 0, Decimal(-1)),
        (b"\x80", 2, Decimal("-1.28")),
        (b"\x00\x80", 2, Decimal("1.28")),
        (b"\x01\xe2\x40", 3, Decimal("123.456")),
        (b"\x01", -2, Decimal("1E+2")),
    ],
)
def test_unscaled_bytes_are_twos_complement(raw: bytes, scale: int, expected: Decimal) -> None:
    """Connect's decimal bytes are a big-endian two's-complement unscaled integer."""
    assert decimal_from_unscaled(raw, scale) == expected


@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_unscaled_round_trip_is_exact(value: Decimal) -> None:
    """Any finite decimal survives unscaled bytes and back, scale included."""
    n, scale = unscaled(value)
    back = decimal_from_unscaled(signed_bytes(n), scale)
    assert back == value
    assert back.as_tuple().exponent == value.as_tuple().exponent or value == 0


def test_decimal_with_too_many_digits_is_refused() -> None:
    """Writing 1.234 into a scale-2 column is an error, never a silent rounding."""
    with pytest.raises(ValueError, match="fractional digits"):
        unscaled(Decimal("1.234"), 2)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_decimals_have_no_encoding(value: str) -> None:
    with pytest.raises(ValueError, match="no decimal encoding"):
        unscaled(Decimal(value))
