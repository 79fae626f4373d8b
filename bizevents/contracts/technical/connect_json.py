"""Debezium JSON technical records, with the embedded Kafka Connect schema or without."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any, ClassVar, Final

from bizevents.contracts.envelope import (
    ChangeEvent,
    Headers,
    Row,
)
from bizevents.contracts.exceptions import Coordinates, InvalidRecord
from bizevents.contracts.logical import (
    UNAVAILABLE,
    UNAVAILABLE_MARKER,
    ColumnError,
    column_type_from_connect,
    connect_field,
    struct_decoder,
)
from bizevents.contracts.technical.events import Columns, _BytesDecoder, _decoded, _event

_UNAVAILABLE_B64: Final = "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="


# -- JSON ----------------------------------------------------------------------------


def _loads(data: bytes, exact: bool, what: str) -> Any:
    # Numbers with fractions parse as Decimal when a schema will say what they are, so
    # a decimal written as a number (decimal.format=NUMERIC) stays exact.
    try:
        if exact:
            return json.loads(data, parse_float=Decimal)
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRecord(f"{what} is not valid JSON ({exc})") from exc


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
                    raise InvalidRecord(f"column {name!r} of {which} is missing from {other_name}")
    if key is not None:
        for which, part in (("before", before), ("after", after)):
            missing = [] if part is None else [name for name in key if name not in part]
            if missing:
                raise InvalidRecord(f"column {missing[0]!r} of the key is missing from {which}")
    return event


class _ConnectPlan:
    __slots__ = ("decode_row", "schema")

    def __init__(self, schema: Any, decode_row: Callable[[Any], Row]) -> None:
        self.schema = schema
        self.decode_row = decode_row


def _connect_envelope_plan(schema: Any) -> _ConnectPlan:
    if not isinstance(schema, dict) or schema.get("type") != "struct":
        raise InvalidRecord("the embedded schema is not a struct")
    members = schema.get("fields")
    if not isinstance(members, list):
        raise InvalidRecord("the embedded schema has no fields")
    by_name = {m.get("field"): m for m in members if isinstance(m, dict)}
    if "op" not in by_name or "source" not in by_name:
        raise InvalidRecord("the embedded schema is not a Debezium envelope (no op or source)")
    row = by_name.get("after") or by_name.get("before")
    if row is None:
        return _ConnectPlan(schema, struct_decoder((), "json"))
    try:
        fields = column_type_from_connect(row).fields or ()
    except (TypeError, ValueError) as exc:
        raise InvalidRecord(f"the embedded row schema is malformed: {exc}") from exc
    return _ConnectPlan(schema, struct_decoder(fields, "json"))


def _connect_key_plan(schema: Any) -> _ConnectPlan:
    if not isinstance(schema, dict) or schema.get("type") != "struct":
        raise InvalidRecord("the key's embedded schema is not a struct")
    try:
        raw = schema.get("fields")
        if not isinstance(raw, list):
            raise TypeError("no fields")
        fields = [connect_field(f) for f in raw]
    except (TypeError, ValueError) as exc:
        raise InvalidRecord(f"the key's embedded schema is malformed: {exc}") from exc
    return _ConnectPlan(schema, struct_decoder(fields, "json"))


def _key_parts(doc: Any) -> tuple[Any, dict[str, Any]]:
    """A key document's embedded schema (None: it has none) and its row object."""
    if not isinstance(doc, dict):
        raise InvalidRecord("the key is not a JSON object")
    if doc.keys() != {"schema", "payload"}:
        return None, doc
    payload = doc["payload"]
    if not isinstance(payload, dict):
        raise InvalidRecord("the key's payload is not an object")
    return doc["schema"], payload


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
        self, value: bytes, key: Row | None, where: Coordinates, headers: Headers, columns: Columns
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
        schema, row = _key_parts(doc)
        decode_row = _plain_row if schema is None else self._key_plan(schema).decode_row
        return _decoded(row, "the key", decode_row)

    def decode_value_doc(
        self, doc: Any, key: Row | None, where: Coordinates, headers: Headers
    ) -> ChangeEvent:
        if not isinstance(doc, dict) or "schema" not in doc or "payload" not in doc:
            raise InvalidRecord("not a {schema, payload} document")
        if doc["schema"] is None:
            return _plain_event(doc["payload"], key, where, headers)
        plan = self._value_plan(doc["schema"])
        return _event(doc["payload"], key, plan.decode_row, where, headers)


class PlainJsonDecoder(_JsonDocumentDecoder):
    """Decodes plain Debezium JSON (``schemas.enable=false``): the payload alone.

    Values stay as JSON gives them (see the module docstring); only the marker of an
    unavailable TOASTed value becomes :data:`~bizevents.contracts.logical.UNAVAILABLE`. A
    ``{schema, payload}`` document is accepted too, its schema ignored.
    """

    def decode_key_doc(self, doc: Any) -> Row:
        return _decoded(_key_parts(doc)[1], "the key", _plain_row)

    def decode_value_doc(
        self, doc: Any, key: Row | None, where: Coordinates, headers: Headers
    ) -> ChangeEvent:
        if isinstance(doc, dict) and doc.keys() == {"schema", "payload"}:
            doc = doc["payload"]
        return _plain_event(doc, key, where, headers)
