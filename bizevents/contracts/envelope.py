"""The technical change event: one row change as Debezium describes it.

This is the input contract of every translator. The classes are frozen dataclasses
with slots, so building one costs little more than a tuple: decoders (in
:mod:`bizevents.contracts.technical`) validate the wire data once and then construct these
without further checks. Rows are typed as read-only ``Mapping``; decoders hand over
fresh dicts that nothing else holds, so nothing needs copying.

Column values are the Python types of :mod:`bizevents.contracts.logical` (``Decimal``, aware
``datetime``, ``date``, ``time``, ``UUID``, ``JsonDocument``, ``bytes``, enum labels,
lists, ``UNAVAILABLE`` for an unchanged TOASTed value) or ``None`` for SQL NULL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias

from bizevents.contracts.exceptions import Coordinates

__all__ = [
    "NO_COORDINATES",
    "NO_EXTRA",
    "OPS",
    "OP_CREATE",
    "OP_DELETE",
    "OP_READ",
    "OP_TRUNCATE",
    "OP_UPDATE",
    "SNAPSHOT_FALSE",
    "ChangeEvent",
    "Headers",
    "MySqlPosition",
    "Op",
    "PgPosition",
    "Position",
    "Row",
    "Source",
    "Tombstone",
    "Transaction",
    "headers_tuple",
]

Op: TypeAlias = Literal["c", "u", "d", "r", "t"]
OP_CREATE: Final = "c"
OP_UPDATE: Final = "u"
OP_DELETE: Final = "d"
OP_READ: Final = "r"  # a row read by a snapshot
OP_TRUNCATE: Final = "t"
OPS: Final[frozenset[str]] = frozenset({OP_CREATE, OP_UPDATE, OP_DELETE, OP_READ, OP_TRUNCATE})

#: Debezium's ``snapshot`` values other than this one ("true", "last", "first",
#: "first_in_data_collection", "last_in_data_collection", "incremental") all mean the
#: row was read by a snapshot rather than from the log.
SNAPSHOT_FALSE: Final = "false"

Row: TypeAlias = Mapping[str, Any]
Headers: TypeAlias = tuple[tuple[str, bytes | None], ...]
NO_COORDINATES: Final = Coordinates()
NO_EXTRA: Final[Mapping[str, Any]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PgPosition:
    """Where a PostgreSQL change sits in the WAL."""

    lsn: int | None
    tx_id: int | None = None
    xmin: int | None = None

    def __str__(self) -> str:
        if self.lsn is None:
            return "lsn:?"
        return f"{self.lsn >> 32:X}/{self.lsn & 0xFFFFFFFF:X}"


@dataclass(frozen=True, slots=True)
class MySqlPosition:
    """Where a MySQL/MariaDB change sits in the binlog."""

    file: str
    pos: int
    row: int = 0
    server_id: int = 0
    gtid: str | None = None
    thread: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}:{self.row}"


Position: TypeAlias = PgPosition | MySqlPosition


@dataclass(frozen=True, slots=True)
class Source:
    """Debezium's ``source`` block: which database row this is and where it was read.

    ``schema`` is ``None`` for MySQL, whose topics use the database name instead.
    ``extra`` keeps any other source fields the producer wrote (``ts_us``, ``query``,
    connector-specific ones) as they came.
    """

    connector: str
    name: str
    db: str
    schema: str | None
    table: str | None
    ts_ms: int
    snapshot_raw: str = SNAPSHOT_FALSE
    position: Position | None = None
    version: str | None = None
    sequence: str | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: NO_EXTRA)

    @property
    def snapshot(self) -> bool:
        """Whether a snapshot (initial, incremental or blocking) read this row."""
        return self.snapshot_raw != SNAPSHOT_FALSE

    @property
    def tx_id(self) -> int | str | None:
        """PostgreSQL's ``txId``, or MySQL's GTID when there is one."""
        pos = self.position
        if isinstance(pos, PgPosition):
            return pos.tx_id
        if isinstance(pos, MySqlPosition):
            return pos.gtid
        return None

    @property
    def namespace(self) -> str:
        """The schema, or for MySQL the database: the middle part of the topic name."""
        return self.schema if self.schema is not None else self.db

    @property
    def qualified_table(self) -> str:
        """``schema.table`` (``db.table`` for MySQL)."""
        return f"{self.namespace}.{self.table}"


@dataclass(frozen=True, slots=True)
class Transaction:
    """Debezium's optional ``transaction`` block."""

    id: str
    total_order: int
    data_collection_order: int


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One row change (or a truncate) with where it came from.

    ``key`` is the primary key's columns, ``None`` for a table without one. For
    ``c``/``r`` only ``after`` is set, for ``u`` both (``before`` is ``None`` when
    PostgreSQL's replica identity does not log old values), for ``d`` only ``before``,
    for ``t`` neither.
    """

    op: Op
    source: Source
    before: Row | None = None
    after: Row | None = None
    key: Row | None = None
    ts_ms: int | None = None
    transaction: Transaction | None = None
    coordinates: Coordinates = NO_COORDINATES
    headers: Headers = ()

    @property
    def is_tombstone(self) -> bool:
        return False

    @property
    def position(self) -> Position | None:
        return self.source.position


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A key with a null value: the record after a delete that lets compaction drop it."""

    key: Row
    coordinates: Coordinates = NO_COORDINATES
    headers: Headers = ()

    @property
    def is_tombstone(self) -> bool:
        return True


def headers_tuple(headers: Sequence[tuple[str, bytes | str | None]] | None) -> Headers:
    """Kafka headers as an immutable tuple (confluent-kafka gives a list or ``None``)."""
    if not headers:
        return ()
    return tuple((str(k), _header_bytes(v)) for k, v in headers)


def _header_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return bytes(value)
