"""Errors of the capture package.

Nearly everything here is terminal: a malformed replication message or a column
value that cannot be converted will be just as malformed on the next attempt, so the
capture run stops rather than retrying. The exception is :class:`KafkaDeliveryError`.
"""

from __future__ import annotations

from bizevents.plumbing.errors import TerminalError, TransientError

__all__ = [
    "CaptureError",
    "KafkaDeliveryError",
    "ProtocolError",
    "TableNotCapturableError",
    "UnknownRelationError",
    "UnsupportedTypeError",
    "ValueConversionError",
]


class CaptureError(TerminalError):
    """Base class of the errors the capture package raises on purpose."""


class ProtocolError(CaptureError):
    """A logical replication message does not follow the pgoutput protocol.

    ``message_type`` is the message's first byte as a character (``"?"`` for an empty
    message) and ``offset`` the byte offset in the message where decoding failed.
    """

    def __init__(self, message_type: str, offset: int, reason: str) -> None:
        self.message_type = message_type
        self.offset = offset
        self.reason = reason
        super().__init__(f"malformed pgoutput message {message_type!r} at byte {offset}: {reason}")


class UnknownRelationError(ProtocolError):
    """A row change names a relation oid that no Relation message described first."""

    def __init__(self, message_type: str, offset: int, relation_oid: int) -> None:
        self.relation_oid = relation_oid
        reason = f"relation oid {relation_oid} was not described by a Relation message"
        super().__init__(message_type, offset, reason)


class UnsupportedTypeError(CaptureError):
    """A column's PostgreSQL type has no mapping (and text fallback is off)."""

    def __init__(self, table: str, column: str, type_name: str) -> None:
        self.table = table
        self.column = column
        self.type_name = type_name
        super().__init__(
            f"column {table}.{column} has type {type_name}, which capture does not map; "
            "enable the text fallback to capture it as its text form"
        )


class ValueConversionError(CaptureError):
    """A column value's text form does not convert to its type's Python value."""

    def __init__(self, table: str, column: str, type_name: str, text: str, reason: str) -> None:
        self.table = table
        self.column = column
        self.type_name = type_name
        self.text = text
        self.reason = reason
        shown = text if len(text) <= 80 else text[:77] + "..."
        super().__init__(
            f"column {table}.{column} ({type_name}): cannot convert {shown!r}: {reason}"
        )


class TableNotCapturableError(CaptureError):
    """A configured table cannot be captured (missing, or no way to key its deletes).

    The message says how to fix it (for example ``ALTER TABLE ... REPLICA IDENTITY FULL``).
    """

    def __init__(self, table: str, message: str) -> None:
        self.table = table
        super().__init__(message)


class DatabaseAccessError(CaptureError):
    """The DSN is malformed or the database refused the credentials: retrying won't help."""


class DatabaseUnreachableError(CaptureError):
    """A one-shot command (``verify``) found no database answering at the DSN's address."""


class KafkaDeliveryError(TransientError):
    """Kafka refused or could not take an event; the run stops without confirming it.

    The slot still holds everything not confirmed, so a restart re-sends it.
    """
