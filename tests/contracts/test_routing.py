"""Routing by business key: the key's bytes, Kafka's partitioner, the routing topic's codec."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bizevents.contracts.binary import zigzag
from bizevents.contracts.technical import routing
from bizevents.contracts.technical.routing import (
    TableRouting,
    decode_routing,
    encode_routing,
    long_partition,
    murmur2,
    partition_for,
    python_long_partition,
    python_murmur2,
    routing_key,
    routing_topic,
)

#: Kafka's own UtilsTest.testMurmur2 (clients/src/test/java/.../utils/UtilsTest.java).
_KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), _KAFKA_MURMUR2.items())
def test_murmur2_is_kafkas(data: bytes, expected: int) -> None:
    """The hash Kafka's Java client computes, for every tail length (0 to 3 bytes)."""
    assert murmur2(data) == expected


def test_partition_for_is_kafkas_default_partitioner() -> None:
    """``toPositive(murmur2(key)) % n``: a negative hash is masked, not negated."""
    assert partition_for(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert partition_for(b"abc", 5) == 479470107 % 5


@given(st.binary(max_size=40), st.integers(min_value=1, max_value=1000))
def test_partition_is_in_range(key: bytes, partitions: int) -> None:
    """Every key lands on one of the partitions."""
    assert 0 <= partition_for(key, partitions) < partitions
    assert -(2**31) <= murmur2(key) < 2**31


@given(st.integers(min_value=-(2**63), max_value=2**63))
def test_one_int_is_its_digits(value: int) -> None:
    """One integer column: its decimal digits, as the transaction worker's key."""
    assert routing_key([value]) == str(value).encode()


@given(st.lists(st.one_of(st.integers(), st.text(max_size=8)), min_size=1, max_size=3))
def test_other_keys_are_compact_json(values: list[object]) -> None:
    """Anything else: the values' compact JSON (one int excepted)."""
    if len(values) == 1 and type(values[0]) is int:
        return
    assert json.loads(routing_key(values)) == values
    assert routing_key(values) == json.dumps(values, separators=(",", ":")).encode()


def test_bool_is_not_an_int() -> None:
    """A boolean key is JSON (``[true]``), as ``json.dumps`` writes it, not ``1``."""
    assert routing_key([True]) == b"[true]"


def test_topic_name() -> None:
    assert routing_topic("shop") == "shop.routing"


_ROUTINGS = st.builds(
    TableRouting,
    st.text(min_size=1, max_size=20),
    st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=3).map(tuple),
    st.integers(min_value=1, max_value=10_000),
)


@given(_ROUTINGS)
def test_routing_round_trip(routing: TableRouting) -> None:
    """A declared routing decodes to itself."""
    assert decode_routing(*encode_routing(routing)) == routing


def test_tombstone_is_no_routing() -> None:
    assert decode_routing(b"store.orders", None) is None


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, b"{}", "has no key"),
        (b"t", b"nope", "the routing of t is not JSON"),
        (b"t", b'{"columns": [], "partitions": 2}', "needs columns"),
        (b"t", b'{"columns": ["id"], "partitions": 0}', "needs partitions"),
        (b"t", b'{"columns": ["id"], "partitions": true}', "needs partitions"),
        (b"t", b"[1]", "needs columns"),
    ],
)
def test_bad_routing_is_named(key: bytes | None, value: bytes, reason: str) -> None:
    """A bad record raises ValueError with one sentence naming the table."""
    with pytest.raises(ValueError, match=reason):
        decode_routing(key, value)


# -- the compiled routing (_routing.c) against its Python reference -----------------------


def test_the_routing_is_built() -> None:
    """scripts/setup builds contracts/technical/_routing.c; without it the Python runs and
    the tests below would compare nothing."""
    assert routing._routing is not None, "contracts/technical/_routing.c is not built"
    assert routing.murmur2 is routing._routing.murmur2


def _compiled() -> Any:
    assert routing._routing is not None
    return routing._routing


def _outcome(call: Callable[[], int]) -> object:
    try:
        return call()
    except ValueError as exc:
        return ("ValueError", str(exc))


@given(st.binary(max_size=64))
def test_compiled_murmur2_is_the_python(data: bytes) -> None:
    assert _compiled().murmur2(data) == python_murmur2(data)


@pytest.mark.parametrize(("data", "expected"), _KAFKA_MURMUR2.items())
def test_compiled_murmur2_is_kafkas(data: bytes, expected: int) -> None:
    assert _compiled().murmur2(data) == expected


@given(
    st.binary(max_size=32),
    st.integers(min_value=0, max_value=8),
    st.integers(min_value=0, max_value=3),
    st.integers(min_value=1, max_value=2**31 - 1),
)
def test_compiled_long_partition_is_the_python_on_any_bytes(
    key: bytes, offset: int, skip: int, partitions: int
) -> None:
    """The same partition, or the same refusal, whatever the bytes."""
    compiled = _outcome(lambda: _compiled().long_partition(key, offset, skip, partitions))
    assert compiled == _outcome(lambda: python_long_partition(key, offset, skip, partitions))


@given(
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), min_size=1, max_size=4),
    st.data(),
    st.integers(min_value=1, max_value=64),
)
def test_long_partition_is_the_routing_keys(
    values: list[int], data: st.DataObject, partitions: int
) -> None:
    """The long read from a framed key is routed as the decoded value would be, by
    both the compiled and the Python path."""
    skip = data.draw(st.integers(min_value=0, max_value=len(values) - 1))
    key = b"\0\0\0\0\1" + b"".join(zigzag(v) for v in values)
    expected = partition_for(routing_key([values[skip]]), partitions)
    assert python_long_partition(key, 5, skip, partitions) == expected
    assert long_partition(key, 5, skip, partitions) == expected
