"""Hostile bytes against both readers (the extension's and the generated one), the changes
gate and the writer: each either reads what fastavro reads, with the same values, or
refuses with an error (issue 26's defects, one test each)."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bizevents.contracts.avro_codegen import Reader, Unsupported, compile_reader
from bizevents.contracts.avro_codegen.gen import Refused
from bizevents.contracts.avro_codegen.native import AVAILABLE, compile_native_reader
from bizevents.contracts.exceptions import DecodeError
from tests.hostile import within_memory, zigzag


def test_the_compiled_reader_is_here() -> None:
    """Half of these run on the extension: unbuilt, the suite fails here (never skips)."""
    assert AVAILABLE, "the compiled extension is not built (scripts/setup builds it)"


COMPILERS = pytest.mark.parametrize(
    "compile", [compile_native_reader, compile_reader], ids=["compiled", "generated"]
)


@contextmanager
def deadline(seconds: int = 5) -> Iterator[None]:
    """A read that never returns fails the test instead of freezing it."""

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def text(s: bytes) -> bytes:
    return zigzag(len(s)) + s


def outcome(read: Callable[[], tuple[Any, int]]) -> tuple[str, Any]:
    """A read's value and end, or the kind of its error."""
    try:
        return ("value", read())
    except (EOFError, IndexError, ValueError, UnicodeDecodeError, Refused) as exc:
        return ("error", type(exc).__name__)


def fastavro_read(schema: Any, body: bytes) -> tuple[Any, int]:
    buffer = io.BytesIO(body)
    with within_memory():
        datum = fastavro.schemaless_reader(buffer, schema, None)
    return datum, buffer.tell()


def same_verdict(ours: tuple[str, Any], reference: tuple[str, Any]) -> None:
    """Both read the same value, or both raise (fastavro's errors name other kinds)."""
    assert ours[0] == reference[0], (ours, reference)
    if ours[0] == "value":
        assert repr(ours[1]) == repr(reference[1])


ROW = {
    "type": "record",
    "name": "Row",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "tags", "type": ["null", {"type": "array", "items": "string"}]},
        {"name": "name", "type": "string"},
    ],
}
ENVELOPE = fastavro.parse_schema(
    {"type": "record", "name": "Envelope", "fields": [{"name": "after", "type": ["null", ROW]}]}
)


@COMPILERS
def test_a_negative_block_size_in_a_skipped_array_does_not_hang(
    compile: Callable[..., Reader],
) -> None:
    """02 02 02 01 03: after = a row, id 1, tags an array block of one item whose
    declared size is -2; the generated reader used to jump back two bytes forever."""
    read = compile(ENVELOPE, keep={"after": {"id"}})
    body = bytes([2, 2, 2, 1, 3])
    with deadline():
        ours = outcome(lambda: read(body, 0))
    assert ours == ("error", "EOFError")
    with pytest.raises(EOFError):
        fastavro_read(ENVELOPE, body)


@COMPILERS
@settings(max_examples=300, deadline=None)
@given(
    tags=st.lists(st.text(max_size=6), max_size=4),
    name=st.text(max_size=6),
    declared=st.integers(min_value=-40, max_value=40),
)
def test_projected_reads_do_not_trust_a_blocks_byte_size(
    compile: Callable[..., Reader], tags: list[str], name: str, declared: int
) -> None:
    """A block that declares a byte size unlike its items': the projected read of
    ``name`` gives what a full read and fastavro give (it used to jump by the size)."""
    block = b"".join(text(t.encode()) for t in tags)
    array = (zigzag(-len(tags)) + zigzag(declared) + block if tags else b"") + b"\x00"
    body = b"\x02" + zigzag(1) + b"\x02" + array + text(name.encode())
    reference = outcome(lambda: fastavro_read(ENVELOPE, body))
    with deadline():
        projected = outcome(lambda: compile(ENVELOPE, keep={"after": {"name"}})(body, 0))
        full = outcome(lambda: compile(ENVELOPE)(body, 0))
    same_verdict(full, reference)
    assert reference[0] == "value" and projected[0] == "value"
    assert projected[1][0]["after"] == {"name": name} and projected[1][1] == len(body)


def test_the_issue_s_lying_block_reads_as_fastavro_reads_it() -> None:
    """The issue's example: a projected read gave 'A\\x00\\x04hi' where fastavro reads
    'hi' (a block of one item, "A", declaring a size of 0)."""
    body = b"\x02\x02\x02" + zigzag(-1) + zigzag(0) + text(b"A") + b"\x00" + text(b"hi")
    for compile in (compile_native_reader, compile_reader):
        projected = compile(ENVELOPE, keep={"after": {"name"}})(body, 0)
        assert projected == ({"after": {"name": "hi"}}, len(body))
    assert fastavro_read(ENVELOPE, body)[0]["after"]["name"] == "hi"


NO_WIDTH = [
    "null",
    {"type": "record", "name": "Empty", "fields": []},
    {"type": "fixed", "name": "Nothing", "size": 0},
    {
        "type": "record",
        "name": "Nulls",
        "fields": [{"name": "a", "type": "null"}, {"name": "b", "type": "null"}],
    },
]


def _holder(items: Any) -> Any:
    return fastavro.parse_schema(
        {
            "type": "record",
            "name": "Holder",
            "fields": [
                {"name": "xs", "type": {"type": "array", "items": items}},
                {"name": "n", "type": "long"},
            ],
        }
    )


@COMPILERS
@pytest.mark.parametrize("items", NO_WIDTH, ids=["null", "empty", "fixed0", "nulls"])
@pytest.mark.parametrize("keep", [None, {"n"}], ids=["read", "skipped"])
def test_arrays_of_items_without_bytes_read_like_fastavro(
    compile: Callable[..., Reader], items: Any, keep: set[str] | None
) -> None:
    """array<null> (or of empty records) used to give generated code that did not
    compile (IndentationError)."""
    schema = _holder(items)
    datum = fastavro_read(schema, zigzag(1000) + b"\x00" + zigzag(7))[0]
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, datum)
    body = buffer.getvalue()
    read = compile(schema) if keep is None else compile_projected(compile, schema, keep)
    got, end = read(body, 0)
    assert end == len(body)
    assert got == (datum if keep is None else {"n": 7})


def compile_projected(compile: Callable[..., Reader], schema: Any, keep: set[str]) -> Reader:
    outer = fastavro.parse_schema(
        {"type": "record", "name": "Outer", "fields": [{"name": "h", "type": schema}]}
    )
    read = compile(outer, keep={"h": keep})

    def inner(body: bytes, pos: int) -> tuple[Any, int]:
        datum, end = read(body, pos)
        return datum["h"], end

    return inner


@COMPILERS
@pytest.mark.parametrize("keep", [None, {"n"}], ids=["read", "skipped"])
@pytest.mark.parametrize("items", ["null", "long"])
def test_a_block_count_of_minus_2_63_holds_no_items_as_fastavro_reads_it(
    compile: Callable[..., Reader], keep: set[str] | None, items: str
) -> None:
    """-2**63 has no positive counterpart: the C reader's ``n = -n`` was undefined (at
    -O2, 2**63 items); fastavro reads no items and goes on."""
    schema = _holder(items)
    body = zigzag(-(2**63)) + zigzag(0) + b"\x00" + zigzag(7)
    reference = fastavro_read(schema, body)
    assert reference == ({"xs": [], "n": 7}, len(body))
    read = compile(schema) if keep is None else compile_projected(compile, schema, keep)
    with deadline():
        got = read(body, 0)
    assert got == (reference[0] if keep is None else {"n": 7}, len(body))


@COMPILERS
@pytest.mark.parametrize("items", NO_WIDTH, ids=["null", "empty", "fixed0", "nulls"])
@pytest.mark.parametrize("keep", [None, {"n"}], ids=["read", "skipped"])
def test_counts_of_items_without_bytes_are_bounded_by_the_bytes_left(
    compile: Callable[..., Reader], items: Any, keep: set[str] | None
) -> None:
    """Six bytes asking for 2**62 items of no width: refused, not built (fastavro would
    build that list, or run out of memory)."""
    schema = _holder(items)
    body = zigzag(2**62) + b"\x00" + zigzag(7)
    read = compile(schema) if keep is None else compile_projected(compile, schema, keep)
    with deadline(), pytest.raises(Refused, match="items of no width"):
        read(body, 0)


@COMPILERS
def test_counts_beyond_the_bytes_left_are_an_end_of_file(compile: Callable[..., Reader]) -> None:
    schema = _holder("long")
    body = zigzag(2**62) + zigzag(1) + b"\x00" + zigzag(7)
    with deadline(), pytest.raises(EOFError):
        compile(schema)(body, 0)
    with pytest.raises(EOFError):
        fastavro_read(schema, body)


def test_the_decoder_dead_letters_a_refused_count_with_its_reason() -> None:
    """The decoder gives the readers' refusal, not fastavro's 400 MB list: a forged
    envelope whose row holds an array of nulls, asking for 2**62 of them."""
    from bizevents.contracts.technical import AvroDecoder
    from tests.contracts.test_fast_decode import ORDERS, WHERE, _registry

    encoder, schemas = _registry(ORDERS)
    source = next(f for f in encoder.schemas.value["fields"] if f["name"] == "source")
    row = {
        "type": "record",
        "name": "Row",
        "fields": [{"name": "n", "type": {"type": "array", "items": "null"}}],
    }
    schemas[9] = {
        "type": "record",
        "name": "Envelope",
        "namespace": "forged",
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "Row"], "default": None},
            {"name": "op", "type": "string"},
            source,
        ],
    }
    decoder = AvroDecoder(schemas.__getitem__)
    value = b"\x00" + (9).to_bytes(4, "big") + b"\x02" + zigzag(2**62) + b"\x00" * 4
    with deadline(), pytest.raises(DecodeError, match=r"refused .*items of no width"):
        decoder.decode(None, value, WHERE)


def _deep(levels: int) -> Any:
    t: Any = "long"
    for i in range(levels):
        t = {"type": "record", "name": f"Level{i}", "fields": [{"name": "inner", "type": t}]}
    return t


def test_a_schema_nested_deeper_than_the_interpreter_is_left_to_fastavro() -> None:
    """Program(...) raised ValueError for a plan nested more than 64 deep; the makers
    now say Unsupported (the decoder then reads with fastavro)."""
    schema = fastavro.parse_schema(_deep(100))
    with pytest.raises(Unsupported, match="nested more than 64 deep"):
        compile_native_reader(schema)
    datum: Any = 5
    for _ in range(100):
        datum = {"inner": datum}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, datum)
    assert compile_reader(schema)(buffer.getvalue(), 0) == (datum, len(buffer.getvalue()))


def test_unions_nested_deeper_than_python_indents_are_unsupported() -> None:
    """The generated reader indents once per union: past Python's 100 levels its code
    does not compile, which is Unsupported, not an IndentationError."""
    t: Any = "long"
    for i in range(120):
        t = [
            "null",
            {"type": "record", "name": f"U{i}", "fields": [{"name": "inner", "type": t}]},
        ]
    schema = fastavro.parse_schema(
        {"type": "record", "name": "Top", "fields": [{"name": "x", "type": t}]}
    )
    with pytest.raises(Unsupported):
        compile_reader(schema)


def test_write_plans_are_checked_once_and_never_crash() -> None:
    """_native.write_model((9,), None) read past the plan tuple and crashed the process;
    a write plan is now checked when it is made."""
    code = (
        "import bizevents.contracts.avro_codegen.native as n\n"
        "for plan in [(9,), (99,), (5, 1), (), (12, None, None, (0,)), (1,)]:\n"
        "    try:\n"
        "        n.EXTENSION.WritePlan(plan)\n"
        "    except (TypeError, ValueError) as exc:\n"
        "        print('refused', type(exc).__name__)\n"
        "    else:\n"
        "        print('taken')\n"
        "try:\n"
        "    n.EXTENSION.write_model((9,), None)\n"
        "except (TypeError, ValueError, AttributeError) as exc:\n"
        "    print('refused', type(exc).__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert done.stdout.count("refused") == 6 and lines[-4:] != [], done.stdout
    assert "taken" in done.stdout  # (1,): a boolean, a whole plan


@COMPILERS
def test_a_padded_union_index_in_a_skipped_field_reads_as_fastavro_reads_it(
    compile: Callable[..., Reader],
) -> None:
    """0x80 0x00 is a union index of 0 written in two bytes: fastavro and the compiled
    reader read it; the generated reader's skip took one byte and refused it (found by
    scripts/sanitize)."""
    schema = fastavro.parse_schema(
        {
            "type": "record",
            "name": "Padded",
            "fields": [{"name": "u", "type": ["null", "long"]}, {"name": "n", "type": "long"}],
        }
    )
    outer = fastavro.parse_schema(
        {"type": "record", "name": "Around", "fields": [{"name": "p", "type": schema}]}
    )
    body = b"\x80\x00" + zigzag(7)
    assert fastavro_read(outer, body) == ({"p": {"u": None, "n": 7}}, 3)
    assert compile(outer, keep={"p": {"n"}})(body, 0) == ({"p": {"n": 7}}, 3)


# -- both readers against fastavro, on valid data made hostile -----------------------------

#: Where a reader may refuse what fastavro reads, by design: an Avro int beyond 32 bits
#: (the row decoder names the column after fastavro reads it), a varint beyond 10 bytes,
#: and items of no width beyond the datum's bytes (Refused, whose verdict stands).
DESIGNED_REFUSALS = ("does not fit int32", "longer than 10 bytes", "items of no width")


def _shapes() -> Any:
    from tests.hostile import SHAPES

    return fastavro.parse_schema(SHAPES)


@COMPILERS
@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32), mutations=st.integers(0, 3))
def test_both_readers_read_what_fastavro_reads_and_refuse_what_it_refuses(
    compile: Callable[..., Reader], seed: int, mutations: int
) -> None:
    """Valid data of every covered type (arrays of nulls and of empty records among them)
    mutated: truncated, bits flipped, bytes inserted and deleted, varints spliced in that
    read as huge lengths and counts, -2**63, out-of-range union and enum indexes. Where
    fastavro reads a whole body, a reader reads the same value or refuses by design; where
    fastavro refuses, so does the reader."""
    import random

    from tests.hostile import mutate, shapes_datum

    rng = random.Random(seed)
    schema = _shapes()
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, shapes_datum(rng))
    body = buffer.getvalue()
    for _ in range(mutations):
        body = mutate(rng, body)
    try:
        with deadline():
            ours: tuple[str, Any] = ("value", compile(schema)(body, 0))
    except Refused:
        return  # fastavro would build the list item by item: not asked (its memory)
    except Exception as exc:  # the readers' errors are of several kinds (struct's too)
        ours = ("error", str(exc))
    try:
        reference: tuple[str, Any] = ("value", fastavro_read(schema, body))
    except Exception:
        reference = ("error", None)
    if reference[0] == "value" and reference[1][1] == len(body):
        if ours[0] == "error":
            assert any(r in ours[1] for r in DESIGNED_REFUSALS), ours
        else:
            assert repr(ours[1]) == repr(reference[1])
    elif ours[0] == "value" and ours[1][1] == len(body):
        raise AssertionError(f"read {ours[1]!r} where fastavro refuses {body!r}")


def test_the_reference_reader_runs_out_of_memory_as_an_error() -> None:
    """fastavro, the reference, builds an array of 2**34 nulls item by item: bounded, it
    raises MemoryError in a moment instead of filling the machine (a fuzzed count of that
    size had the suite's process killed by the kernel)."""
    schema = fastavro.parse_schema({"type": "array", "items": "null"})
    with pytest.raises(MemoryError):
        fastavro_read(schema, zigzag(2**34) + b"\x00")
