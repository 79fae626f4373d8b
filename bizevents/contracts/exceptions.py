"""Errors of the contracts package: decoding, contracts, schema registry."""

from __future__ import annotations

from dataclasses import dataclass

from bizevents.plumbing.errors import BizeventsError, TerminalError


@dataclass(frozen=True, slots=True)
class Coordinates:
    """Where a record came from: enough to find it again in Kafka."""

    topic: str | None = None
    partition: int | None = None
    offset: int | None = None

    def __str__(self) -> str:
        if self.topic is None:
            return "an unnamed record"
        return f"{self.topic}[{self.partition}]@{self.offset}"


class DecodeError(TerminalError):
    """A record's bytes do not decode into a technical change event.

    Carries the coordinates of the record and a sentence saying what was wrong,
    so the dead-letter route can keep both beside the original bytes.
    """

    def __init__(self, reason: str, where: Coordinates | None = None) -> None:
        self.reason = reason
        self.where = where or Coordinates()
        super().__init__(f"cannot decode {self.where}: {reason}")


class ContractError(TerminalError):
    """A business event does not satisfy its contract (schema or model)."""


class InvalidSchemaError(ContractError):
    """A schema is not valid Avro (bad JSON, unknown type, default of the wrong type)."""


class EncodeError(TerminalError):
    """A change event cannot be written in the asked encoding (a value that does not
    fit its column type, a missing non-nullable column)."""


class IncompatibleSchemaError(ContractError):
    """A schema change breaks the compatibility level of its subject."""


class RegistryError(BizeventsError):
    """The schema registry refused a request; ``error_code`` is Confluent's code."""

    def __init__(self, message: str, *, status: int, error_code: int) -> None:
        self.status = status
        self.error_code = error_code
        super().__init__(message)


class InvalidRecord(Exception):
    """Raised inside the technical decoders; their ``decode`` turns it into a
    :class:`DecodeError` naming the record's coordinates."""
