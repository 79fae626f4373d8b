"""The compiled pgoutput tuples (capture/postgres/_tuples.c) give what the Python they
replace gives: the same values or the same ProtocolError for any tuple bytes, and the same
record bytes or the same error for any tuple values. tests/hostile.py runs the same
comparisons under the sanitizers (scripts/sanitize)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bizevents.capture.exceptions import ProtocolError
from bizevents.capture.postgres import codec as codec_module
from bizevents.capture.postgres import pgoutput
from bizevents.capture.postgres.messages import TupleData
from bizevents.contracts.logical import UNAVAILABLE
from tests.hostile import PG_COLUMNS, pg_codecs

SETTINGS = settings(max_examples=400, deadline=None)


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """What a call gives: its value, or its error's class and sentence."""
    try:
        return ("value", call())
    except ProtocolError as exc:
        return ("protocol", (exc.message_type, exc.offset, exc.reason))
    except Exception as exc:
        return (type(exc).__name__, str(exc))


def test_the_tuples_are_built() -> None:
    """scripts/setup builds capture/postgres/_tuples.c; without it the Python runs and the
    tests below would compare it with itself."""
    assert pgoutput.COMPILED, "capture/postgres/_tuples.c is not built: run scripts/setup"
    assert pgoutput._tuple_data is pgoutput._compiled_tuple_data
    assert codec_module._tuples is not None


# -- tuple bytes -------------------------------------------------------------------------

VALUE = st.one_of(
    st.just(b"n"),
    st.just(b"u"),
    st.binary(max_size=12).map(lambda b: b"t" + len(b).to_bytes(4, "big", signed=True) + b),
    st.text(max_size=8).map(
        lambda s: b"t" + len(s.encode()).to_bytes(4, "big", signed=True) + s.encode()
    ),
    st.binary(max_size=12).map(lambda b: b"b" + len(b).to_bytes(4, "big", signed=True) + b),
    st.integers(-(2**31), 2**31 - 1).map(lambda n: b"t" + n.to_bytes(4, "big", signed=True)),
    st.binary(min_size=1, max_size=3),
)


@st.composite
def tuple_bytes(draw: st.DrawFn) -> tuple[bytes, int]:
    """Well-formed tuples and ones made hostile: cut short, counts that lie, random
    bytes, values of unknown kinds and impossible lengths; a position anywhere."""
    values = draw(st.lists(VALUE, max_size=6))
    count = draw(st.one_of(st.just(len(values)), st.integers(-(2**15), 2**15 - 1)))
    body = count.to_bytes(2, "big", signed=True) + b"".join(values)
    body = draw(st.one_of(st.just(body), st.binary(max_size=40)))
    cut = draw(st.integers(0, len(body)))
    body = draw(st.sampled_from([body, body[:cut], body + b"\x00"]))
    prefix = draw(st.binary(max_size=3))
    pos = draw(st.one_of(st.just(len(prefix)), st.integers(0, len(prefix) + len(body) + 3)))
    return prefix + body, pos


@SETTINGS
@given(case=tuple_bytes())
def test_a_tuple_reads_as_the_pythons(case: tuple[bytes, int]) -> None:
    data, pos = case
    compiled = outcome(lambda: pgoutput._compiled_tuple_data("U", data, pos))
    python = outcome(lambda: pgoutput._python_tuple_data("U", data, pos))
    assert compiled == python
    assert compiled[0] in ("value", "protocol")


# -- records -----------------------------------------------------------------------------


CODECS = pg_codecs()

TEXT_VALUE = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(
        ["t", "f", "", " 1", "+1", "1_0", "-0", "007", "١٢", "1.50", "-12.5", "NaN", "x"]
    ),
    # the longest integers the C reads itself (18 digits), and those it hands on
    st.sampled_from(["999999999999999999", "-999999999999999999", "9999999999999999999"]),
    st.sampled_from(["9223372036854775807", "-9223372036854775808", "-" + "9" * 19]),
    st.sampled_from(["2024-05-01 10:34:56.123456+00", "infinity", "2024-05-01 10:34:56+00"]),
    st.text(max_size=10),
    # numerics with the dot anywhere, timestamps with fractions of any length
    st.tuples(st.integers(-(10**20), 10**20), st.integers(0, 4)).map(
        lambda t: str(t[0])[: len(str(t[0])) - t[1]] + "." + str(t[0])[len(str(t[0])) - t[1] :]
    ),
    st.text("0123456789", max_size=8).map(lambda f: f"2024-05-01 10:34:56.{f}+00"),
)
#: Mostly text: a value that is not text sends the whole tuple to the Python.
ROW = st.lists(
    st.one_of(TEXT_VALUE, st.none()), min_size=len(PG_COLUMNS), max_size=len(PG_COLUMNS) + 1
).map(tuple)
ANY_VALUE = st.one_of(TEXT_VALUE, st.none(), st.just(UNAVAILABLE), st.binary(max_size=4))
ANY_ROW = st.lists(ANY_VALUE, min_size=len(PG_COLUMNS), max_size=len(PG_COLUMNS) + 1).map(tuple)


@SETTINGS
@given(values=st.one_of(ROW, ANY_ROW), nullable=st.booleans())
def test_a_record_is_the_pythons(values: TupleData, nullable: bool) -> None:
    codec = CODECS[nullable]
    for slots, write in (
        (codec._value_slots, codec._write_row),
        (codec._key_slots, codec._write_key),
    ):
        compiled = outcome(lambda: write(values))  # noqa: B023
        python = outcome(lambda: codec_module._python_record(slots)(values))  # noqa: B023
        assert compiled == python


def test_a_short_tuple_fails_as_the_pythons() -> None:
    """A tuple with fewer values than the table has columns: the same IndexError."""
    codec = CODECS[False]
    short: TupleData = ("1",)
    compiled = outcome(lambda: codec._write_row(short))
    python = outcome(lambda: codec_module._python_record(codec._value_slots)(short))
    assert compiled == python
    assert compiled[0] == "IndexError"


EDGES = [
    "999999999999999999",
    "-999999999999999999",
    "9999999999999999999",
    "-9223372036854775808",
    "9223372036854775807",
    "-" + "9" * 19,
    "1" + "0" * 30,
    "-0",
    "+7",
    " 7",
    "t",
    "f",
    "T",
    "true",
    "false",
    "",
    "é",
    "1.5",
    "1.500",
    "-.50",
    "5.",
    ".",
    "-",
    "1.2.3",
    "-99999999999999999.99",
    "9999999999999999.99",
    "+1.50",
    "1_0.00",
    "٣.00",
    "2024-05-01 10:34:56+00",
    "2024-05-01 10:34:56.+00",
    "2024-05-01 10:34:56.123456+00",
    "2024-05-01 10:34:56.1234567+00",
    "2024-05-01 10:34:56x123+00",
    "2024-05-01 10:34:56.5+05",
    "2024-05-01T10:34:56+00",
    "é024-05-01 10:34:56+00",
    "infinity",
]
VALID: TupleData = ("1", "2", "t", "x", "1.50", "2024-05-01 10:34:56+00", "3")


def test_every_column_takes_each_edge_text_as_the_python_does() -> None:
    """Each edge text in each column of an otherwise valid row: integers at and past the
    digits the C reads itself, signs, spaces, booleans' letters."""
    for codec in CODECS.values():
        for slots, write in (
            (codec._value_slots, codec._write_row),
            (codec._key_slots, codec._write_key),
        ):
            for at in range(len(VALID)):
                for edge in EDGES:
                    values = (*VALID[:at], edge, *VALID[at + 1 :])
                    compiled = outcome(lambda: write(values))  # noqa: B023
                    python = outcome(lambda: codec_module._python_record(slots)(values))  # noqa: B023
                    assert compiled == python, values
