"""Telling the three encodings apart by their bytes."""

from __future__ import annotations

from typing import Final, Literal

from bizevents.contracts.envelope import (
    ChangeEvent,
    Headers,
    Row,
)
from bizevents.contracts.exceptions import Coordinates, DecodeError, InvalidRecord
from bizevents.contracts.technical.avro import AvroDecoder
from bizevents.contracts.technical.connect_json import JsonSchemaDecoder, PlainJsonDecoder, _loads
from bizevents.contracts.technical.events import (
    Columns,
    Encoding,
    Gate,
    SchemaLookup,
    SourceTable,
    _BytesDecoder,
)
from bizevents.plumbing.framing import MAGIC_BYTE

# -- auto-detection --------------------------------------------------------------------

_JSON_START: Final = frozenset(b" \t\r\n{")


def _sniff(data: bytes, what: Literal["the key", "the value"]) -> Literal["avro", "json"]:
    if not data:
        raise InvalidRecord(f"{what} is empty (0 bytes)")
    if data[0] == MAGIC_BYTE:
        return "avro"
    if data[0] in _JSON_START and data.lstrip()[:1] == b"{":
        return "json"
    raise InvalidRecord(
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
    except InvalidRecord as exc:
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
        self._fast = None if self._avro is None else self._avro._fast
        self._json = JsonSchemaDecoder()
        self._plain = PlainJsonDecoder()

    def _avro_decoder(self, what: str) -> AvroDecoder:
        if self._avro is None:
            raise InvalidRecord(f"{what} is Confluent Avro, but no schema lookup was configured")
        return self._avro

    def gate(
        self, columns: frozenset[str], table: SourceTable, projection: Columns = None
    ) -> Gate | None:
        avro = self._avro
        return None if avro is None else avro.gate(columns, table, projection)

    def _key_bytes(self, key: bytes) -> Row:
        if _sniff(key, "the key") == "avro":
            return self._avro_decoder("the key").decode_key(key)
        return self._json.decode_key_doc(_loads(key, True, "the key"))

    def _value_bytes(
        self, value: bytes, key: Row | None, where: Coordinates, headers: Headers, columns: Columns
    ) -> ChangeEvent:
        if _sniff(value, "the value") == "avro":
            return self._avro_decoder("the value").decode_value(value, key, where, headers, columns)
        # JsonConverter writes "schema" first; only then parse numbers exactly, so a
        # plain document keeps its floats as JSON gives them and is parsed once.
        exact = value.lstrip().startswith(b'{"schema"')
        doc = _loads(value, exact, "the value")
        if isinstance(doc, dict) and doc.keys() == {"schema", "payload"}:
            if not exact:
                doc = _loads(value, True, "the value")
            return self._json.decode_value_doc(doc, key, where, headers)
        return self._plain.decode_value_doc(doc, key, where, headers)
