"""Confluent-framed Avro technical records, read by the compiled reader (the project's C
extension; the generated Python reader where it is not built) with fastavro as the
reference."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Literal

import fastavro

from bizevents.contracts.avro_codegen import Reader, Unsupported, compile_reader
from bizevents.contracts.avro_codegen.gen import Refused
from bizevents.contracts.avro_codegen.native import AVAILABLE, compile_gate, compile_native_reader
from bizevents.contracts.avro_codegen.native import unchanged as native_unchanged
from bizevents.contracts.envelope import (
    NO_COORDINATES,
    OP_UPDATE,
    ChangeEvent,
    Headers,
    Row,
    Source,
    headers_tuple,
)
from bizevents.contracts.exceptions import Coordinates, InvalidRecord
from bizevents.contracts.logical import (
    Field,
    avro_field,
    decoder_for,
    struct_decoder,
)
from bizevents.contracts.technical.events import (
    TRANSACTION_FIELDS,
    Columns,
    Gate,
    RawHeaders,
    SchemaLookup,
    SourceTable,
    _BytesDecoder,
    _decoded,
    _event,
    envelope_builder,
    event_of,
    transaction_of,
)
from bizevents.contracts.technical.source import (
    read_source,
    source_builder,
    trusts_source,
)
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.framing import FramingError, schema_id_of, unframe

# -- Avro ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _AvroPlan:
    schema: Any
    decode_row: Callable[[Any], Row]
    source_of: Callable[[Any], Source] = read_source
    #: The compiled or generated reader (rows already converted), or None where fastavro
    #: reads.
    read: Reader | None = None
    #: Whether ``read`` gives :func:`event_of`'s parts rather than the envelope's dict
    #: (the compiled reader, with the envelope's builders).
    built: bool = False


def _read_trusted_source(d: Any) -> Source:
    return read_source(d, checked=False)


def _projected(decode_row: Callable[[Any], Row], columns: frozenset[str]) -> Callable[[Any], Row]:
    """``decode_row``, then only ``columns`` kept (the fallback of a projected read)."""

    def decode(row: Any) -> Row:
        return {k: v for k, v in decode_row(row).items() if k in columns}

    return decode


def _as_is(row: Any) -> Row:
    return row  # type: ignore[no-any-return]


#: Which reader reads records: the compiled one (the project's C extension; the
#: generated one where it is not built), the generated Python one, or fastavro alone.
ReaderKind = Literal["compiled", "generated", "fastavro"]


def _generated(
    kind: ReaderKind, schema: Any, builders: Mapping[str, Any] | None = None, **conversions: Any
) -> tuple[Reader | None, bool]:
    """The reader of a schema and whether it builds (``builders``, compiled reader
    only), or None when fastavro reads (asked, or a shape the readers do not cover)."""
    try:
        if kind == "compiled" and AVAILABLE:
            if builders:
                return compile_native_reader(schema, **conversions, **builders), True
            return compile_native_reader(schema, **conversions), False
        if kind != "fastavro":
            return compile_reader(schema, **conversions), False
    except Unsupported:
        pass
    return None, False


def _field_names(schema: Any, named: Mapping[str, Any]) -> tuple[str, ...] | None:
    resolved = _resolve(schema, named)
    if not isinstance(resolved, dict) or resolved.get("type") != "record":
        return None
    return tuple(f.get("name") for f in resolved.get("fields", ()))


def _builders(schema: Any, named: Mapping[str, Any]) -> dict[str, Any] | None:
    """The compiled reader's builders of a trusted envelope: its parts, its source block
    and its transaction block straight from their fields, no dict in between."""
    fields = {f.get("name"): f.get("type") for f in schema.get("fields", ())}
    names = _field_names(schema, named)
    source_names = _field_names(fields["source"], named)
    builder = None if names is None else envelope_builder(names)
    source = None if source_names is None else source_builder(source_names)
    if builder is None or source is None:
        return None
    build: dict[str, Any] = {"source": source}
    if "transaction" in fields:
        if _field_names(fields["transaction"], named) != TRANSACTION_FIELDS:
            return None
        build["transaction"] = transaction_of
    return {"builder": builder, "build": build}


def _conversions(fields: Sequence[Field]) -> dict[str, Callable[[Any], Any]]:
    """What ``struct_decoder(fields, "avro")`` applies, column by column, but the int32
    range checks: the generated reader refuses such ints as it reads them."""
    found = {}
    for f in fields:
        convert = decoder_for(f.type, "avro", ranges=False)
        if convert is not None:
            found[f.name] = convert
    return found


def _read_generated(plan: _AvroPlan, data: bytes, what: str) -> Any:
    """The record a plan's reader (compiled or generated) reads from a framed message, or
    None.

    None also when that reader fails: fastavro then reads the record and its
    verdict (value or error) stands; but for bytes the readers refuse outright
    (:class:`Refused`, which fastavro would build into a list of items beyond any bytes).
    """
    read = plan.read
    if read is None or data.__class__ is not bytes:
        return None
    try:
        record, end = read(data, 5)
    except Refused as exc:
        raise InvalidRecord(f"the Avro body of {what} is refused ({exc})") from None
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
        raise InvalidRecord(f"the schema of {what} is not an Avro record")
    return [avro_field(f, named) for f in schema.get("fields", ())]


def _value_row_schema(envelope: Any, named: Mapping[str, Any]) -> Any:
    if not isinstance(envelope, dict) or envelope.get("type") != "record":
        raise InvalidRecord("the value schema is not an Avro record")
    fields = {f.get("name"): f.get("type") for f in envelope.get("fields", ())}
    if "op" not in fields or "source" not in fields:
        raise InvalidRecord("the value schema is not a Debezium envelope (no op or source)")
    row = fields.get("after") or fields.get("before")
    if row is None:
        return None
    return row


def _unframe(data: bytes, what: Literal["the key", "the value"]) -> tuple[int, memoryview]:
    try:
        return unframe(data)
    except FramingError as exc:
        raise InvalidRecord(f"{what} {exc}") from None


_ADDRESS: Final = re.compile(r" at 0x[0-9a-fA-F]+")


def _read_avro(body: memoryview, schema: Any, what: str) -> Any:
    buffer = io.BytesIO(body)
    try:
        record = fastavro.schemaless_reader(buffer, schema, None)
    except Exception as exc:
        # fastavro names its buffer with an address ("<_io.BytesIO object at 0x7f…>"):
        # the verdict is the same for the same bytes, whichever path read them
        reason = _ADDRESS.sub("", f"{type(exc).__name__}: {exc}")
        raise InvalidRecord(
            f"the Avro body of {what} does not match its schema ({reason})"
        ) from exc
    if buffer.tell() != len(body):
        left = len(body) - buffer.tell()
        raise InvalidRecord(f"{left} bytes left after the Avro record of {what}")
    return record


def _check_built(parts: Any) -> None:
    """What :meth:`AvroDecoder.decode_value` checks of the parts its compiled reader
    built (raises ``InvalidRecord`` as it does); the changes gate's check."""
    op, source, before, after, ts_ms, transaction = parts
    event_of(op, source, before, after, ts_ms, transaction, None, NO_COORDINATES, ())


def _check_dict(source_of: Callable[[Any], Source], record: Any) -> None:
    """The same, of an envelope its compiled reader read as a dict."""
    _event(record, None, _as_is, NO_COORDINATES, (), source_of)


class AvroDecoder(_BytesDecoder):
    """Decodes Confluent-framed Avro records, looking writer schemas up by id.

    Parsed schemas and their conversion plans are cached per id, so the lookup runs
    once per schema, not once per record. Records are read by a reader generated per
    schema (:mod:`bizevents.contracts.avro_codegen`, rows converted as they are read); where it
    fails or does not cover the schema, fastavro reads the record and its result or
    error stands. The reader is the compiled one (the project's C extension, the same
    reads in C) where ``scripts/setup`` built it; ``reader="generated"`` keeps to the
    Python one and ``reader="fastavro"`` reads everything with fastavro (the reference
    both are tested against).
    """

    def __init__(self, schema_for_id: SchemaLookup, *, reader: ReaderKind = "compiled") -> None:
        self._lookup = schema_for_id
        self._reader: ReaderKind = reader
        self._schemas: dict[int, Any] = {}
        self._values: dict[tuple[int, Columns], _AvroPlan] = {}
        self._keys: dict[int, _AvroPlan] = {}

    def gate(
        self, columns: frozenset[str], table: SourceTable, projection: Columns = None
    ) -> Gate | None:
        """:meth:`_BytesDecoder.gate`, answered by the compiled reader's gate from the
        bytes of the before and after rows' ``columns`` (equal bytes, equal values), once
        the record reads as this decoder reads it with ``projection``."""
        if self._reader != "compiled" or not AVAILABLE:
            return None

        def gate_of(schema_id: int) -> Reader | None:
            return self._gate(schema_id, columns, table, projection)

        # one compiled call per record (_native.c, unchanged): the value's gate, made
        # once per schema id, and the key read as the decoder reads it
        gates: dict[int, Reader | None] = {}
        unchanged: Gate = partial(native_unchanged, gates, self._keys, gate_of)
        return unchanged

    def _gate(
        self, schema_id: int, columns: frozenset[str], table: SourceTable, projection: Columns
    ) -> Reader | None:
        """The gate of a schema id, None where there is none. Raises for an id whose
        schema the decoder has not read yet: no look-up is made for the gate (forged ids
        cost nothing here) and nothing is remembered; the decoder reads the record."""
        if schema_id not in self._schemas:
            raise LookupError(f"schema id {schema_id} not read yet")
        try:
            plan = self._value_plan(schema_id, projection)
        except InvalidRecord:
            return None  # the decoder gives the verdict, record by record
        if plan.read is None:
            return None
        check = _check_built if plan.built else partial(_check_dict, plan.source_of)
        return compile_gate(plan.schema, plan.read, check, columns, {"op": OP_UPDATE}, dict(table))

    def _schema(self, schema_id: int, what: str) -> Any:
        parsed = self._schemas.get(schema_id)
        if parsed is not None:
            return parsed
        try:
            raw = self._lookup(schema_id)
        except TransientError:
            raise
        except Exception as exc:
            raise InvalidRecord(f"unknown schema id {schema_id} of {what} ({exc!r})") from exc
        if raw is None:
            raise InvalidRecord(f"unknown schema id {schema_id} of {what}")
        if isinstance(raw, str | bytes):
            raw = json.loads(raw)
        parsed = raw if isinstance(raw, dict) and raw.get("__fastavro_parsed") else None
        if parsed is None:
            parsed = fastavro.parse_schema(raw)
        self._schemas[schema_id] = parsed
        return parsed

    def _value_plan(self, schema_id: int, columns: Columns) -> _AvroPlan:
        plan = self._values.get((schema_id, columns))
        if plan is None:
            schema = self._schema(schema_id, "the value")
            named = _named(schema)
            row_schema = _value_row_schema(schema, named)
            fields = [] if row_schema is None else _record_fields(row_schema, named, "a row")
            source_schema = next(f["type"] for f in schema["fields"] if f["name"] == "source")
            trusted = trusts_source(source_schema, lambda t: _resolve(t, named))
            decode_row: Callable[[Any], Row] = struct_decoder(fields, "avro")
            keep = None
            if columns is not None and not {f.name for f in fields} <= columns:
                keep = columns
                decode_row = _projected(decode_row, columns)
            row = _conversions([f for f in fields if keep is None or f.name in keep])
            projection = None if keep is None else {"before": keep, "after": keep}
            read, built = _generated(
                self._reader,
                schema,
                _builders(schema, named) if trusted else None,
                fields={"before": row, "after": row},
                keep=projection,
            )
            plan = _AvroPlan(
                schema, decode_row, _read_trusted_source if trusted else read_source, read, built
            )
            self._values[(schema_id, columns)] = plan
        return plan

    def _key_plan(self, schema_id: int) -> _AvroPlan:
        plan = self._keys.get(schema_id)
        if plan is None:
            schema = self._schema(schema_id, "the key")
            fields = _record_fields(schema, _named(schema), "the key")
            plan = _AvroPlan(
                schema,
                struct_decoder(fields, "avro"),
                read=_generated(self._reader, schema, convert=_conversions(fields))[0],
            )
            self._keys[schema_id] = plan
        return plan

    def decode_key(self, key: bytes) -> Row:
        """The key record of a Confluent-framed Avro key (raises ``InvalidRecord``)."""
        schema_id, body = _unframe(key, "the key")
        plan = self._key_plan(schema_id)
        record = _read_generated(plan, key, "the key")
        if record is not None:
            return record  # type: ignore[no-any-return]
        record = _read_avro(body, plan.schema, "the key")
        if not isinstance(record, dict):
            raise InvalidRecord("the key is not a record")
        return _decoded(record, "the key", plan.decode_row)

    def decode_value(
        self,
        value: bytes,
        key: Row | None,
        where: Coordinates,
        headers: Headers,
        columns: Columns = None,
    ) -> ChangeEvent:
        schema_id, body = _unframe(value, "the value")
        plan = self._value_plan(schema_id, columns)
        record = _read_generated(plan, value, "the value")
        if record is not None:
            try:
                if plan.built:
                    op, source, before, after, ts_ms, transaction = record
                    return event_of(
                        op, source, before, after, ts_ms, transaction, key, where, headers
                    )
                return _event(record, key, _as_is, where, headers, plan.source_of)
            except InvalidRecord:
                pass  # fastavro's record and the row decoder give the reason below
        # fastavro reads an Avro int of more than 32 bits: the row decoder and read_source
        # check the ranges the generated reader checked.
        record = _read_avro(body, plan.schema, "the value")
        return _event(record, key, plan.decode_row, where, headers)

    def _fast(
        self,
        key: bytes | None,
        value: bytes,
        where: Coordinates,
        headers: RawHeaders,
        columns: Columns,
    ) -> ChangeEvent | None:
        """Framed key and value whose plans are known, read whole by the compiled reader
        with the envelope's builders: the event in one step, without the framing, plan
        and fallback layers (a record that is anything else takes them: None)."""
        if value.__class__ is not bytes or (schema_id := schema_id_of(value)) is None:
            return None
        plan = self._values.get((schema_id, columns))
        if plan is None or not plan.built or plan.read is None:
            return None
        try:
            row = None
            if key is not None:
                if key.__class__ is not bytes or (key_id := schema_id_of(key)) is None:
                    return None
                known = self._keys.get(key_id)
                if known is None or known.read is None:
                    return None
                row, end = known.read(key, 5)
                if end != len(key):
                    return None
            parts, end = plan.read(value, 5)
            if end != len(value):
                return None
            op, source, before, after, ts_ms, transaction = parts
            return event_of(
                op, source, before, after, ts_ms, transaction, row, where, headers_tuple(headers)
            )
        except Exception:
            return None  # the layered path reads it again and gives the verdict

    def _key_bytes(self, key: bytes) -> Row:
        return self.decode_key(key)

    _value_bytes = decode_value
