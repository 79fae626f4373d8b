"""From pgoutput text tuples straight to Confluent-framed Avro: the capture hot path.

The schemas are :func:`bizevents.contracts.technical.envelope_avro_schema`'s (through
:class:`~bizevents.contracts.technical.AvroEncoder`), so a technical topic written here reads
like one a Debezium connector wrote. The bytes, though, are written by a writer
compiled per table: going through ``ChangeEvent`` → dict → fastavro costs about
60 µs per event on this machine (fastavro resolves every union by validating the
datum against each branch), which alone would cap capture below its 25,000
changes/s target. The compiled writer turns each column's text straight into its
Avro bytes (a few hundred nanoseconds per column) and writes the ``source`` block
from bytes prepared once per transaction. ``tests/capture/postgres/test_codec.py``
holds it byte for byte to ``AvroEncoder`` for every mapped type.

Column types the compiled writer has no shortcut for (arrays) are written by
fastavro from the contracts layer's wire value, one column at a time.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import fastavro
from fastavro import _write as fastavro_write

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.codec import SOURCE_VERSION, RegisteredCodec, encoded_ts
from bizevents.capture.exceptions import CaptureError, ValueConversionError
from bizevents.capture.postgres.messages import Column, Relation, TupleData
from bizevents.capture.postgres.parsers import parse_bytea
from bizevents.capture.postgres.types import PgTypeMapper, RowConverter
from bizevents.contracts.binary import (
    NULL_BRANCH,
    VALUE_BRANCH,
    fastavro_signed_bytes,
    signed_bytes,
    unscaled,
    zigzag,
)
from bizevents.contracts.binary import blob as _blob
from bizevents.contracts.binary import text as _text
from bizevents.contracts.logical import UNAVAILABLE, ColumnType, Field, Kind, encoder_for
from bizevents.contracts.technical import AvroEncoder, EnvelopeSchemas, TableSchema
from bizevents.contracts.technical.source import AvroSourceWriter, EncodedSource
from bizevents.contracts.technical.topics import table_topic

try:  # capture/postgres/_tuples.c, built with the others by scripts/setup
    from bizevents.capture.postgres import _tuples  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - without a C compiler
    _tuples = None

__all__ = [
    "SOURCE_VERSION",
    "TableCodec",
    "encoded_ts",
]

_F32: Final = struct.Struct("<f")
_F64: Final = struct.Struct("<d")
_NULL: Final = NULL_BRANCH
_SOME: Final = VALUE_BRANCH  # union branch 1 (after "null")
#: fastavro's writer of one datum into a bytearray (its Cython module exports no stub).
_write_data: Final[Callable[..., None]] = fastavro_write.write_data  # type: ignore[attr-defined]
_WRITE_OPTIONS: Final = {
    "strict": False,
    "strict_allow_default": False,
    "disable_tuple_notation": True,
}


Writer = Callable[[str], bytes]

#: pgtypes' parser of ``numeric`` (the one whose text carries exactly the scale's digits).
_numeric_parser: Final = PgTypeMapper()._direct(1700, -1, "", "")


def _fallback(ct: ColumnType, parse: Callable[[str], Any] | None) -> Writer:
    wire = encoder_for(ct, "avro")
    named: dict[str, Any] = {}
    schema = fastavro.parse_schema(ct.avro_schema(), named)

    def write(text: str) -> bytes:
        out = bytearray()
        _write_data(
            out, wire(text if parse is None else parse(text)), schema, named, "", _WRITE_OPTIONS
        )
        return bytes(out)

    return write


def _integer(text: str) -> bytes:
    return zigzag(int(text))


def _boolean(text: str) -> bytes:
    if text == "t":
        return b"\x01"
    if text == "f":
        return b"\x00"
    raise ValueError("a boolean is 't' or 'f'")


#: The writers the compiled record writes itself (capture/postgres/_tuples.c's ``how``).
_HOW: Final[dict[Writer, int]] = {_text: 1, _integer: 2, _boolean: 3}


def _how(ct: ColumnType, parse: Callable[[str], Any] | None, write: Writer) -> tuple[int, int]:
    """How capture/postgres/_tuples.c writes what ``write`` (:func:`_writer`'s) writes:
    itself (a kind and a numeric's scale) or, ``0``, by calling ``write``."""
    if write in _HOW:
        return _HOW[write], 0
    if ct.kind is Kind.DECIMAL and parse is _numeric_parser:
        return 4, ct.scale or 0
    if ct.kind is Kind.ZONED_TIMESTAMP and parse is not None:
        return 5, 0
    return 0, 0


def _writer(ct: ColumnType, parse: Callable[[str], Any] | None) -> Writer:
    """text → Avro bytes of a non-null value of this column type."""
    kind = ct.kind
    if kind is Kind.ENUM and parse is None and ct.labels:
        labels = frozenset(ct.labels)

        def enum(text: str) -> bytes:
            # A label added since the schema was made (ALTER TYPE ... ADD VALUE; no
            # Relation message says so) must not be written under the old schema.
            if text not in labels:
                raise ValueError(f"{text!r} is not one of the enum's labels")
            return _text(text)

        return enum
    if kind in (Kind.STRING, Kind.ENUM) and parse is None:
        return _text
    if kind in (Kind.INT16, Kind.INT32, Kind.INT64, Kind.INT8) and parse is int:
        return _integer
    if kind is Kind.BOOLEAN:
        return _boolean
    if kind is Kind.FLOAT64:
        pack64 = _F64.pack
        return lambda text: pack64(float(text))
    if kind is Kind.FLOAT32:
        pack32 = _F32.pack
        return lambda text: pack32(float(text))
    if kind is Kind.BYTES and parse is parse_bytea:
        return lambda text: _blob(parse_bytea(text))
    if kind is Kind.DECIMAL and parse is not None:
        scale = ct.scale or 0
        to_decimal = parse
        exact = parse is _numeric_parser

        def decimal(text: str) -> bytes:
            if exact:
                # numeric(p, s) prints exactly s fraction digits: the digits are the
                # unscaled value. Anything else (NaN, money) takes the Decimal path.
                dot = text.find(".")
                if (dot < 0 and scale == 0) or (dot >= 0 and len(text) - dot - 1 == scale):
                    try:
                        n = int(text if dot < 0 else text[:dot] + text[dot + 1 :])
                    except ValueError:
                        pass
                    else:
                        return _blob(fastavro_signed_bytes(n))
            return _blob(fastavro_signed_bytes(unscaled(to_decimal(text), scale)[0]))

        return decimal
    if kind is Kind.VARIABLE_DECIMAL and parse is not None:
        to_decimal = parse

        def variable(text: str) -> bytes:
            n, scale = unscaled(to_decimal(text))
            return zigzag(scale) + _blob(signed_bytes(n))

        return variable
    if kind is Kind.ZONED_TIMESTAMP and parse is not None:
        slow = encoder_for(ct, "avro")
        convert = parse

        def zoned_timestamp(text: str) -> bytes:
            # The session runs in UTC: 'YYYY-MM-DD HH:MM:SS[.ffffff]+00' → ISO with Z.
            n = len(text)
            if n >= 22 and text[-3:] == "+00" and text[10] == " " and text[4] == "-":
                if n == 22:
                    return _text(text[:10] + "T" + text[11:19] + "Z")
                if text[19] == "." and n <= 29:
                    fraction = text[20:-3]
                    return _text(
                        text[:10]
                        + "T"
                        + text[11:19]
                        + "."
                        + fraction
                        + "0" * (6 - len(fraction))
                        + "Z"
                    )
            return _text(slow(convert(text)))

        return zoned_timestamp
    if kind in (
        Kind.DATE,
        Kind.TIME_MICROS,
        Kind.TIMESTAMP_MICROS,
        Kind.INTERVAL_MICROS,
        Kind.UUID,
        Kind.JSON,
        Kind.ZONED_TIME,
        Kind.ZONED_TIMESTAMP,
        Kind.STRING,
        Kind.ENUM,
    ):
        wire = encoder_for(ct, "avro")
        if parse is None:
            if kind in (Kind.DATE, Kind.TIME_MICROS, Kind.TIMESTAMP_MICROS, Kind.INTERVAL_MICROS):
                return lambda text: zigzag(wire(text))
            return lambda text: _text(wire(text))
        convert = parse
        if kind in (Kind.DATE, Kind.TIME_MICROS, Kind.TIMESTAMP_MICROS, Kind.INTERVAL_MICROS):
            return lambda text: zigzag(wire(convert(text)))
        return lambda text: _text(wire(convert(text)))
    return _fallback(ct, parse)


def _unavailable(ct: ColumnType) -> bytes | None:
    """The bytes of UNAVAILABLE in this column type, or None where it cannot be written."""
    try:
        wire = encoder_for(ct, "avro")(UNAVAILABLE)
    except (TypeError, ValueError):
        return None
    named: dict[str, Any] = {}
    out = bytearray()
    _write_data(
        out, wire, fastavro.parse_schema(ct.avro_schema(), named), named, "", _WRITE_OPTIONS
    )
    return bytes(out)


@dataclass(frozen=True, slots=True)
class _Slot:
    index: int  # position in the relation's TupleData
    name: str
    write: Writer
    optional: bool
    unavailable: bytes | None
    how: tuple[int, int] = (0, 0)  # the C's way to write it (:func:`_how`)


def _compile_record(slots: Sequence[_Slot]) -> Callable[[TupleData], bytes]:
    """A function writing the record of ``slots``: the C one where it is built, else
    :func:`_python_record`'s."""
    if _tuples is None:
        return _python_record(slots)
    plan = tuple((s.index, s.how[0], s.optional, s.write, s.how[1]) for s in slots)
    function: Callable[[TupleData], bytes] = partial(_tuples.record, plan, partial(_record, slots))
    return function


def _python_record(slots: Sequence[_Slot]) -> Callable[[TupleData], bytes]:
    """A function writing the record of ``slots``, generated per table (no per-column loop)."""
    env: dict[str, Any] = {"_str": str, "_NULL": _NULL, "_SOME": _SOME, "_slow": _record}
    lines = ["def record(values):", "    parts = []", "    append = parts.append"]
    for n, slot in enumerate(slots):
        env[f"w{n}"] = slot.write
        lines += [
            f"    v = values[{slot.index}]",
            "    if v.__class__ is _str:",
            f"        append({'_SOME + ' if slot.optional else ''}w{n}(v))",
        ]
        if slot.optional:
            lines += ["    elif v is None:", "        append(_NULL)"]
        lines += ["    else:", "        return _slow(_slots, values)"]
    lines.append("    return b''.join(parts)")
    env["_slots"] = tuple(slots)
    exec(compile("\n".join(lines), f"<capture record of {len(slots)} columns>", "exec"), env)
    function: Callable[[TupleData], bytes] = env["record"]
    return function


def _record(slots: Sequence[_Slot], values: TupleData) -> bytes:
    parts: list[bytes] = []
    append = parts.append
    for slot in slots:
        v = values[slot.index]
        if v.__class__ is str:
            if slot.optional:
                append(_SOME)
            append(slot.write(v))  # type: ignore[arg-type, unused-ignore]
        elif v is None:
            if not slot.optional:
                raise ValueError(f"column {slot.name!r} is not nullable")
            append(_NULL)
        elif v is UNAVAILABLE:
            if slot.unavailable is None:
                raise ValueError(f"column {slot.name!r} cannot carry an unchanged TOASTed value")
            if slot.optional:
                append(_SOME)
            append(slot.unavailable)
        else:
            raise ValueError(f"column {slot.name!r}: the binary format is not supported")
    return b"".join(parts)


class TableCodec(RegisteredCodec):
    """One table's shape as captured: schemas, key columns and the compiled writers.

    ``relation`` is the table as pgoutput (or the snapshot's catalog query) describes
    it; ``key_names`` the columns of the Kafka key; ``keep`` says which columns are
    captured. ``key_nullable`` makes the key's fields optional (a table keyed by its
    whole row under ``REPLICA IDENTITY FULL``).
    """

    def __init__(
        self,
        *,
        server: str,
        database: str,
        topic: str,
        relation: Relation,
        key_names: Sequence[str],
        types: PgTypeMapper,
        keep: Callable[[str], bool] = lambda _name: True,
        key_nullable: bool = False,
    ) -> None:
        table = relation.qualified_name
        self.relation = relation
        #: ``schema.table``: the data collection of transaction metadata.
        self.table = table
        self.topic = topic
        self.server = server
        self.database = database
        missing = [k for k in key_names if k not in {c.name for c in relation.columns}]
        if missing:
            raise CaptureError(f"key columns {missing} of {table} are not in the table")
        kept = [c for c in relation.columns if keep(c.name) or c.name in key_names]
        self.columns: tuple[Column, ...] = tuple(kept)
        #: The positions (in ``relation.columns``) of the columns not captured: their
        #: values never leave capture, not even in a dead letter.
        self.dropped = frozenset(
            i for i, c in enumerate(relation.columns) if not (keep(c.name) or c.name in key_names)
        )
        self.key_names = tuple(key_names)
        self.key_nullable = key_nullable
        index = {c.name: i for i, c in enumerate(relation.columns)}
        key_set = set(key_names)

        def field(c: Column, optional: bool) -> Field:
            return types.field(c, table=table, optional=optional)

        value_fields = tuple(field(c, optional=key_nullable or c.name not in key_set) for c in kept)
        key_columns = [next(c for c in relation.columns if c.name == k) for k in key_names]
        key_fields = tuple(field(c, optional=key_nullable) for c in key_columns)
        self.schema = TableSchema(
            server, relation.namespace, relation.name, key_fields, value_fields
        )
        # AvroEncoder builds (and checks) the schemas: the writer below must match it.
        self._reference = AvroEncoder(self.schema, 1 if key_fields else None, 1)
        self.schemas: EnvelopeSchemas = self._reference.schemas
        self._row_converter: RowConverter = types.row_converter(relation)

        def slot(c: Column, f: Field) -> _Slot:
            parse = types._direct(c.type_oid, c.type_modifier, table, c.name)
            write = _writer(f.type, parse)
            how = _how(f.type, parse, write)
            return _Slot(index[c.name], c.name, write, f.optional, _unavailable(f.type), how)

        self._value_slots = tuple(slot(c, f) for c, f in zip(kept, value_fields, strict=True))
        self._key_slots = tuple(slot(c, f) for c, f in zip(key_columns, key_fields, strict=True))
        self._write_row = _compile_record(self._value_slots)
        self._write_key = _compile_record(self._key_slots)
        self._schema_name = relation.name
        self._source = AvroSourceWriter(
            "postgresql",
            {
                "version": SOURCE_VERSION,
                "connector": "postgresql",
                "name": server,
                "db": database,
                "schema": relation.namespace,
                "table": relation.name,
            },
        )
        self.events = 0

    def set_schema_ids(self, key_id: int | None, value_id: int) -> None:
        super().set_schema_ids(key_id, value_id)
        self._reference = AvroEncoder(self.schema, key_id, value_id)

    @property
    def reference_encoder(self) -> AvroEncoder:
        """The contracts encoder of the same schemas (what the writer here must equal)."""
        return self._reference

    # -- bytes ----------------------------------------------------------------------

    def _explain(self, values: TupleData, exc: Exception) -> CaptureError:
        # The compiled path failed: let the row converter name the column, or find the
        # column whose value has no encoding in its Avro type (numeric NaN, ...).
        try:
            self._row_converter(values)
        except ValueConversionError as precise:
            return precise
        table = self.relation.qualified_name
        for slot in (*self._key_slots, *self._value_slots):
            try:
                _record((slot,), values)
            except (ValueError, ArithmeticError, TypeError, OverflowError) as why:
                text = values[slot.index]
                return ValueConversionError(
                    table,
                    slot.name,
                    "avro",
                    repr(text)[:80] if text is not None else "NULL",
                    f"no encoding in the column's Avro type: {why}",
                )
        return CaptureError(f"cannot encode a row of {table}: {exc}")

    def row(self, values: TupleData) -> bytes:
        """The Avro ``Value`` record of one tuple."""
        try:
            return self._write_row(values)
        except (ValueError, ArithmeticError, TypeError, OverflowError) as exc:
            raise self._explain(values, exc) from exc

    def key(self, values: TupleData) -> bytes:
        """The framed Kafka key of one tuple (its key columns)."""
        try:
            return self._key_frame + self._write_key(values)
        except (ValueError, ArithmeticError, TypeError, OverflowError) as exc:
            raise self._explain(values, exc) from exc

    def source(
        self, commit_ms: int, commit_us: int | None, snapshot: str, tx_id: int | None
    ) -> EncodedSource:
        """The ``source`` bytes shared by one transaction's (or snapshot's) events,
        open at the per-event LSN."""
        return self._source.around(
            "lsn", {"ts_ms": commit_ms, "snapshot": snapshot, "ts_us": commit_us, "txId": tx_id}
        )


def captured_codec(
    config: CaptureConfig,
    database: str,
    relation: Relation,
    key_names: Sequence[str],
    types: PgTypeMapper,
    key_nullable: bool,
) -> TableCodec:
    """The codec capture writes ``relation``'s rows with under ``config``: its topic and
    the columns it keeps (its schemas not registered yet)."""
    table = relation.qualified_name
    return TableCodec(
        server=config.server,
        database=database,
        topic=table_topic(config.prefix, table),
        relation=relation,
        key_names=key_names,
        types=types,
        keep=config.column_filter(table).keeps,
        key_nullable=key_nullable,
    )
