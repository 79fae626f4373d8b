"""Column types of technical events and their conversion to and from the wire.

Debezium (through Kafka Connect) writes a column's value as a *literal* type (int64,
string, bytes, struct, ...) and says what it means with a *semantic* name
(``io.debezium.time.MicroTimestamp``, ``org.apache.kafka.connect.data.Decimal``, ...).
This package turns both into one :class:`ColumnType`, and gives, per column type, the
function that turns a wire value into the Python value a translator author expects
(``Decimal``, aware ``datetime``, ``date``, ``time``, ``UUID``, :class:`JsonDocument`,
``bytes``, labels for enums, :data:`UNAVAILABLE` for an unchanged TOASTed value) and back.

Two wires exist: ``"avro"`` (values as fastavro reads and writes them: bytes stay
bytes, Avro logical types are already converted by fastavro) and ``"json"`` (values as
Kafka Connect's JsonConverter writes them: bytes and decimals in base64).

Timestamps without a zone (``io.debezium.time.Timestamp``, ``MicroTimestamp``,
``NanoTimestamp``, Connect's ``Timestamp``) carry the column's wall-clock value counted
from the epoch as if it were UTC; they become aware datetimes in UTC whose wall clock is
the column's. That keeps every datetime a translator sees aware, and is exact: nothing
is shifted by the database's or the worker's zone.

Everything here is pure; a conversion that fails raises ``ValueError``/``TypeError``
(or ``OverflowError``), which the decoders turn into ``DecodeError``.
"""

from __future__ import annotations

from bizevents.contracts.logical.decode import ColumnError, decoder_for, struct_decoder
from bizevents.contracts.logical.encode import encoder_for, struct_encoder
from bizevents.contracts.logical.from_schemas import (
    avro_field,
    column_type_from_avro,
    column_type_from_connect,
    connect_field,
)
from bizevents.contracts.logical.model import (
    UNAVAILABLE,
    UNAVAILABLE_MARKER,
    ColumnType,
    Converter,
    Field,
    JsonDocument,
    Kind,
    Unavailable,
    Wire,
)
from bizevents.contracts.logical.placeholder import unavailable_placeholder
from bizevents.contracts.logical.scalars import (
    date_from_days,
    days_from_date,
    time_from_micros,
    time_to_micros,
    timestamp_from_micros,
    timestamp_to_micros,
)

__all__ = [
    "UNAVAILABLE",
    "UNAVAILABLE_MARKER",
    "ColumnError",
    "ColumnType",
    "Converter",
    "Field",
    "JsonDocument",
    "Kind",
    "Unavailable",
    "Wire",
    "avro_field",
    "column_type_from_avro",
    "column_type_from_connect",
    "connect_field",
    "date_from_days",
    "days_from_date",
    "decoder_for",
    "encoder_for",
    "struct_decoder",
    "struct_encoder",
    "time_from_micros",
    "time_to_micros",
    "timestamp_from_micros",
    "timestamp_to_micros",
    "unavailable_placeholder",
]
