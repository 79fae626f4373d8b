"""Confluent framing, parsed in one place: the strict parser and the hot path's test agree."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bizevents.plumbing.framing import FramingError, header, schema_id_of, unframe

FRAMED = st.builds(
    lambda schema_id, body: header(schema_id) + body,
    st.integers(min_value=0, max_value=2**32 - 1),
    st.binary(max_size=8),
)


@given(st.binary(max_size=12) | FRAMED)
def test_schema_id_of_agrees_with_unframe(data: bytes) -> None:
    """Where unframe reads an id, schema_id_of gives it; where unframe refuses, None."""
    try:
        schema_id, body = unframe(data)
    except FramingError:
        assert schema_id_of(data) is None
    else:
        assert schema_id_of(data) == schema_id
        assert header(schema_id) + bytes(body) == data


def test_short_and_unframed_bytes_have_no_schema_id() -> None:
    """Four bytes, or a first byte other than 0, is not a frame."""
    assert schema_id_of(b"\x00\x00\x00\x01") is None
    assert schema_id_of(b"\x01\x00\x00\x00\x01") is None
    assert schema_id_of(b"\x00\x00\x00\x00\x07") == 7
