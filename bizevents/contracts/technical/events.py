"""The steps every technical decoder shares: the envelope payload checked and built into a
ChangeEvent or Tombstone, failures turned into one DecodeError."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, TypeAlias

from bizevents.contracts.avro_codegen.native import constructor
from bizevents.contracts.envelope import (
    NO_COORDINATES,
    OP_CREATE,
    OP_DELETE,
    OP_READ,
    OP_TRUNCATE,
    OP_UPDATE,
    OPS,
    ChangeEvent,
    Headers,
    Op,
    Row,
    Source,
    Tombstone,
    Transaction,
    headers_tuple,
)
from bizevents.contracts.exceptions import Coordinates, DecodeError, InvalidRecord
from bizevents.contracts.logical import (
    ColumnError,
)
from bizevents.contracts.technical.source import (
    read_source,
)
from bizevents.plumbing.errors import TransientError

__all__ = ["Columns", "Decoded", "Encoding", "RawHeaders", "SchemaLookup"]

Encoding = Literal["avro", "json_schema", "json"]
Decoded = ChangeEvent | Tombstone
RawHeaders = Sequence[tuple[str, bytes | None]] | None
#: Returns the writer schema registered under an id (a JSON string, a dict, or a
#: schema fastavro already parsed); raises ``KeyError``/``LookupError`` or returns
#: ``None`` for an unknown id.
SchemaLookup = Callable[[int], Any]
#: The columns a reader of the rows needs (``None``: all of them).
Columns = frozenset[str] | None


def _transaction(d: Any) -> Transaction | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise InvalidRecord("transaction must be a struct")
    tid = d.get("id")
    total = d.get("total_order")
    order = d.get("data_collection_order")
    if not isinstance(tid, str) or type(total) is not int or type(order) is not int:
        raise InvalidRecord("transaction needs id (string), total_order and data_collection_order")
    return Transaction(tid, total, order)


def _row(value: Any, which: str, decode_row: Callable[[Any], Row]) -> Row | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRecord(f"{which} must be a struct, not {type(value).__name__}")
    return _decoded(value, which, decode_row)


def _decoded(value: Any, which: str, decode_row: Callable[[Any], Row]) -> Row:
    """``decode_row(value)``; a failure says which column of which row it was."""
    try:
        return decode_row(value)
    except InvalidRecord:
        raise
    except ColumnError as exc:
        raise InvalidRecord(f"column {exc.column!r} of {which}: {exc.problem}") from exc
    except Exception as exc:
        raise InvalidRecord(f"{which}: {exc}") from exc


def _event(
    payload: Any,
    key: Row | None,
    decode_row: Callable[[Any], Row],
    where: Coordinates,
    headers: Headers,
    source_of: Callable[[Any], Source] = read_source,
) -> ChangeEvent:
    if not isinstance(payload, dict):
        raise InvalidRecord("the envelope is not a struct")
    op = payload.get("op")
    if op is None:
        raise InvalidRecord("the envelope has no op")
    if op not in OPS:
        raise InvalidRecord(f"op {op!r} is not one of c, u, d, r, t")
    return event_of(
        op,
        source_of(payload.get("source")),
        _row(payload.get("before"), "before", decode_row),
        _row(payload.get("after"), "after", decode_row),
        payload.get("ts_ms"),
        payload.get("transaction"),
        key,
        where,
        headers,
    )


#: ChangeEvent from all its fields, positionally (the extension's maker where built).
_MAKE_EVENT: Final = constructor(ChangeEvent)


def event_of(
    op: Any,
    source: Source,
    before: Row | None,
    after: Row | None,
    ts_ms: Any,
    transaction: Any,
    key: Row | None,
    where: Coordinates,
    headers: Headers,
) -> ChangeEvent:
    """The ChangeEvent of an envelope's parts, once they are checked to go together
    (``transaction``: the block as read, or a Transaction its builder made)."""
    if op in (OP_CREATE, OP_READ, OP_UPDATE) and after is None:
        raise InvalidRecord(f"op {op!r} without an after row")
    if op == OP_DELETE and after is not None:
        raise InvalidRecord("a delete with an after row")
    if op == OP_TRUNCATE and (before is not None or after is not None):
        raise InvalidRecord("a truncate with rows")
    if ts_ms is not None and type(ts_ms) is not int:
        raise InvalidRecord(f"ts_ms must be an integer, not {type(ts_ms).__name__}")
    if transaction is not None and transaction.__class__ is not Transaction:
        transaction = _transaction(transaction)
    op_literal: Op = op
    return _MAKE_EVENT(op_literal, source, before, after, key, ts_ms, transaction, where, headers)


def envelope_builder(names: tuple[str, ...]) -> Callable[..., tuple[Any, ...]] | None:
    """``build(*values)`` of an envelope's fields (the writer's order) to the parts
    :func:`event_of` takes, ``(op, source, before, after, ts_ms, transaction)``, for the
    compiled reader (source and transaction built by their own builders; the rows are
    dicts). ``None`` when the names lack op or source."""
    if "op" not in names or "source" not in names or len(set(names)) != len(names):
        return None
    args = {name: f"_{i}" for i, name in enumerate(names)}
    parts = [args.get(n, "None") for n in ("op", "source", "before", "after", "ts_ms")]
    transaction = args.get("transaction", "None")
    source = "\n".join(
        [
            f"def build({', '.join(args.values())}):",
            f"    if {parts[0]} not in OPS:",
            "        raise InvalidRecord('op is not one of c, u, d, r, t')",
            f"    return ({', '.join(parts)}, {transaction})",
        ]
    )
    env: dict[str, Any] = {"OPS": OPS, "InvalidRecord": InvalidRecord}
    exec(compile(source, "<envelope builder>", "exec"), env)
    built: Callable[..., tuple[Any, ...]] = env["build"]
    return built


#: A table as its source block names it: ``(("schema", "store"), ("table", "orders"))``
#: (MySQL's: ``db`` for ``schema``).
SourceTable: TypeAlias = tuple[tuple[str, str], ...]
#: ``unchanged(key, value) -> bool`` (see ``gate`` of the decoders).
Gate: TypeAlias = Callable[[bytes | None, bytes], bool]
#: ``(value, key's row, where, headers, columns) -> event``: a decoder's value step,
#: always given all five (so an override's ``columns`` needs no default).
ValueStep: TypeAlias = Callable[[bytes, Row | None, Coordinates, Headers, Columns], ChangeEvent]
#: ``(key, value, where, headers, columns) -> event or None``: a decoder's one step.
FastStep: TypeAlias = Callable[
    [bytes | None, bytes, Coordinates, RawHeaders, Columns], ChangeEvent | None
]

#: Debezium's transaction block, field by field (what :func:`transaction_of` takes).
TRANSACTION_FIELDS: Final = ("id", "total_order", "data_collection_order")


def transaction_of(tid: Any, total: Any, order: Any) -> Transaction:
    """:func:`_transaction` of a block read field by field (the compiled reader's builder
    of Debezium's ``id, total_order, data_collection_order``)."""
    if not isinstance(tid, str) or type(total) is not int or type(order) is not int:
        raise InvalidRecord("transaction needs id (string), total_order and data_collection_order")
    return Transaction(tid, total, order)


def _tombstone(key: Row | None, where: Coordinates, headers: Headers) -> Tombstone:
    if key is None:
        raise InvalidRecord("a record with neither key nor value")
    return Tombstone(key, where, headers)


def _guard(where: Coordinates, run: Callable[[], Decoded]) -> Decoded:
    try:
        return run()
    except InvalidRecord as exc:
        raise DecodeError(str(exc), where) from None
    except (DecodeError, TransientError):
        raise
    except Exception as exc:
        raise DecodeError(f"{type(exc).__name__}: {exc}", where) from exc


def _coordinates(where: Coordinates | None) -> Coordinates:
    return NO_COORDINATES if where is None else where


class _BytesDecoder:
    """The order every decoder follows: the key, then the value or a tombstone; any
    failure becomes a :class:`DecodeError` naming the record's coordinates."""

    #: Each decoder's own steps: the key's row, and the value's event.
    _key_bytes: Callable[[bytes], Row]
    _value_bytes: ValueStep
    #: The usual record in one step, or None: then the steps above decide (the same
    #: event, or the error). None: the decoder has no such step.
    _fast: FastStep | None = None

    def gate(
        self, columns: frozenset[str], table: SourceTable, projection: Columns = None
    ) -> Gate | None:
        """``unchanged(key, value)``: whether a record is, for sure and without decoding
        its rows, an update of ``table`` (``((field, value), ...)`` of its source block:
        its schema or db, its table) that changes none of ``columns``, with a key that
        reads and a value this decoder decodes with ``projection`` (the columns it
        keeps); False where that takes decoding. None: this decoder cannot tell (the
        ones that can override it)."""
        return None

    def decode(
        self,
        key: bytes | None,
        value: bytes | None,
        coordinates: Coordinates | None = None,
        headers: RawHeaders = None,
        columns: Columns = None,
    ) -> Decoded:
        """A change event, or a tombstone when ``value`` is ``None``.

        ``columns``, when given, are the only columns the rows need: a decoder may
        leave the others out (the Avro one skips their bytes); the JSON ones keep them.
        """
        where = _coordinates(coordinates)
        if value is not None and self._fast is not None:
            fast = self._fast(key, value, where, headers, columns)
            if fast is not None:
                return fast

        def run() -> Decoded:
            hdrs = headers_tuple(headers)
            key_row = None if key is None else self._key_bytes(key)
            if value is None:
                return _tombstone(key_row, where, hdrs)
            return self._value_bytes(value, key_row, where, hdrs, columns)

        return _guard(where, run)
