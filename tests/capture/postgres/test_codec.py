"""The compiled capture writer equals contracts' AvroEncoder byte for byte."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest

from bizevents.capture.exceptions import ValueConversionError
from bizevents.capture.postgres.codec import TableCodec
from bizevents.capture.postgres.messages import UNCHANGED_TOAST, Column, Relation, TupleData
from bizevents.capture.postgres.types import PgTypeMapper
from bizevents.contracts.binary import blob, text
from bizevents.contracts.envelope import ChangeEvent, PgPosition, Source, Tombstone
from bizevents.contracts.logical import UNAVAILABLE
from bizevents.contracts.technical import AvroDecoder

MOOD_OID, MOOD_ARRAY_OID = 90001, 90002

# (name, type oid, typmod, text values to try)
COLUMNS: list[tuple[str, int, int, list[str | None]]] = [
    ("id", 20, -1, ["1", "-9223372036854775808", "9223372036854775807"]),
    ("small", 21, -1, ["-32768", "0", None]),
    ("i", 23, -1, ["2147483647", "-1", None]),
    ("f4", 700, -1, ["1.5", "-Infinity", "NaN"]),
    ("f8", 701, -1, ["0.1", "1e300", "-0"]),
    ("num", 1700, (12 << 16 | 3) + 4, ["123456789.125", "-0.5", "-128", "0"]),
    ("free", 1700, -1, ["3.14159265358979323846264338327950288419716939937510", "-1E+5", "-128"]),
    ("cash", 790, -1, ["-$1,234.56", "$0.00", "$128.00"]),
    ("flag", 16, -1, ["t", "f", None]),
    ("t", 25, -1, ['grüße, "world" \\ ✓', "", "x" * 20_000]),
    ("vc", 1043, -1, ["varchar", None, "a"]),
    ("b", 17, -1, ["\\x00ff1062696e617279", "\\x", None]),
    ("d", 1082, -1, ["2024-02-29", "1970-01-01", "infinity"]),
    ("tm", 1083, -1, ["13:14:15.123456", "00:00:00", "24:00:00"]),
    ("ttz", 1266, -1, ["13:14:15.5+05:30", "00:00:00-07", None]),
    ("ts", 1114, -1, ["2024-05-01 12:34:56.789012", "1900-01-01 00:00:00", None]),
    (
        "tstz",
        1184,
        -1,
        ["2024-05-01 10:34:56.123456+00", "1889-12-31 23:40:28+00", "2024-05-01 10:34:56.5+00"],
    ),
    ("tstz2", 1184, -1, ["infinity", "0099-01-01 00:00:00+00", None]),
    ("num0", 1700, (10 << 16 | 0) + 4, ["-12", "0", "99999"]),
    ("nan", 1700, (10 << 16 | 2) + 4, ["1.50", "-0.01", "12"]),
    ("iv", 1186, -1, ["3 days 04:05:06.5", "-1 days +02:00:00", "1 year 2 mons"]),
    (
        "u",
        2950,
        -1,
        ["0000000000000000ab54a98ceb1f0ad2", None, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"],
    ),
    ("j", 114, -1, ['{"a": [1, 2.50, "x"],  "b": null}', "[]", None]),
    ("jb", 3802, -1, ['{"a": 1, "b": {"c": true}}', "null", None]),
    ("mood", MOOD_OID, -1, ["happy", "sad", None]),
    ("tags", 1009, -1, ['{plain,"with space","q\\"uote",NULL,"NULL",""}', "{}", None]),
    ("nums", 1007, -1, ["{1,NULL,-3}", "{}", None]),
    ("moods", MOOD_ARRAY_OID, -1, ["{sad,happy}", "{}", None]),
    ("addr", 869, -1, ["192.168.0.1/24", None, "::1"]),
    ("o", 26, -1, ["4294967295", "0", None]),
]

TYPES = PgTypeMapper(
    enum_labels={MOOD_OID: ("sad", "ok", "happy")}, array_elements={MOOD_ARRAY_OID: MOOD_OID}
)


def relation() -> Relation:
    cols = tuple(
        Column(1 if name == "id" else 0, name, oid, typmod) for name, oid, typmod, _ in COLUMNS
    )
    return Relation(16400, "public", "everything", "d", cols)


def codec() -> TableCodec:
    c = TableCodec(
        server="srv",
        database="db",
        topic="srv.public.everything",
        relation=relation(),
        key_names=["id"],
        types=TYPES,
    )
    c.set_schema_ids(7, 8)
    return c


def rows() -> list[TupleData]:
    return [tuple(vals[k] for _, _, _, vals in COLUMNS) for k in range(3)]


def source(snapshot: str = "false") -> Source:
    return Source(
        "postgresql",
        "srv",
        "db",
        "public",
        "everything",
        1_714_567_890_123,
        snapshot,
        PgPosition(0x16B374D848, 777),
        "bizevents-capture-1",
        extra={"ts_us": 1_714_567_890_123_456},
    )


@pytest.mark.parametrize("k", range(3), ids=["first", "second", "third"])
@pytest.mark.parametrize("op", ["c", "u", "d", "r"])
def test_envelope_bytes_equal_avro_encoder(op: str, k: int) -> None:
    """Every op and every mapped type: the same bytes as contracts' AvroEncoder."""
    c = codec()
    values = rows()[k]
    converted = c._row_converter(values)
    snapshot = "true" if op == "r" else "false"
    before = converted if op in ("u", "d") else None
    after = None if op == "d" else converted
    event = ChangeEvent(
        op=op,  # type: ignore[arg-type]
        source=source(snapshot),
        before=before,
        after=after,
        key={"id": converted["id"]},
        ts_ms=1_714_567_899_000,
    )
    want_key, want_value = c.reference_encoder.encode(event)
    src = c.source(1_714_567_890_123, 1_714_567_890_123_456, snapshot, 777).with_long(0x16B374D848)
    row = c.row(values)
    got = c.envelope(
        op,
        row if before is not None else None,
        row if after is not None else None,
        src,
        1_714_567_899_000,
    )
    assert c.key(values) == want_key
    assert got == want_value


def test_tombstone_key_and_decoding_back() -> None:
    """What the writer produced decodes with contracts' AvroDecoder to the converted row."""
    c = codec()
    schemas = {7: c.schemas.key, 8: c.schemas.value}
    decoder = AvroDecoder(schemas.__getitem__)
    values = rows()[0]
    src = c.source(1, None, "last", None).with_long(5)
    value = c.envelope("r", None, c.row(values), src, 2)
    event = decoder.decode(c.key(values), value)
    assert isinstance(event, ChangeEvent)
    assert event.op == "r" and event.source.snapshot_raw == "last"
    assert event.source.position == PgPosition(5, None, None)
    assert event.after is not None and event.after["t"] == values[COLUMNS.index(COLUMNS[9])]
    tomb = decoder.decode(c.key(values), None)
    assert isinstance(tomb, Tombstone) and tomb.key == {"id": 1}


def test_unchanged_toast_is_the_unavailable_marker() -> None:
    """An unchanged TOASTed text value is written as Debezium's placeholder, not null."""
    c = codec()
    values: list[Any] = list(rows()[0])
    values[9] = UNCHANGED_TOAST
    converted = c._row_converter(tuple(values))
    event = ChangeEvent("u", source(), None, converted, {"id": 1}, 3)
    _, want = c.reference_encoder.encode(event)
    src = c.source(1_714_567_890_123, 1_714_567_890_123_456, "false", 777).with_long(0x16B374D848)
    assert c.envelope("u", None, c.row(tuple(values)), src, 3) == want


def test_bad_value_names_table_and_column() -> None:
    """A value that does not convert raises ValueConversionError naming the column."""
    c = codec()
    values = list(rows()[0])
    values[2] = "not a number"
    with pytest.raises(ValueConversionError, match=r"public\.everything\.i"):
        c.row(tuple(values))


# Types PostgreSQL can store out of line (variable length), with a type modifier.
TOASTABLE: list[tuple[int, int]] = [
    (25, -1),  # text
    (17, -1),  # bytea
    (3802, -1),  # jsonb
    (114, -1),  # json
    (142, -1),  # xml
    (1700, -1),  # numeric
    (1700, (1000 << 16 | 2) + 4),  # numeric(1000, 2)
    (1007, -1),  # int[]
    (1016, -1),  # bigint[]
    (1005, -1),  # smallint[]
    (MOOD_ARRAY_OID, -1),
    (1231, (10 << 16 | 2) + 4),  # numeric(10, 2)[]
    (1231, -1),  # numeric[]
    (1009, -1),  # text[]
    (1001, -1),  # bytea[]
    (2951, -1),  # uuid[]
    (1185, -1),  # timestamptz[]
    (1115, -1),  # timestamp[]
    (1182, -1),  # date[]
    (1183, -1),  # time[]
    (1270, -1),  # timetz[]
    (1187, -1),  # interval[]
    (1000, -1),  # boolean[]
    (1021, -1),  # real[]
    (1022, -1),  # float8[]
    (791, -1),  # money[]
    (3807, -1),  # jsonb[]
    (1041, -1),  # inet[]
]


@pytest.mark.parametrize(("oid", "typmod"), TOASTABLE)
def test_unchanged_toast_of_every_toastable_type_decodes_to_unavailable(
    oid: int, typmod: int
) -> None:
    """Each type's placeholder, as capture writes it, decodes back to UNAVAILABLE."""
    cols = (Column(1, "id", 20, -1), Column(0, "c", oid, typmod))
    c = TableCodec(
        server="srv",
        database="db",
        topic="srv.public.toasty",
        relation=Relation(16401, "public", "toasty", "d", cols),
        key_names=["id"],
        types=TYPES,
    )
    c.set_schema_ids(7, 8)
    decoder = AvroDecoder(
        lambda i: json.dumps(c.schemas.key if i == 7 else c.schemas.value)  # type: ignore[arg-type]
    )
    src = c.source(1, 1, "false", 1).with_long(1)
    values = ("1", UNCHANGED_TOAST)
    event = decoder.decode(c.key(values), c.envelope("u", None, c.row(values), src, 3))
    assert isinstance(event, ChangeEvent) and event.after is not None
    assert event.after["c"] is UNAVAILABLE


@pytest.mark.parametrize("n", [0, 63, 64, 127, 128, 8191, 8192, 9000, 16383, 16384, 70_000])
def test_string_and_bytes_lengths_match_fastavro(n: int) -> None:
    """Lengths of 8,192 bytes and more take three varint bytes (they once took two)."""
    for schema, value in (("string", "x" * n), ("bytes", b"x" * n)):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
        ours = text(value) if isinstance(value, str) else blob(value)
        assert ours == out.getvalue(), n
