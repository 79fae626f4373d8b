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
raises :class:`~bizevents.contracts.exceptions.DecodeError` and nothing else for bad input,
naming the record's coordinates and what was wrong. The one exception that passes
through is a :class:`~bizevents.plumbing.errors.TransientError` from the schema lookup
(a registry that cannot be reached is not a bad record).

All of this is pure: the schema lookup is injected and nothing here does I/O.
"""

from __future__ import annotations

from bizevents.contracts.exceptions import EncodeError
from bizevents.contracts.technical.avro import AvroDecoder
from bizevents.contracts.technical.connect_json import JsonSchemaDecoder, PlainJsonDecoder
from bizevents.contracts.technical.detect import AutoDecoder, detect_encoding
from bizevents.contracts.technical.encode import AVRO_OPS, AvroEncoder, JsonEncoder
from bizevents.contracts.technical.events import Decoded, Encoding, SchemaLookup
from bizevents.contracts.technical.schemas import (
    EnvelopeSchemas,
    TableSchema,
    envelope_avro_schema,
    envelope_connect_schema,
)
from bizevents.contracts.technical.source import Connector
from bizevents.plumbing.framing import MAGIC_BYTE

__all__ = [
    "AVRO_OPS",
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
