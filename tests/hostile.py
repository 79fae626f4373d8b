"""Hostile inputs through every entry point of the C extensions that takes record bytes
(or values to write), each result compared with the pure-Python path: the same value, or
an error on both sides. ``scripts/sanitize`` runs it on extensions built with
AddressSanitizer and UndefinedBehaviorSanitizer (any report aborts the process);
tests/contracts/test_sanitize.py runs a short round of it.

    python -m tests.hostile [--inputs N] [--seed S] [--extension-dir DIR] [--only NAME]

Entry points: ``reader`` (a read plan, whole and projected: every Avro type, logical
types, decimals, arrays of items of no width), ``decoder`` (the decoder's plan of a
Debezium envelope: builders, conversions, projection), ``gate`` (the changes gate, which
must never call unchanged a record the Python decoder refuses or whose columns differ),
``writer`` (a contract's write plan, fed values out of range and of the wrong type),
``file_record`` (the replay's file records), ``event_id`` (SHA-1 against
``uuid.uuid5``), ``routing`` (murmur2 and a routed key's partition, on any bytes),
``pg_tuple`` (pgoutput's tuples, whose errors must be the Python's
ProtocolError to the byte offset) and ``pg_record`` (a captured row's Avro record).
Inputs are valid data mutated: random bytes, truncations, bit flips, insertions,
deletions, and varints spliced in that read as huge lengths and counts, negative counts
(-2**63 among them) and out-of-range union and enum indexes.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.util
import io
import math
import random
import resource
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro

#: The modules a sanitized build replaces, by the file name's stem.
MODULES = {
    "_native": "bizevents.contracts.avro_codegen._native",
    "_lineage": "bizevents.translators._lineage",
    "_tuples": "bizevents.capture.postgres._tuples",
    "_routing": "bizevents.contracts.technical._routing",
}


@contextlib.contextmanager
def within_memory(extra: int = 1 << 30) -> Iterator[None]:
    """Address space bounded to what the process has and ``extra`` more while inside:
    fastavro, the reference, builds a hostile array of items of no width item by item
    (a count of 2**31 nulls is many gigabytes), and a reference that runs out of memory
    is a refusal (MemoryError), not the machine's out-of-memory killer."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * resource.getpagesize()
    bound = size + extra if hard == resource.RLIM_INFINITY else min(size + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (bound, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def load_extensions(directory: Path) -> list[str]:
    """The sanitized builds in ``directory`` loaded in place of the project's own, before
    anything imports them; their paths."""
    importlib.import_module("bizevents.contracts.avro_codegen.gen")
    loaded = []
    for path in sorted(directory.glob("*.so")):
        name = MODULES[path.name.split(".")[0]]
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        loaded.append(str(path))
    return loaded


# -- bytes ------------------------------------------------------------------------------


def zigzag(n: int) -> bytes:
    u = ((n << 1) ^ (n >> 63)) & (2**64 - 1)
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


#: Varints that read as huge lengths and counts, negative counts and out-of-range
#: indexes wherever they land.
NASTY = [
    zigzag(n)
    for n in (
        -(2**63),
        2**63 - 1,
        -(2**62),
        2**62,
        2**31,
        -(2**31) - 1,
        -1,
        -2,
        -3,
        -64,
        1 << 40,
        65,
        127,
        4,
        5,
        -5,
        1000,
        100_000,
    )
] + [b"\xff" * 10 + b"\x01", b"\x80" * 9 + b"\x01", b"\xff"]


def mutate(rng: random.Random, body: bytes) -> bytes:
    """``body`` changed in one to three ways."""
    data = bytearray(body)
    for _ in range(rng.randint(1, 3)):
        way = rng.randrange(7)
        at = rng.randrange(len(data) + 1)
        if way == 0:
            return bytes(rng.randbytes(rng.randrange(0, 80)))
        if way == 1:
            del data[at:]
        elif way == 2 and data:
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif way == 3:
            data[at:at] = rng.randbytes(rng.randint(1, 4))
        elif way == 4:
            del data[at : at + rng.randint(1, 4)]
        elif way == 5:
            nasty = rng.choice(NASTY)
            data[at : at + rng.randint(0, 2)] = nasty
        elif data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
    return bytes(data)


def verdict(call: Callable[[], Any]) -> tuple[str, Any]:
    """("value", repr of the result) or ("error", "") for any Exception (fastavro's and
    the readers' errors are of several kinds for the same bytes)."""
    try:
        return ("value", repr(call()))
    except Exception:
        return ("error", "")


class Mismatch(AssertionError):
    pass


def expect(same: bool, what: str, data: Any, ours: Any, reference: Any) -> None:
    if not same:
        raise Mismatch(f"{what}: {data!r}\n  compiled: {ours!r}\n  python:   {reference!r}")


# -- reader -------------------------------------------------------------------------------

EMPTY = {"type": "record", "name": "Empty", "fields": []}
SHAPES = {
    "type": "record",
    "name": "Shapes",
    "namespace": "h",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "x", "type": {"type": "fixed", "name": "F", "size": 3}},
        {"name": "z", "type": {"type": "fixed", "name": "Z", "size": 0}},
        {"name": "m", "type": {"type": "map", "values": ["null", "long"]}},
        {"name": "a", "type": {"type": "array", "items": "string"}},
        {"name": "n", "type": {"type": "array", "items": "null"}},
        {"name": "r", "type": {"type": "array", "items": EMPTY}},
        {"name": "u", "type": ["null", "string", "long", "E"]},
        {"name": "dt", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tm", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {
            "name": "dec",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2},
        },
        {
            "name": "fdec",
            "type": {
                "type": "fixed",
                "name": "FD",
                "size": 9,
                "logicalType": "decimal",
                "precision": 20,
                "scale": 3,
            },
        },
        {"name": "bs", "type": "bytes"},
        {"name": "mm", "type": {"type": "map", "values": {"type": "array", "items": "long"}}},
    ],
}
WRAPPED = {"type": "record", "name": "Outer", "namespace": "h", "fields": []}


def shapes_datum(rng: random.Random) -> dict[str, Any]:
    import datetime

    return {
        "b": rng.random() < 0.5,
        "i": rng.randint(-(2**31), 2**31 - 1),
        "l": rng.randint(-(2**63), 2**63 - 1),
        "f": rng.random(),
        "d": rng.uniform(-1e300, 1e300),
        "e": rng.choice("ABC"),
        "x": rng.randbytes(3),
        "z": b"",
        "m": {str(k): rng.choice([None, k]) for k in range(rng.randrange(4))},
        "a": [rng.randbytes(rng.randrange(6)).hex() for _ in range(rng.randrange(4))],
        "n": [None] * rng.randrange(5),
        "r": [{}] * rng.randrange(5),
        "u": rng.choice([None, "text", 77, "B"]),
        "dt": datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randrange(-9999, 9999)),
        "ts": datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC)
        + datetime.timedelta(milliseconds=rng.randrange(-(10**12), 10**12)),
        "tm": datetime.time(rng.randrange(24), rng.randrange(60), rng.randrange(60)),
        "id": uuid.UUID(int=rng.getrandbits(128)),
        "dec": Decimal(rng.randrange(-999999, 999999)).scaleb(-2),
        "fdec": Decimal(rng.randrange(-(10**19), 10**19)).scaleb(-3),
        "bs": rng.randbytes(rng.randrange(10)),
        "mm": {"k": [rng.randrange(-5, 5) for _ in range(rng.randrange(3))]},
    }


def reader_round(rng: random.Random, inputs: int) -> int:
    from bizevents.contracts.avro_codegen import compile_reader
    from bizevents.contracts.avro_codegen.native import compile_native_reader

    parsed = fastavro.parse_schema(SHAPES)
    wrapped = fastavro.parse_schema(
        {**WRAPPED, "fields": [{"name": "s", "type": SHAPES}, {"name": "t", "type": "long"}]}
    )
    keeps = [{"b", "i"}, {"n", "dec"}, {"mm"}, {"u", "r", "bs"}, {"fdec"}]
    pairs = [(compile_native_reader(parsed), compile_reader(parsed))]
    for keep in keeps:
        projection = {"s": keep}
        pairs.append(
            (
                compile_native_reader(wrapped, keep=projection),
                compile_reader(wrapped, keep=projection),
            )
        )
    bodies = []
    for _ in range(64):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, shapes_datum(rng))
        bodies.append(buffer.getvalue())
    done = 0
    while done < inputs:
        body = mutate(rng, rng.choice(bodies))
        which = rng.randrange(len(pairs))
        ours, reference = pairs[which]
        if which:
            body += zigzag(rng.randrange(-9, 9))
        start = rng.randrange(0, 2) if body else 0
        got = verdict(lambda: ours(body, start))  # noqa: B023
        want = verdict(lambda: reference(body, start))  # noqa: B023
        expect(got == want, f"reader plan {which}", body, got, want)
        done += 1
    return done


# -- the decoder and the gate ----------------------------------------------------------------


def _wide() -> tuple[list[Any], dict[int, Any]]:
    from bizevents.contracts.technical import AvroEncoder
    from tests.translators.wide import WIDE, changes

    encoder = AvroEncoder(WIDE, 1, 2)
    records = [encoder.encode(event) for event in changes(64)]
    return records, {1: encoder.schemas.key, 2: encoder.schemas.value}


def _outcome(decoder: Any, key: bytes | None, value: bytes, columns: Any) -> tuple[str, Any]:
    from bizevents.contracts.exceptions import DecodeError

    try:
        return ("value", repr(decoder.decode(key, value, None, None, columns)))
    except DecodeError as exc:
        return ("error", exc.reason)


def decoder_round(rng: random.Random, inputs: int) -> int:
    from bizevents.contracts.technical import AvroDecoder
    from tests.translators.wide import READ

    records, schemas = _wide()
    projections = [None, frozenset(READ), frozenset({"state", "legacy_07"})]
    ours = AvroDecoder(schemas.__getitem__)
    reference = AvroDecoder(schemas.__getitem__, reader="generated")
    done = 0
    while done < inputs:
        key, value = rng.choice(records)
        hostile = value[:5] + mutate(rng, value[5:])
        columns = rng.choice(projections)
        got = _outcome(ours, key, hostile, columns)
        want = _outcome(reference, key, hostile, columns)
        expect(got == want, f"decoder {columns}", hostile, got, want)
        done += 1
    return done


def gate_round(rng: random.Random, inputs: int) -> int:
    from bizevents.contracts.exceptions import DecodeError
    from bizevents.contracts.technical import AvroDecoder
    from tests.translators.wide import READ

    records, schemas = _wide()
    decoder = AvroDecoder(schemas.__getitem__)
    # the Python path, reading as the gate's decoder reads: projected (a skipped column's
    # bytes are stepped over unchecked by both readers; fastavro reads them all)
    reference = AvroDecoder(schemas.__getitem__, reader="generated")
    projection = frozenset(READ)
    decoder.decode(records[0][0], records[0][1], None, None, projection)
    table = (("schema", "crm"), ("table", "deals"))
    gated = [frozenset({"state"}), frozenset({"amount", "owner"}), frozenset({"changed_at"})]
    gates = [(c, decoder.gate(c, table, projection)) for c in gated]
    updates = [(k, v) for k, v in records if v is not None and b"\x02u" in v]
    done = unchanged = 0
    while done < inputs:
        key, value = rng.choice(updates)
        hostile = value[:5] + mutate(rng, value[5:]) if rng.random() < 0.9 else value
        columns, gate = rng.choice(gates)
        assert gate is not None
        if gate(key, hostile):
            unchanged += 1
            try:
                event = reference.decode(key, hostile, None, None, projection)
            except DecodeError as exc:
                raise Mismatch(f"the gate called unchanged a refused record: {exc}") from None
            same = (
                event.op == "u"
                and event.before is not None
                and event.after is not None
                and all(event.before[c] == event.after[c] for c in columns)
            )
            expect(same, f"gate {sorted(columns)}", hostile, True, same)
        done += 1
    assert unchanged > 0, "the gate never held: the round tested nothing"
    return done


# -- writer --------------------------------------------------------------------------------

ODD_VALUES: list[Any] = [
    0,
    1,
    -1,
    2**31 - 1,
    2**31,
    -(2**31),
    -(2**31) - 1,
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    10**30,
    True,
    False,
    None,
    0.0,
    -0.0,
    1.5,
    math.nan,
    math.inf,
    -math.inf,
    1e308,
    "",
    "text",
    "\ud800",
    "é" * 70,
    b"",
    b"raw",
    b"\x00" * 70,
    bytearray(b"x"),
    [],
    ["a", "b"],
    ["a", 1],
    ("a",),
    {},
    {"k": 1},
    {"k": 2**63},
    {1: 1},
    {"k": None},
    Decimal("1.5"),
    object(),
]


def writer_round(rng: random.Random, inputs: int) -> int:
    from bizevents.contracts.avro_codegen import compile_model_writer
    from bizevents.contracts.avro_codegen.native import compile_native_writer
    from tests.contracts.test_fast_serialize import Kinds

    parsed = fastavro.parse_schema(Kinds.contract_schema())
    generated, compiled = compile_model_writer(Kinds, parsed), compile_native_writer(Kinds, parsed)
    good = {"small": 1, "big": 2, "ratio": 0.5, "raw": b"r", "tags": {"a": 1}}
    good |= {"maybe": None, "names": ["n"], "flag": True}
    names = list(good)
    lineages = [b"\x02x" + b"\x00" * 7, b"", b"\xff" * 12]
    done = 0
    while done < inputs:
        values = dict(good)
        for name in rng.sample(names, rng.randint(1, 3)):
            values[name] = rng.choice(ODD_VALUES)
        event = Kinds.model_construct(**values)
        lineage = rng.choice(lineages)
        got = verdict(lambda: compiled(event, lineage))  # noqa: B023
        want = verdict(lambda: generated(event, lineage))  # noqa: B023
        expect(got == want, "writer", values, got, want)
        done += 1
    return done


def logical_round(rng: random.Random, inputs: int) -> int:
    """Decimals and timestamp-micros, which the compiled writer converts itself, against
    fastavro: odd digits, exponents, scales and precisions, zones, naive and odd values."""
    import datetime as dt

    from bizevents.contracts.avro_codegen.native import compile_native_plan

    plans = []
    for precision, scale in ((1, 0), (4, 4), (12, 2), (18, 0), (19, 6), (38, 9)):
        schema = {
            "type": "record",
            "name": "R",
            "fields": [
                {
                    "name": "d",
                    "type": {
                        "type": "bytes",
                        "logicalType": "decimal",
                        "precision": precision,
                        "scale": scale,
                    },
                },
                {"name": "t", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            ],
        }
        compiled = compile_native_plan(schema)
        assert compiled is not None
        plans.append((compiled, fastavro.parse_schema(schema)))
    odd: list[Any] = [Decimal("NaN"), Decimal("-Infinity"), Decimal("-0"), 1.5, None, "1.5"]
    done = 0
    while done < inputs:
        compiled, parsed = rng.choice(plans)
        digits = tuple(rng.randint(0, 9) for _ in range(rng.randint(1, 24)))
        amount: Any = Decimal((rng.randint(0, 1), digits, rng.randint(-30, 30)))
        if rng.random() < 0.05:
            amount = rng.choice(odd)
        zone = (
            None
            if rng.random() < 0.1
            else dt.timezone(dt.timedelta(minutes=rng.randint(-1439, 1439)))
        )
        at: Any = dt.datetime.fromtimestamp(rng.uniform(-6e10, 2.5e11), dt.UTC).replace(tzinfo=zone)
        if rng.random() < 0.05:
            at = rng.choice([*ODD_VALUES[:3], dt.date(2020, 1, 1), "2020-01-01"])

        def reference() -> bytes:
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, parsed, {"d": amount, "t": at})  # noqa: B023
            return buffer.getvalue()

        got = verdict(lambda: compiled((amount, at)))  # noqa: B023
        want = verdict(reference)
        expect(got == want, "logical", (amount, at), got, want)
        done += 1
    return done


# -- the replay's file records and event ids ------------------------------------------------


def file_record_round(rng: random.Random, inputs: int) -> int:
    from bizevents.replay.files import FileRecordEncoder
    from bizevents.translators.pipeline import OutRecord

    encoder = FileRecordEncoder()
    parts: list[Any] = [None, b"", b"k" * 70, "text", "\ud800", "é", 5, bytearray(b"b")]
    done = 0
    while done < inputs:
        headers: Any = [
            (rng.choice(["h", "é", "\ud800", 7]), rng.choice([None, b"v", b"w" * 100, "s"]))
            for _ in range(rng.randrange(4))
        ]
        if rng.random() < 0.1:
            headers = rng.choice([(), None, [("a",)], [["a", b"b"]], "x"])
        fields = [f.name for f in dataclasses.fields(OutRecord)]
        made = {name: rng.choice(parts) for name in fields}
        made.update(headers=headers)
        record = OutRecord(**made)
        topic = rng.choice(["t", "é", "\ud800", 3])
        got = verdict(lambda: encoder(topic, record))  # noqa: B023
        want = verdict(lambda: encoder.written(topic, record))  # noqa: B023
        expect(got == want, "file_record", (topic, record), got, want)
        done += 1
    return done


def event_id_round(rng: random.Random, inputs: int) -> int:
    from bizevents.translators import lineage

    namespace = lineage.EVENT_ID_NAMESPACE
    compiled = lineage._compiled
    assert compiled is not None
    done = 0
    while done < inputs:
        size = rng.choice([0, 1, 55, 56, 63, 64, 65, 119, 120, rng.randrange(300)])
        points = [0x41, 0xE9, 0x20AC, 0x1F600, rng.randrange(0xD7FF)]
        name = "".join(chr(rng.choice(points)) for _ in range(size))
        got = verdict(lambda: compiled.event_id(namespace.bytes, name))  # noqa: B023
        want = ("value", repr(str(uuid.uuid5(namespace, name))))
        expect(got == want, "event_id", name, got, want)
        done += 1
    return done


# -- PostgreSQL capture's tuples -----------------------------------------------------------


def _tuple_value(rng: random.Random) -> bytes:
    kind = rng.choice(b"ntub")
    if kind in b"nu":
        return bytes([kind])
    body = rng.choice([b"", b"x", "é✓".encode(), rng.randbytes(rng.randrange(20))])
    return bytes([kind]) + len(body).to_bytes(4, "big") + body


def pg_tuple_round(rng: random.Random, inputs: int) -> int:
    from bizevents.capture.exceptions import ProtocolError
    from bizevents.capture.postgres import pgoutput

    def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
        try:
            return ("value", repr(call()))
        except ProtocolError as exc:
            return ("error", str(exc))

    done = 0
    while done < inputs:
        values = [_tuple_value(rng) for _ in range(rng.randrange(8))]
        body = len(values).to_bytes(2, "big") + b"".join(values)
        data = b"I" + (mutate(rng, body) if rng.random() < 0.9 else body)
        pos = rng.choice([1, 1, 1, rng.randrange(len(data) + 3)])
        got = outcome(lambda: pgoutput._compiled_tuple_data("I", data, pos))  # noqa: B023
        want = outcome(lambda: pgoutput._python_tuple_data("I", data, pos))  # noqa: B023
        expect(got == want, "pg_tuple", (data, pos), got, want)
        done += 1
    return done


#: A table of every column kind the compiled record writes itself, and some it hands to
#: the Python writer: (name, type oid, typmod); keyed by ``id`` and ``flag``.
PG_COLUMNS = [
    ("id", 20, -1),
    ("small", 21, -1),
    ("flag", 16, -1),
    ("name", 25, -1),
    ("price", 1700, (12 << 16 | 2) + 4),
    ("at", 1184, -1),
    ("n", 23, -1),
]


def pg_codecs() -> dict[bool, Any]:
    """The table codec of :data:`PG_COLUMNS`, by whether its key fields are nullable."""
    from bizevents.capture.postgres.codec import TableCodec
    from bizevents.capture.postgres.messages import Column, Relation
    from bizevents.capture.postgres.types import PgTypeMapper

    columns = tuple(Column(0, n, o, m) for n, o, m in PG_COLUMNS)
    codecs = {}
    for nullable in (False, True):
        codecs[nullable] = TableCodec(
            server="srv",
            database="db",
            topic="srv.public.t",
            relation=Relation(16500, "public", "t", "d", columns),
            key_names=["id", "flag"],
            types=PgTypeMapper(),
            key_nullable=nullable,
        )
        codecs[nullable].set_schema_ids(7, 8)
    return codecs


def pg_record_round(rng: random.Random, inputs: int) -> int:
    from bizevents.capture.postgres import codec as codec_module
    from bizevents.contracts.logical import UNAVAILABLE

    # The reference compiled once per codec: compiling it per input took ~8 ms of each.
    codecs = [
        (
            (codec._write_row, codec_module._python_record(codec._value_slots)),
            (codec._write_key, codec_module._python_record(codec._key_slots)),
        )
        for codec in pg_codecs().values()
    ]
    texts = ["0", "-1", "9" * 18, "9" * 19, "-" + "9" * 40, "t", "f", "true", "", " 1", "é✓"]
    texts += ["1.50", "NaN", "-.05", "1.5", "1.2.3", "9" * 17 + ".99", "x" * 300, "infinity"]
    texts += [f"2024-05-01 10:34:56{f}+00" for f in ("", ".", ".1", ".123456", ".1234567")]
    others: list[Any] = [None, UNAVAILABLE, b"b"]
    done = 0
    while done < inputs:
        writers = rng.choice(codecs)
        values = tuple(
            rng.choice(texts) if rng.random() < 0.85 else rng.choice(others)
            for _ in range(rng.choice([7, 7, 7, 6, 8]))
        )
        for write, reference in writers:
            got = verdict(lambda: write(values))  # noqa: B023
            want = verdict(lambda: reference(values))  # noqa: B023
            expect(got == want, "pg_record", values, got, want)
        done += 1
    return done


# -- routing's partition ------------------------------------------------------------------


def routing_round(rng: random.Random, inputs: int) -> int:
    from bizevents.contracts.technical import routing

    compiled = routing._routing
    assert compiled is not None
    done = 0
    while done < inputs:
        values = [rng.randrange(-(2**63), 2**63) for _ in range(rng.randrange(1, 4))]
        key = mutate(rng, b"\0\0\0\0\1" + b"".join(zigzag(v) for v in values))
        offset = rng.choice([0, 5, 5, 5, rng.randrange(40)])
        skip = rng.choice([0, 0, 1, 2, rng.randrange(12)])
        partitions = rng.choice([1, 3, 12, 2**31 - 1, rng.randrange(-2, 2**32)])
        got = verdict(lambda: compiled.long_partition(key, offset, skip, partitions))  # noqa: B023
        want = verdict(
            lambda: routing.python_long_partition(key, offset, skip, partitions)  # noqa: B023
        )
        expect(got == want, "long_partition", (key, offset, skip, partitions), got, want)
        got = verdict(lambda: compiled.murmur2(key))  # noqa: B023
        want = verdict(lambda: routing.python_murmur2(key))  # noqa: B023
        expect(got == want, "murmur2", key, got, want)
        done += 1
    return done


ROUNDS: dict[str, Callable[[random.Random, int], int]] = {
    "reader": reader_round,
    "decoder": decoder_round,
    "gate": gate_round,
    "writer": writer_round,
    "logical": logical_round,
    "file_record": file_record_round,
    "event_id": event_id_round,
    "pg_tuple": pg_tuple_round,
    "pg_record": pg_record_round,
    "routing": routing_round,
}


def run(inputs: int, seed: int, only: list[str] | None = None) -> Iterator[tuple[str, int, float]]:
    for name, round_ in ROUNDS.items():
        if only and name not in only:
            continue
        started = time.monotonic()
        done = round_(random.Random(f"{seed}-{name}"), inputs)
        yield name, done, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="per entry point")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--extension-dir", type=Path, help="sanitized builds to load")
    parser.add_argument("--only", action="append", choices=sorted(ROUNDS))
    args = parser.parse_args()
    if args.extension_dir is not None:
        for path in load_extensions(args.extension_dir):
            print(f"loaded {path}", flush=True)
    from bizevents.contracts.avro_codegen.native import EXTENSION

    if EXTENSION is None:
        print("hostile: the extension is not built (scripts/setup builds it)", file=sys.stderr)
        sys.exit(1)
    print(f"extension: {EXTENSION.__file__}", flush=True)
    try:
        for name, done, seconds in run(args.inputs, args.seed, args.only):
            print(f"{name}: {done} inputs, same verdicts, {seconds:.0f} s", flush=True)
    except Mismatch as exc:
        print(f"hostile: the compiled and the Python paths differ, {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
