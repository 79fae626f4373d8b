"""The compiled reader's helpers give what the Python they replace gives: the makers of
slotted dataclasses (``constructor``) and the conversions it does itself
(``native_conversion``), each against the class or converter it stands for."""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import fastavro
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bizevents.contracts.avro_codegen import compile_reader
from bizevents.contracts.avro_codegen.native import AVAILABLE, compile_native_reader, constructor
from bizevents.contracts.envelope import ChangeEvent, MySqlPosition, PgPosition, Source
from bizevents.contracts.exceptions import Coordinates
from bizevents.contracts.logical import UNAVAILABLE, UNAVAILABLE_MARKER, ColumnType, Kind
from bizevents.contracts.logical.decode import decoder_for, native_conversion
from bizevents.translators.pipeline import OutRecord, SourceRecord


def test_the_extension_is_built() -> None:
    """The suite runs on the compiled extension: unbuilt, it fails here (never skips)."""
    assert AVAILABLE, (
        "the compiled extension is not built: run python -m bizevents.contracts.avro_codegen.build"
    )


TEXT = st.text(max_size=12)
OPTIONAL_INT = st.none() | st.integers(min_value=-(2**63), max_value=2**64)


def _same(made: Any, built: Any) -> None:
    assert made == built
    assert type(made) is type(built)
    assert repr(made) == repr(built)
    try:
        expected = hash(built)
    except TypeError:  # a field holds a dict
        with pytest.raises(TypeError):
            hash(made)
    else:
        assert hash(made) == expected


@settings(max_examples=200, deadline=None)
@given(lsn=OPTIONAL_INT, tx=OPTIONAL_INT, xmin=OPTIONAL_INT, file=TEXT, pos=st.integers())
def test_makers_make_what_the_classes_make(
    lsn: int | None, tx: int | None, xmin: int | None, file: str, pos: int
) -> None:
    """Every field's value lands in its own slot: equal, hashed and shown alike."""
    _same(constructor(PgPosition)(lsn, tx, xmin), PgPosition(lsn, tx, xmin))
    values = (file, pos, 3, 7, None, 9)
    _same(constructor(MySqlPosition)(*values), MySqlPosition(*values))
    source = (
        "postgresql", "shop", "db", "public", "t", 5, "false", PgPosition(lsn), None, None, {}
    )  # fmt: skip
    _same(constructor(Source)(*source), Source(*source))
    event = ("u", Source(*source), {"a": 1}, {"a": 2}, {"id": 1}, 7, None, Coordinates(), ())
    _same(constructor(ChangeEvent)(*event), ChangeEvent(*event))
    record = ("t", 0, pos, None, file.encode(), [("h", None)])  # the replay's records
    _same(constructor(SourceRecord)(*record), SourceRecord(*record))
    _same(constructor(Coordinates)(file, lsn, pos), Coordinates(file, lsn, pos))
    out = ("t", b"k", file.encode(), [("h", b"v")], "orders@2", file)  # the core's outputs
    _same(constructor(OutRecord)(*out), OutRecord(*out))


def test_a_made_object_stays_frozen_and_counts_its_references() -> None:
    made = constructor(PgPosition)(1, 2, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.lsn = 4  # type: ignore[misc]
    value = object()
    import sys

    before = sys.getrefcount(value)
    kept = [constructor(PgPosition)(value, None, None) for _ in range(10)]
    assert sys.getrefcount(value) == before + 10
    del kept
    assert sys.getrefcount(value) == before


def test_a_maker_takes_every_field_positionally() -> None:
    with pytest.raises(TypeError, match="takes 3 positional values"):
        constructor(PgPosition)(1)
    with pytest.raises(TypeError):
        constructor(PgPosition)(1, 2, xmin=3)


@dataclasses.dataclass(frozen=True, slots=True)
class _Checked:
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("negative")


@dataclasses.dataclass(frozen=True)
class _Unslotted:
    value: int


@dataclasses.dataclass(frozen=True, slots=True)
class _Computed:
    value: int
    twice: int = dataclasses.field(init=False, default=0)


@pytest.mark.parametrize("cls", [_Checked, _Unslotted, _Computed, dict])
def test_classes_whose_init_does_more_keep_their_init(cls: type) -> None:
    """A __post_init__, no slots, a field outside __init__, not a dataclass: the class."""
    assert constructor(cls) is cls


# -- conversions ---------------------------------------------------------------------------

_ZONES = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), None])
_MOMENTS = st.builds(
    lambda moment, zone: moment.replace(tzinfo=zone).isoformat(),
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    _ZONES,
)
_STRINGS = st.sampled_from([UNAVAILABLE_MARKER, "", "paid", "2024-13-01T00:00:00Z"]) | TEXT


def _outcome(read: Callable[[bytes, int], Any], body: bytes) -> object:
    try:
        return read(body, 0)
    except Exception as exc:  # what the decoders then hand to fastavro
        return type(exc)


@pytest.mark.parametrize(
    "ct",
    [
        ColumnType(Kind.STRING),
        ColumnType(Kind.ENUM, labels=("new", "paid")),
        ColumnType(Kind.ZONED_TIMESTAMP),
        ColumnType(Kind.ZONED_TIME),
        ColumnType(Kind.UUID),
        ColumnType(Kind.JSON),
    ],
    ids=lambda ct: ct.kind.name,
)
@settings(max_examples=150, deadline=None)
@given(value=_MOMENTS | _STRINGS)
def test_string_conversions_done_in_c_equal_the_converters(ct: ColumnType, value: str) -> None:
    """The compiled reader, converting by itself, reads what the generated reader reads
    calling the converter: the same value, UNAVAILABLE for the marker, a failure where
    the converter fails (a zoned timestamp without a zone, a label not of the enum)."""
    convert = decoder_for(ct, "avro", ranges=False)
    assert convert is not None and native_conversion(convert) is not None
    schema = fastavro.parse_schema(
        {"type": "record", "name": "r", "fields": [{"name": "v", "type": "string"}]}
    )
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, {"v": value})
    body = buffer.getvalue()
    compiled = _outcome(compile_native_reader(schema, convert={"v": convert}), body)
    generated = _outcome(compile_reader(schema, convert={"v": convert}), body)
    if isinstance(generated, type):
        assert isinstance(compiled, type), (value, compiled)
    else:
        assert compiled == generated
        if value == UNAVAILABLE_MARKER:
            assert compiled[0]["v"] is UNAVAILABLE


@settings(max_examples=150, deadline=None)
@given(raw=st.binary(max_size=12) | st.just(b"__debezium_unavailable_value"))
def test_bytes_and_decimal_conversions_done_in_c_equal_the_converters(raw: bytes) -> None:
    schema = fastavro.parse_schema(
        {"type": "record", "name": "r", "fields": [{"name": "v", "type": "bytes"}]}
    )
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, {"v": raw})
    body = buffer.getvalue()
    for ct in (ColumnType(Kind.BYTES), ColumnType(Kind.DECIMAL, scale=2, precision=12)):
        convert = decoder_for(ct, "avro", ranges=False)
        assert convert is not None and native_conversion(convert) is not None
        compiled = _outcome(compile_native_reader(schema, convert={"v": convert}), body)
        generated = _outcome(compile_reader(schema, convert={"v": convert}), body)
        assert compiled == generated


_DECIMAL_SHAPES = st.sampled_from(["bytes", "fixed"])


@settings(max_examples=400, deadline=None)
@given(
    raw=st.binary(max_size=12),
    precision=st.integers(min_value=1, max_value=40),
    scale=st.integers(min_value=0, max_value=40),
    shape=_DECIMAL_SHAPES,
)
def test_decimals_read_in_c_equal_the_python_reader_and_fastavro(
    raw: bytes, precision: int, scale: int, shape: str
) -> None:
    """Any unscaled bytes, short or long, with more digits than the precision or not:
    the compiled reader's Decimal has the same digits, exponent and sign as the
    generated reader's and fastavro's (which round to the precision alike)."""
    scale %= precision + 1  # Avro wants 0 <= scale <= precision
    if shape == "fixed":  # and a fixed wide enough for the precision
        assume(raw and precision <= math.floor(math.log10(2) * (8 * len(raw) - 1)))
    logical: dict[str, Any] = {"logicalType": "decimal", "precision": precision, "scale": scale}
    if shape == "fixed":
        value_type: dict[str, Any] = {"type": "fixed", "name": "d", "size": len(raw), **logical}
    else:
        value_type = {"type": "bytes", **logical}
    schema = fastavro.parse_schema(
        {"type": "record", "name": "r", "fields": [{"name": "v", "type": value_type}]}
    )
    raw_schema = fastavro.parse_schema(
        {
            "type": "record",
            "name": "r",
            "fields": [
                {"name": "v", "type": {k: v for k, v in value_type.items() if k != "logicalType"}}
            ],
        }
    )
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, raw_schema, {"v": raw})
    body = buffer.getvalue()
    compiled = _outcome(compile_native_reader(schema), body)
    generated = _outcome(compile_reader(schema), body)
    reference = fastavro.schemaless_reader(io.BytesIO(body), schema)
    assert not isinstance(compiled, type), compiled
    assert compiled[1] == len(body)
    for other in (generated[0]["v"], reference["v"]):
        assert compiled[0]["v"].as_tuple() == other.as_tuple()
        assert type(compiled[0]["v"]) is type(other)


def test_the_decimal_plan_reads_in_c() -> None:
    """The usual decimal column is read by the extension's decimal node, not the
    Python reader (which stays for what it cannot do)."""
    from bizevents.contracts.avro_codegen.native import read_plan

    schema = fastavro.parse_schema(
        {
            "type": "record",
            "name": "r",
            "fields": [
                {
                    "name": "v",
                    "type": {
                        "type": "bytes",
                        "logicalType": "decimal",
                        "precision": 12,
                        "scale": 2,
                    },
                }
            ],
        }
    )
    (field,) = read_plan(schema)[1]
    assert field[1][0] == "decimal"
