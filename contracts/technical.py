"""Decoders and encoders for the records of technical topics.

Three encodings occur on technical topics, all Debezium's:

* Confluent-framed Avro: magic byte ``0``, a 4-byte big-endian schema id, the Avro
  binary body (:class:`AvroDecoder`, :class:`AvroEncoder`);
* Debezium JSON with its embedded Kafka Connect schema, ``{"schema": ..., "payload":
  ...}`` (:class:`JsonSchemaDecoder`, :class:`JsonEncoder` with ``with_schema=True``);
* plain Debezium JSON, the payload alone (:class:`PlainJsonDecoder`,
  :class:`JsonEncoder` with ``with_schema=False``). Without a schema, values stay as
  JSON gives them: see ``docs/technical-envelope.md`` for what that cannot carry.

:class:`AutoDecoder` picks one by looking at the bytes. Every decoder's ``decode``
raises :class:`~contracts.exceptions.DecodeError` and nothing else for bad input,
naming the record's coordinates and what was wrong. The one exception that passes
through is a :class:`~base.errors.TransientError` from the schema lookup
(a registry that cannot be reached is not a bad record).

All of this is pure: the schema lookup is injected and nothing here does I/O.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar, Final, Literal

import fastavro

from base.errors import TransientError
from base.framing import MAGIC_BYTE, FramingError, header, unframe
from contracts.avro_codegen import Reader, Unsupported, compile_reader
from contracts.envelope import (
    NO_COORDINATES,
    NO_EXTRA,
    OP_CREATE,
    OP_DELETE,
    OP_READ,
    OP_TRUNCATE,
    OP_UPDATE,
    OPS,
    SNAPSHOT_FALSE,
    ChangeEvent,
    Headers,
    MySqlPosition,
    Op,
    PgPosition,
    Position,
    Row,
    Source,
    Tombstone,
    Transaction,
    headers_tuple,
)
from contracts.exceptions import Coordinates, DecodeError, EncodeError
from contracts.logical import (
    UNAVAILABLE,
    UNAVAILABLE_MARKER,
    ColumnError,
    ColumnType,
    Field,
    Kind,
    avro_field,
    column_type_from_connect,
    connect_field,
    decoder_for,
    struct_decoder,
    struct_encoder,
)

__all__ = [
    "MAGIC_BYTE",
    "AutoDecoder",
    "AvroDecoder",
    "AvroEncoder",
    "Connector",
    "Decoded",
    "EncodeError",
    "Encoding",
    "EnvelopeSchemas",
    "JsonEncoder",
    "JsonSchemaDecoder",
    "PlainJsonDecoder",
    "SchemaLookup",
    "TableSchema",
    "detect_encoding",
    "envelope_avro_schema",
    "envelope_connect_schema",
]

Encoding = Literal["avro", "json_schema", "json"]
Connector = Literal["postgresql", "mysql"]
Decoded = ChangeEvent | Tombstone
RawHeaders = Sequence[tuple[str, bytes | None]] | None
#: Returns the writer schema registered under an id (a JSON string, a dict, or a
#: schema fastavro already parsed); raises ``KeyError``/``LookupError`` or returns
#: ``None`` for an unknown id.
SchemaLookup = Callable[[int], Any]

_UNAVAILABLE_B64: Final = "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="


class _Invalid(Exception):
    """Raised inside the decoders; ``decode`` turns it into a DecodeError."""


# -- building events from wire payloads ------------------------------------------------

_PG_KEYS: Final = frozenset(
    {"version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "schema", "table"}
    | {"txId", "lsn", "xmin"}
)
_MYSQL_KEYS: Final = frozenset(
    {"version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "schema", "table"}
    | {"server_id", "gtid", "file", "pos", "row", "thread"}
)


def _opt(d: Mapping[str, Any], key: str, kind: type) -> Any:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise _Invalid(f"source.{key} must be {kind.__name__}, not {type(v).__name__}")
    return v


def _int32(d: Mapping[str, Any], key: str) -> int:
    v = _opt(d, key, int) or 0
    if not -(2**31) <= v < 2**31:
        raise _Invalid(f"source.{key}: {v} does not fit int32")
    return v


def _req(d: Mapping[str, Any], key: str, kind: type) -> Any:
    v = _opt(d, key, kind)
    if v is None:
        raise _Invalid(f"source.{key} is missing")
    return v


def _source(d: Any) -> Source:
    if not isinstance(d, dict):
        raise _Invalid("the envelope has no source block")
    snapshot = d.get("snapshot")
    if snapshot is None:
        snapshot_raw = SNAPSHOT_FALSE
    elif isinstance(snapshot, bool):  # Debezium before 1.0 wrote a boolean
        snapshot_raw = "true" if snapshot else SNAPSHOT_FALSE
    elif isinstance(snapshot, str):
        snapshot_raw = snapshot
    else:
        raise _Invalid(f"source.snapshot must be a string, not {type(snapshot).__name__}")
    connector = _req(d, "connector", str)
    position: Position | None
    known: frozenset[str]
    if "file" in d:
        position = MySqlPosition(
            file=_req(d, "file", str),
            pos=_req(d, "pos", int),
            row=_int32(d, "row"),
            server_id=_opt(d, "server_id", int) or 0,
            gtid=_opt(d, "gtid", str),
            thread=_opt(d, "thread", int),
        )
        known = _MYSQL_KEYS
    elif "lsn" in d or "txId" in d or connector == "postgresql":
        position = PgPosition(
            lsn=_opt(d, "lsn", int), tx_id=_opt(d, "txId", int), xmin=_opt(d, "xmin", int)
        )
        known = _PG_KEYS
    else:
        position = None
        known = _PG_KEYS
    extra = {k: v for k, v in d.items() if k not in known and v is not None}
    return Source(
        connector=connector,
        name=_req(d, "name", str),
        db=_req(d, "db", str),
        schema=_opt(d, "schema", str),
        table=_opt(d, "table", str),
        ts_ms=_req(d, "ts_ms", int),
        snapshot_raw=snapshot_raw,
        position=position,
        version=_opt(d, "version", str),
        sequence=_opt(d, "sequence", str),
        extra=extra or NO_EXTRA,
    )


# Source fields and the Avro type each must have for the per-record checks to be
# skipped; the first group must also be non-nullable.
_TRUSTED_REQUIRED: Final = {
    "connector": "string",
    "name": "string",
    "db": "string",
    "ts_ms": "long",
    "file": "string",
    "pos": "long",
}
_TRUSTED_OPTIONAL: Final = {
    "version": "string",
    "schema": "string",
    "table": "string",
    "sequence": "string",
    "snapshot": "string",
    "txId": "long",
    "lsn": "long",
    "xmin": "long",
    "row": "int",
    "server_id": "long",
    "gtid": "string",
    "thread": "long",
}


def _avro_primitive(t: Any) -> str | None:
    if isinstance(t, dict) and "logicalType" not in t:
        t = t.get("type")
    if t == "int":
        return "long"  # an int field reads as a Python int like a long
    return t if isinstance(t, str) else None


def _trusts_source(schema: Any, named: Mapping[str, Any]) -> bool:
    """Whether an Avro source record's field types already guarantee what ``_source``
    checks per record, so decoding it can skip those checks."""
    schema = _resolve(schema, named)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return False
    names = set()
    for f in schema.get("fields", ()):
        name, t = f.get("name"), f.get("type")
        names.add(name)
        if name in _TRUSTED_REQUIRED:
            want = _TRUSTED_REQUIRED[name]
        elif name in _TRUSTED_OPTIONAL:
            want = _TRUSTED_OPTIONAL[name]
            if isinstance(t, list):
                branches = [b for b in t if b != "null"]
                if len(branches) != 1:
                    return False
                t = branches[0]
        else:
            continue
        if _avro_primitive(t) != ("long" if want == "int" else want):
            return False
    return {"connector", "name", "db", "ts_ms"} <= names and ("file" in names) == ("pos" in names)


def _source_trusted(d: dict[str, Any]) -> Source:
    """``_source`` for a record whose schema :func:`_trusts_source` accepted."""
    position: Position | None
    if "file" in d:
        position = MySqlPosition(
            d["file"],
            d["pos"],
            d.get("row") or 0,
            d.get("server_id") or 0,
            d.get("gtid"),
            d.get("thread"),
        )
        known = _MYSQL_KEYS
    elif "lsn" in d or "txId" in d or d["connector"] == "postgresql":
        position = PgPosition(d.get("lsn"), d.get("txId"), d.get("xmin"))
        known = _PG_KEYS
    else:
        position = None
        known = _PG_KEYS
    extra = {k: v for k, v in d.items() if v is not None and k not in known}
    return Source(
        d["connector"],
        d["name"],
        d["db"],
        d.get("schema"),
        d.get("table"),
        d["ts_ms"],
        d.get("snapshot") or SNAPSHOT_FALSE,
        position,
        d.get("version"),
        d.get("sequence"),
        extra or NO_EXTRA,
    )


def _transaction(d: Any) -> Transaction | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise _Invalid("transaction must be a struct")
    tid = d.get("id")
    total = d.get("total_order")
    order = d.get("data_collection_order")
    if not isinstance(tid, str) or type(total) is not int or type(order) is not int:
        raise _Invalid("transaction needs id (string), total_order and data_collection_order")
    return Transaction(tid, total, order)


def _row(value: Any, which: str, decode_row: Callable[[Any], Row]) -> Row | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Invalid(f"{which} must be a struct, not {type(value).__name__}")
    return _decoded(value, which, decode_row)


def _decoded(value: Any, which: str, decode_row: Callable[[Any], Row]) -> Row:
    """``decode_row(value)``; a failure says which column of which row it was."""
    try:
        return decode_row(value)
    except _Invalid:
        raise
    except ColumnError as exc:
        raise _Invalid(f"column {exc.column!r} of {which}: {exc.problem}") from exc
    except Exception as exc:
        raise _Invalid(f"{which}: {exc}") from exc


def _event(
    payload: Any,
    key: Row | None,
    decode_row: Callable[[Any], Row],
    where: Coordinates,
    headers: Headers,
    source_of: Callable[[Any], Source] = _source,
) -> ChangeEvent:
    if not isinstance(payload, dict):
        raise _Invalid("the envelope is not a struct")
    op = payload.get("op")
    if op is None:
        raise _Invalid("the envelope has no op")
    if op not in OPS:
        raise _Invalid(f"op {op!r} is not one of c, u, d, r, t")
    source = source_of(payload.get("source"))
    before = _row(payload.get("before"), "before", decode_row)
    after = _row(payload.get("after"), "after", decode_row)
    if op in (OP_CREATE, OP_READ, OP_UPDATE) and after is None:
        raise _Invalid(f"op {op!r} without an after row")
    if op == OP_DELETE and after is not None:
        raise _Invalid("a delete with an after row")
    if op == OP_TRUNCATE and (before is not None or after is not None):
        raise _Invalid("a truncate with rows")
    ts_ms = payload.get("ts_ms")
    if ts_ms is not None and type(ts_ms) is not int:
        raise _Invalid(f"ts_ms must be an integer, not {type(ts_ms).__name__}")
    op_literal: Op = op
    return ChangeEvent(
        op=op_literal,
        source=source,
        before=before,
        after=after,
        key=key,
        ts_ms=ts_ms,
        transaction=_transaction(payload.get("transaction")),
        coordinates=where,
        headers=headers,
    )


def _tombstone(key: Row | None, where: Coordinates, headers: Headers) -> Tombstone:
    if key is None:
        raise _Invalid("a record with neither key nor value")
    return Tombstone(key, where, headers)


def _guard(where: Coordinates, run: Callable[[], Decoded]) -> Decoded:
    try:
        return run()
    except _Invalid as exc:
        raise DecodeError(str(exc), where) from None
    except (DecodeError, TransientError):
        raise
    except Exception as exc:
        raise DecodeError(f"{type(exc).__name__}: {exc}", where) from exc


def _coordinates(where: Coordinates | None) -> Coordinates:
    return NO_COORDINATES if where is None else where


# -- Avro ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _AvroPlan:
    schema: Any
    decode_row: Callable[[Any], Row]
    source_of: Callable[[Any], Source] = _source
    #: The generated reader (rows already converted), or None where fastavro reads.
    read: Reader | None = None


def _as_is(row: Any) -> Row:
    return row  # type: ignore[no-any-return]


def _generated(schema: Any, **conversions: Any) -> Reader | None:
    """The generated reader of a schema, or None when it has a shape not covered."""
    try:
        return compile_reader(schema, **conversions)
    except Unsupported:
        return None


def _conversions(fields: Sequence[Field]) -> dict[str, Callable[[Any], Any]]:
    """What ``struct_decoder(fields, "avro")`` applies, column by column, but the int32
    range checks: the generated reader refuses such ints as it reads them."""
    found = {}
    for f in fields:
        convert = decoder_for(f.type, "avro", ranges=False)
        if convert is not None:
            found[f.name] = convert
    return found


def _read_generated(plan: _AvroPlan, data: bytes) -> Any:
    """The record a plan's generated reader reads from a framed message, or None.

    None also when the generated reader fails: fastavro then reads the record and its
    verdict (value or error) stands.
    """
    read = plan.read
    if read is None or data.__class__ is not bytes:
        return None
    try:
        record, end = read(data, 5)
    except Exception:
        return None
    return record if end == len(data) else None


def _named(parsed: Any) -> Mapping[str, Any]:
    named = parsed.get("__named_schemas") if isinstance(parsed, dict) else None
    return named if isinstance(named, dict) else {}


def _resolve(schema: Any, named: Mapping[str, Any]) -> Any:
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        schema = branches[0] if len(branches) == 1 else None
    if isinstance(schema, str):
        schema = named.get(schema)
    return schema


def _record_fields(schema: Any, named: Mapping[str, Any], what: str) -> list[Field]:
    schema = _resolve(schema, named)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise _Invalid(f"the schema of {what} is not an Avro record")
    return [avro_field(f, named) for f in schema.get("fields", ())]


def _value_row_schema(envelope: Any, named: Mapping[str, Any]) -> Any:
    if not isinstance(envelope, dict) or envelope.get("type") != "record":
        raise _Invalid("the value schema is not an Avro record")
    fields = {f.get("name"): f.get("type") for f in envelope.get("fields", ())}
    if "op" not in fields or "source" not in fields:
        raise _Invalid("the value schema is not a Debezium envelope (no op or source)")
    row = fields.get("after") or fields.get("before")
    if row is None:
        return None
    return row


def _unframe(data: bytes, what: Literal["the key", "the value"]) -> tuple[int, memoryview]:
    try:
        return unframe(data)
    except FramingError as exc:
        raise _Invalid(f"{what} {exc}") from None


def _read_avro(body: memoryview, schema: Any, what: str) -> Any:
    buffer = io.BytesIO(body)
    try:
        record = fastavro.schemaless_reader(buffer, schema, None)
    except Exception as exc:
        raise _Invalid(f"the Avro body of {what} does not match its schema ({exc!r})") from exc
    if buffer.tell() != len(body):
        left = len(body) - buffer.tell()
        raise _Invalid(f"{left} bytes left after the Avro record of {what}")
    return record


class _BytesDecoder:
    """The order every decoder follows: the key, then the value or a tombstone; any
    failure becomes a :class:`DecodeError` naming the record's coordinates."""

    def _key_bytes(self, key: bytes) -> Row:
        raise NotImplementedError

    def _value_bytes(
        self, value: bytes, key: Row | None, where: Coordinates, headers: Headers
    ) -> ChangeEvent:
        raise NotImplementedError

    def decode(
        self,
        key: bytes | None,
        value: bytes | None,
        coordinates: Coordinates | None = None,
        headers: RawHeaders = None,
    ) -> Decoded:
        """A change event, or a tombstone when ``value`` is ``None``."""
        where = _coordinates(coordinates)

        def run() -> Decoded:
            hdrs = headers_tuple(headers)
            key_row = None if key is None else self._key_bytes(key)
            if value is None:
                return _tombstone(key_row, where, hdrs)
            return self._value_bytes(value, key_row, where, hdrs)

        return _guard(where, run)


class AvroDecoder(_BytesDecoder):
    """Decodes Confluent-framed Avro records, looking writer schemas up by id.

    Parsed schemas and their conversion plans are cached per id, so the lookup runs
    once per schema, not once per record. Records are read by a reader generated per
    schema (:mod:`contracts.avro_codegen`, rows converted as they are read); where it
    fails or does not cover the schema, fastavro reads the record and its result or
    error stands. ``generated=False`` reads everything with fastavro (the reference
    the generated readers are tested against).
    """

    def __init__(self, schema_for_id: SchemaLookup, *, generated: bool = True) -> None:
        self._lookup = schema_for_id
        self._generated = generated
        self._schemas: dict[int, Any] = {}
        self._values: dict[int, _AvroPlan] = {}
        self._keys: dict[int, _AvroPlan] = {}

    def _schema(self, schema_id: int, what: str) -> Any:
        parsed = self._schemas.get(schema_id)
        if parsed is not None:
            return parsed
        try:
            raw = self._lookup(schema_id)
        except TransientError:
            raise
        except Exception as exc:
            raise _Invalid(f"unknown schema id {schema_id} of {what} ({exc!r})") from exc
        if raw is None:
            raise _Invalid(f"unknown schema id {schema_id} of {what}")
        if isinstance(raw, str | bytes):
            raw = json.loads(raw)
        parsed = raw if isinstance(raw, dict) and raw.get("__fastavro_parsed") else None
        if parsed is None:
            parsed = fastavro.parse_schema(raw)
        self._schemas[schema_id] = parsed
        return parsed

    def _value_plan(self, schema_id: int) -> _AvroPlan:
        plan = self._values.get(schema_id)
        if plan is None:
            schema = self._schema(schema_id, "the value")
            named = _named(schema)
            row_schema = _value_row_schema(schema, named)
            fields = [] if row_schema is None else _record_fields(row_schema, named, "a row")
            source_schema = next(f["type"] for f in schema["fields"] if f["name"] == "source")
            trusted = _trusts_source(source_schema, named)
            row = _conversions(fields)
            plan = _AvroPlan(
                schema,
                struct_decoder(fields, "avro"),
                _source_trusted if trusted else _source,
                _generated(schema, fields={"before": row, "after": row})
                if self._generated
                else None,
            )
            self._values[schema_id] = plan
        return plan

    def _key_plan(self, schema_id: int) -> _AvroPlan:
        plan = self._keys.get(schema_id)
        if plan is None:
            schema = self._schema(schema_id, "the key")
            fields = _record_fields(schema, _named(schema), "the key")
            plan = _AvroPlan(
                schema,
                struct_decoder(fields, "avro"),
                read=_generated(schema, convert=_conversions(fields)) if self._generated else None,
            )
            self._keys[schema_id] = plan
        return plan

    def decode_key(self, key: bytes) -> Row:
        """The key record of a Confluent-framed Avro key (raises ``_Invalid``)."""
        schema_id, body = _unframe(key, "the key")
        plan = self._key_plan(schema_id)
        record = _read_generated(plan, key)
        if record is not None:
            return record  # type: ignore[no-any-return]
        record = _read_avro(body, plan.schema, "the key")
        if not isinstance(record, dict):
            raise _Invalid("the key is not a record")
        return _decoded(record, "the key", plan.decode_row)

    def decode_value(
        self, value: bytes, key: Row | None, where: Coordinates, headers: Headers
    ) -> ChangeEvent:
        schema_id, body = _unframe(value, "the value")
        plan = self._value_plan(schema_id)
        record = _read_generated(plan, value)
        if record is not None:
            try:
                return _event(record, key, _as_is, where, headers, plan.source_of)
            except _Invalid:
                pass  # fastavro's record and the row decoder give the reason below
        # fastavro reads an Avro int of more than 32 bits: the row decoder and _source
        # check the ranges the generated reader checked.
        record = _read_avro(body, plan.schema, "the value")
        return _event(record, key, plan.decode_row, where, headers)

    def _key_bytes(self, key: bytes) -> Row:
        return self.decode_key(key)

    def _value_bytes(
        self, value: bytes, key: Row | None, where: Coordinates, headers: Headers
    ) -> ChangeEvent:
        return self.decode_value(value, key, where, headers)


# -- JSON ----------------------------------------------------------------------------


def _loads(data: bytes, exact: bool, what: str) -> Any:
    # Numbers with fractions parse as Decimal when a schema will say what they are, so
    # a decimal written as a number (decimal.format=NUMERIC) stays exact.
    try:
        if exact:
            return json.loads(data, parse_float=Decimal)
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _Invalid(f"{what} is not valid JSON ({exc})") from exc


def _plain_value(value: Any) -> Any:
    if value in (UNAVAILABLE_MARKER, _UNAVAILABLE_B64):
        return UNAVAILABLE
    if type(value) is list and len(value) == 1 and value[0] == UNAVAILABLE_MARKER:
        return UNAVAILABLE
    return value


def _plain_row(row: dict[str, Any]) -> Row:
    # Only the TOAST marker is inferred: any other guess (an ISO string as a
    # timestamp, base64 as bytes) could be wrong for a text column.
    for name, value in row.items():
        if type(value) is str or type(value) is list:
            row[name] = _plain_value(value)
        elif type(value) is int and not _INT64_LOW <= value <= _INT64_HIGH:
            # No Connect type holds it, so no Debezium writer wrote it.
            raise ColumnError(name, f"{value} does not fit int64")
    return row


_INT64_LOW: Final = -(2**63)
_INT64_HIGH: Final = 2**63 - 1


def _plain_event(
    payload: Any, key: Row | None, where: Coordinates, headers: Headers
) -> ChangeEvent:
    """The event of a payload without a schema, whose rows must agree with each other
    and with the key: that is all a plain document can be held to."""
    event = _event(payload, key, _plain_row, where, headers)
    before, after = event.before, event.after
    if before is not None and after is not None and before.keys() != after.keys():
        for which, row, other in (("before", before, after), ("after", after, before)):
            for name in row:
                if name not in other:
                    other_name = "after" if which == "before" else "before"
                    raise _Invalid(f"column {name!r} of {which} is missing from {other_name}")
    if key is not None:
        for which, part in (("before", before), ("after", after)):
            missing = [] if part is None else [name for name in key if name not in part]
            if missing:
                raise _Invalid(f"column {missing[0]!r} of the key is missing from {which}")
    return event


class _ConnectPlan:
    __slots__ = ("decode_row", "schema")

    def __init__(self, schema: Any, decode_row: Callable[[Any], Row]) -> None:
        self.schema = schema
        self.decode_row = decode_row


def _connect_envelope_plan(schema: Any) -> _ConnectPlan:
    if not isinstance(schema, dict) or schema.get("type") != "struct":
        raise _Invalid("the embedded schema is not a struct")
    members = schema.get("fields")
    if not isinstance(members, list):
        raise _Invalid("the embedded schema has no fields")
    by_name = {m.get("field"): m for m in members if isinstance(m, dict)}
    if "op" not in by_name or "source" not in by_name:
        raise _Invalid("the embedded schema is not a Debezium envelope (no op or source)")
    row = by_name.get("after") or by_name.get("before")
    if row is None:
        return _ConnectPlan(schema, struct_decoder((), "json"))
    try:
        fields = column_type_from_connect(row).fields or ()
    except (TypeError, ValueError) as exc:
        raise _Invalid(f"the embedded row schema is malformed: {exc}") from exc
    return _ConnectPlan(schema, struct_decoder(fields, "json"))


def _connect_key_plan(schema: Any) -> _ConnectPlan:
    if not isinstance(schema, dict) or schema.get("type") != "struct":
        raise _Invalid("the key's embedded schema is not a struct")
    try:
        raw = schema.get("fields")
        if not isinstance(raw, list):
            raise TypeError("no fields")
        fields = [connect_field(f) for f in raw]
    except (TypeError, ValueError) as exc:
        raise _Invalid(f"the key's embedded schema is malformed: {exc}") from exc
    return _ConnectPlan(schema, struct_decoder(fields, "json"))


class _JsonDocumentDecoder(_BytesDecoder):
    """What the two JSON decoders share: parse the bytes, then decode the documents."""

    #: Parse numbers exactly (``Decimal``) where a schema says what they are.
    exact_numbers: ClassVar[bool] = False

    def decode_key_doc(self, doc: Any) -> Row:
        raise NotImplementedError

    def decode_value_doc(
        self, doc: Any, key: Row | None, where: Coordinates, headers: Headers
    ) -> ChangeEvent:
        raise NotImplementedError

    def _key_bytes(self, key: bytes) -> Row:
        return self.decode_key_doc(_loads(key, self.exact_numbers, "the key"))

    def _value_bytes(
        self, value: bytes, key: Row | None, where: Coordinates, headers: Headers
    ) -> ChangeEvent:
        doc = _loads(value, self.exact_numbers, "the value")
        return self.decode_value_doc(doc, key, where, headers)


class JsonSchemaDecoder(_JsonDocumentDecoder):
    """Decodes Debezium JSON with its embedded schema (``schemas.enable=true``).

    The embedded schema's field types and semantic names drive the conversion. The
    last schema seen is kept, so a stream of records with one schema builds its plan
    once (the check is a dict comparison).
    """

    exact_numbers = True

    def __init__(self) -> None:
        self._value: _ConnectPlan | None = None
        self._key: _ConnectPlan | None = None

    def _value_plan(self, schema: Any) -> _ConnectPlan:
        plan = self._value
        if plan is None or plan.schema != schema:
            plan = self._value = _connect_envelope_plan(schema)
        return plan

    def _key_plan(self, schema: Any) -> _ConnectPlan:
        plan = self._key
        if plan is None or plan.schema != schema:
            plan = self._key = _connect_key_plan(schema)
        return plan

    def decode_key_doc(self, doc: Any) -> Row:
        if not isinstance(doc, dict):
            raise _Invalid("the key is not a JSON object")
        if doc.keys() == {"schema", "payload"}:
            payload = doc["payload"]
            if not isinstance(payload, dict):
                raise _Invalid("the key's payload is not an object")
            if doc["schema"] is None:
                return _decoded(payload, "the key", _plain_row)
            return _decoded(payload, "the key", self._key_plan(doc["schema"]).decode_row)
        return _decoded(doc, "the key", _plain_row)

    def decode_value_doc(
        self, doc: Any, key: Row | None, where: Coordinates, headers: Headers
    ) -> ChangeEvent:
        if not isinstance(doc, dict) or "schema" not in doc or "payload" not in doc:
            raise _Invalid("not a {schema, payload} document")
        if doc["schema"] is None:
            return _plain_event(doc["payload"], key, where, headers)
        plan = self._value_plan(doc["schema"])
        return _event(doc["payload"], key, plan.decode_row, where, headers)


class PlainJsonDecoder(_JsonDocumentDecoder):
    """Decodes plain Debezium JSON (``schemas.enable=false``): the payload alone.

    Values stay as JSON gives them (see the module docstring); only the marker of an
    unavailable TOASTed value becomes :data:`~contracts.logical.UNAVAILABLE`. A
    ``{schema, payload}`` document is accepted too, its schema ignored.
    """

    def decode_key_doc(self, doc: Any) -> Row:
        if not isinstance(doc, dict):
            raise _Invalid("the key is not a JSON object")
        if doc.keys() == {"schema", "payload"}:
            doc = doc["payload"]
            if not isinstance(doc, dict):
                raise _Invalid("the key's payload is not an object")
        return _decoded(doc, "the key", _plain_row)

    def decode_value_doc(
        self, doc: Any, key: Row | None, where: Coordinates, headers: Headers
    ) -> ChangeEvent:
        if isinstance(doc, dict) and doc.keys() == {"schema", "payload"}:
            doc = doc["payload"]
        return _plain_event(doc, key, where, headers)


# -- auto-detection --------------------------------------------------------------------

_JSON_START: Final = frozenset(b" \t\r\n{")


def _sniff(data: bytes, what: Literal["the key", "the value"]) -> Literal["avro", "json"]:
    if not data:
        raise _Invalid(f"{what} is empty (0 bytes)")
    if data[0] == MAGIC_BYTE:
        return "avro"
    if data[0] in _JSON_START and data.lstrip()[:1] == b"{":
        return "json"
    raise _Invalid(
        f"{what} is neither Confluent Avro (magic byte 0) nor a JSON object: "
        f"its first byte is {data[0]:#04x}"
    )


def detect_encoding(value: bytes) -> Encoding:
    """Which encoding a record value has: ``"avro"``, ``"json_schema"`` or ``"json"``.

    Raises DecodeError when it is none of them (for JSON this parses the document).
    """

    def run() -> Encoding:
        if _sniff(value, "the value") == "avro":
            return "avro"
        doc = _loads(value, False, "the value")
        if isinstance(doc, dict) and "schema" in doc and "payload" in doc and doc["schema"]:
            return "json_schema"
        return "json"

    try:
        return run()
    except _Invalid as exc:
        raise DecodeError(str(exc)) from None
    except Exception as exc:
        raise DecodeError(f"{type(exc).__name__}: {exc}") from exc


class AutoDecoder(_BytesDecoder):
    """Decodes any of the three encodings, chosen per record from its bytes.

    A magic byte ``0`` means Confluent Avro (which needs ``schema_for_id``); ``{``
    means JSON, with or without an embedded schema.
    """

    def __init__(self, schema_for_id: SchemaLookup | None = None) -> None:
        self._avro = None if schema_for_id is None else AvroDecoder(schema_for_id)
        self._json = JsonSchemaDecoder()
        self._plain = PlainJsonDecoder()

    def _avro_decoder(self, what: str) -> AvroDecoder:
        if self._avro is None:
            raise _Invalid(f"{what} is Confluent Avro, but no schema lookup was configured")
        return self._avro

    def _key_bytes(self, key: bytes) -> Row:
        if _sniff(key, "the key") == "avro":
            return self._avro_decoder("the key").decode_key(key)
        return self._json.decode_key_doc(_loads(key, True, "the key"))

    def _value_bytes(
        self, value: bytes, key: Row | None, where: Coordinates, headers: Headers
    ) -> ChangeEvent:
        if _sniff(value, "the value") == "avro":
            return self._avro_decoder("the value").decode_value(value, key, where, headers)
        # JsonConverter writes "schema" first; only then parse numbers exactly, so a
        # plain document keeps its floats as JSON gives them and is parsed once.
        exact = value.lstrip().startswith(b'{"schema"')
        doc = _loads(value, exact, "the value")
        if isinstance(doc, dict) and doc.keys() == {"schema", "payload"}:
            if not exact:
                doc = _loads(value, True, "the value")
            return self._json.decode_value_doc(doc, key, where, headers)
        return self._plain.decode_value_doc(doc, key, where, headers)


# -- schemas for encoding ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableSchema:
    """A table as a technical topic carries it: names, key columns, value columns."""

    server: str
    schema: str
    table: str
    key_fields: tuple[Field, ...]
    value_fields: tuple[Field, ...]
    connector: Connector = "postgresql"

    @property
    def namespace(self) -> str:
        """``<server>.<schema>.<table>``: the topic name and the Avro namespace."""
        return f"{self.server}.{self.schema}.{self.table}"


@dataclass(frozen=True, slots=True)
class EnvelopeSchemas:
    """The key schema (``None`` for a table without a primary key) and value schema."""

    key: dict[str, Any] | None
    value: dict[str, Any]


_SNAPSHOT_ALLOWED: Final = (
    "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
)
_SNAPSHOT_AVRO: Final = {
    "type": "string",
    "connect.version": 1,
    "connect.parameters": {"allowed": _SNAPSHOT_ALLOWED},
    "connect.default": "false",
    "connect.name": "io.debezium.data.Enum",
}

# (name, avro type, optional) of each source field, per connector.
_SOURCE_COMMON: Final[list[tuple[str, str, bool]]] = [
    ("version", "string", True),
    ("connector", "string", False),
    ("name", "string", False),
    ("ts_ms", "long", False),
    ("snapshot", "snapshot", True),
    ("db", "string", False),
    ("sequence", "string", True),
    ("ts_us", "long", True),
    ("ts_ns", "long", True),
]
_SOURCE_FIELDS: Final[dict[str, list[tuple[str, str, bool]]]] = {
    "postgresql": [
        *_SOURCE_COMMON,
        ("schema", "string", False),
        ("table", "string", False),
        ("txId", "long", True),
        ("lsn", "long", True),
        ("xmin", "long", True),
    ],
    "mysql": [
        *_SOURCE_COMMON,
        ("table", "string", True),
        ("server_id", "long", False),
        ("gtid", "string", True),
        ("file", "string", False),
        ("pos", "long", False),
        ("row", "int", False),
        ("thread", "long", True),
        ("query", "string", True),
    ],
}
_CONNECT_OF_AVRO: Final = {"string": "string", "long": "int64", "int": "int32"}


def _source_avro(connector: str) -> dict[str, Any]:
    fields: list[dict[str, Any]] = []
    for name, avro_type, optional in _SOURCE_FIELDS[connector]:
        if avro_type == "snapshot":
            fields.append({"name": name, "type": [_SNAPSHOT_AVRO, "null"], "default": "false"})
        elif optional:
            fields.append({"name": name, "type": ["null", avro_type], "default": None})
        else:
            fields.append({"name": name, "type": avro_type})
    full = f"io.debezium.connector.{connector}.Source"
    return {
        "type": "record",
        "name": "Source",
        "namespace": f"io.debezium.connector.{connector}",
        "fields": fields,
        "connect.name": full,
    }


_TRANSACTION_AVRO: Final = {
    "type": "record",
    "name": "block",
    "namespace": "event",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "total_order", "type": "long"},
        {"name": "data_collection_order", "type": "long"},
    ],
    "connect.version": 1,
    "connect.name": "event.block",
}


def envelope_avro_schema(
    server: str,
    schema: str,
    table: str,
    key_fields: Sequence[Field],
    value_fields: Sequence[Field],
    connector: Connector = "postgresql",
) -> EnvelopeSchemas:
    """The Avro key and value schemas Debezium's Avro converter would register.

    The value is ``<server>.<schema>.<table>.Envelope`` with ``before``/``after`` as
    nullable ``Value`` records, the connector's ``Source`` record, ``op``, ``ts_ms``
    and an optional ``transaction`` block; the key is the ``Key`` record of the
    primary-key columns (``None`` without any).
    """
    namespace = f"{server}.{schema}.{table}"
    value_record = ColumnType(Kind.STRUCT, fields=tuple(value_fields)).avro_schema("Value")
    value_record["namespace"] = namespace
    value_record["connect.name"] = f"{namespace}.Value"
    envelope = {
        "type": "record",
        "name": "Envelope",
        "namespace": namespace,
        "fields": [
            {"name": "before", "type": ["null", value_record], "default": None},
            {"name": "after", "type": ["null", f"{namespace}.Value"], "default": None},
            {"name": "source", "type": _source_avro(connector)},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {"name": "transaction", "type": ["null", _TRANSACTION_AVRO], "default": None},
        ],
        "connect.version": 1,
        "connect.name": f"{namespace}.Envelope",
    }
    key: dict[str, Any] | None = None
    if key_fields:
        key = ColumnType(Kind.STRUCT, fields=tuple(key_fields)).avro_schema("Key")
        key["namespace"] = namespace
        key["connect.name"] = f"{namespace}.Key"
    return EnvelopeSchemas(key, envelope)


def envelope_connect_schema(table: TableSchema) -> EnvelopeSchemas:
    """The Kafka Connect schemas Debezium embeds in JSON with ``schemas.enable=true``."""
    ns = table.namespace
    row = ColumnType(Kind.STRUCT, fields=table.value_fields)
    source_fields = []
    for name, avro_type, optional in _SOURCE_FIELDS[table.connector]:
        if avro_type == "snapshot":
            source_fields.append(
                {
                    "type": "string",
                    "optional": True,
                    "name": "io.debezium.data.Enum",
                    "version": 1,
                    "parameters": {"allowed": _SNAPSHOT_ALLOWED},
                    "default": "false",
                    "field": name,
                }
            )
        else:
            source_fields.append(
                {"type": _CONNECT_OF_AVRO[avro_type], "optional": optional, "field": name}
            )
    value = {
        "type": "struct",
        "fields": [
            {**row.connect_schema(True, "before"), "name": f"{ns}.Value"},
            {**row.connect_schema(True, "after"), "name": f"{ns}.Value"},
            {
                "type": "struct",
                "fields": source_fields,
                "optional": False,
                "name": f"io.debezium.connector.{table.connector}.Source",
                "field": "source",
            },
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {
                "type": "struct",
                "fields": [
                    {"type": "string", "optional": False, "field": "id"},
                    {"type": "int64", "optional": False, "field": "total_order"},
                    {"type": "int64", "optional": False, "field": "data_collection_order"},
                ],
                "optional": True,
                "name": "event.block",
                "version": 1,
                "field": "transaction",
            },
        ],
        "optional": False,
        "name": f"{ns}.Envelope",
        "version": 1,
    }
    key: dict[str, Any] | None = None
    if table.key_fields:
        key = {
            **ColumnType(Kind.STRUCT, fields=table.key_fields).connect_schema(False),
            "name": f"{ns}.Key",
        }
    return EnvelopeSchemas(key, value)


# -- encoders ------------------------------------------------------------------------------


def _source_wire(source: Source, connector: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "version": source.version,
        "connector": source.connector,
        "name": source.name,
        "ts_ms": source.ts_ms,
        "snapshot": source.snapshot_raw,
        "db": source.db,
        "sequence": source.sequence,
    }
    if connector == "postgresql" or source.schema is not None:
        out["schema"] = source.schema
    out["table"] = source.table
    pos = source.position
    if isinstance(pos, PgPosition):
        out.update(txId=pos.tx_id, lsn=pos.lsn, xmin=pos.xmin)
    elif isinstance(pos, MySqlPosition):
        out.update(
            server_id=pos.server_id,
            gtid=pos.gtid,
            file=pos.file,
            pos=pos.pos,
            row=pos.row,
            thread=pos.thread,
        )
    for k, v in source.extra.items():
        out.setdefault(k, v)
    return out


def _transaction_wire(tx: Transaction | None) -> dict[str, Any] | None:
    if tx is None:
        return None
    return {
        "id": tx.id,
        "total_order": tx.total_order,
        "data_collection_order": tx.data_collection_order,
    }


class _PayloadWriter:
    def __init__(self, table: TableSchema, wire: Literal["avro", "json"]) -> None:
        self.table = table
        self.row = struct_encoder(table.value_fields, wire)
        self.key = struct_encoder(table.key_fields, wire)

    def payload(self, event: ChangeEvent) -> dict[str, Any]:
        try:
            return {
                "before": None if event.before is None else self.row(event.before),
                "after": None if event.after is None else self.row(event.after),
                "source": _source_wire(event.source, self.table.connector),
                "op": event.op,
                "ts_ms": event.ts_ms,
                "transaction": _transaction_wire(event.transaction),
            }
        except Exception as exc:
            raise EncodeError(f"cannot encode {event.coordinates}: {exc}") from exc

    def key_of(self, key: Row | None) -> dict[str, Any] | None:
        if key is None:
            return None
        try:
            return self.key(key)
        except Exception as exc:
            raise EncodeError(f"cannot encode the key: {exc}") from exc


def _frame(schema_id: int, schema: Any, record: Any) -> bytes:
    buffer = io.BytesIO()
    buffer.write(header(schema_id))
    try:
        fastavro.schemaless_writer(buffer, schema, record)
    except Exception as exc:
        raise EncodeError(f"the record does not fit its Avro schema: {exc}") from exc
    return buffer.getvalue()


class AvroEncoder:
    """Writes change events and tombstones as Confluent-framed Avro.

    The ids are those the registry gave the schemas of :func:`envelope_avro_schema`
    (registering is the caller's business, so this stays pure).
    """

    def __init__(self, table: TableSchema, key_schema_id: int | None, value_schema_id: int) -> None:
        schemas = envelope_avro_schema(
            table.server,
            table.schema,
            table.table,
            table.key_fields,
            table.value_fields,
            table.connector,
        )
        self.schemas = schemas
        self._value_schema = fastavro.parse_schema(schemas.value)
        self._key_schema = None if schemas.key is None else fastavro.parse_schema(schemas.key)
        self._key_id = key_schema_id
        self._value_id = value_schema_id
        self._writer = _PayloadWriter(table, "avro")

    def encode_key(self, key: Row | None) -> bytes | None:
        record = self._writer.key_of(key)
        if record is None:
            return None
        if self._key_schema is None or self._key_id is None:
            raise EncodeError("a key for a table without key columns")
        return _frame(self._key_id, self._key_schema, record)

    def encode(self, event: ChangeEvent | Tombstone) -> tuple[bytes | None, bytes | None]:
        """``(key bytes, value bytes)``; a tombstone has value ``None``."""
        key = self.encode_key(event.key)
        if isinstance(event, Tombstone):
            return key, None
        return key, _frame(self._value_id, self._value_schema, self._writer.payload(event))


class JsonEncoder:
    """Writes change events as Debezium JSON, with the embedded schema or without."""

    def __init__(self, table: TableSchema, with_schema: bool = True) -> None:
        self._writer = _PayloadWriter(table, "json")
        self._with_schema = with_schema
        self.schemas = envelope_connect_schema(table)

    def _dump(self, schema: Any, payload: Any) -> bytes:
        doc = {"schema": schema, "payload": payload} if self._with_schema else payload
        try:
            return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
        except (TypeError, ValueError) as exc:
            raise EncodeError(f"not representable as JSON: {exc}") from exc

    def encode(self, event: ChangeEvent | Tombstone) -> tuple[bytes | None, bytes | None]:
        """``(key bytes, value bytes)``; a tombstone has value ``None``."""
        key_record = self._writer.key_of(event.key)
        key = None if key_record is None else self._dump(self.schemas.key, key_record)
        if isinstance(event, Tombstone):
            return key, None
        return key, self._dump(self.schemas.value, self._writer.payload(event))
