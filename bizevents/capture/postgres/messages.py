"""pgoutput's messages as frozen dataclasses (what :mod:`bizevents.capture.postgres.pgoutput`
decodes), their tuple values, LSNs as PostgreSQL writes them, and the relation cache a
stream keeps because row changes name their table by oid only. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal, TypeAlias

from bizevents.contracts.logical import UNAVAILABLE, Unavailable

__all__ = [
    "PG_EPOCH_OFFSET_US",
    "UNCHANGED_TOAST",
    "Begin",
    "Column",
    "Commit",
    "Delete",
    "Insert",
    "LogicalMessage",
    "Message",
    "Origin",
    "Relation",
    "RelationCache",
    "RowChange",
    "StreamAbort",
    "StreamCommit",
    "StreamStart",
    "StreamStop",
    "Truncate",
    "TupleData",
    "TupleValue",
    "TypeInfo",
    "Update",
    "format_lsn",
    "parse_lsn",
]


#: An unchanged TOASTed column (TupleData kind ``'u'``): the value exists but the
#: server did not send it. Distinct from ``None`` (SQL NULL). It is the contracts
#: layer's ``UNAVAILABLE``, so the technical-event encoders write Debezium's
#: ``__debezium_unavailable_value`` for it.
UNCHANGED_TOAST: Final = UNAVAILABLE

TupleValue: TypeAlias = str | bytes | Unavailable | None
TupleData: TypeAlias = tuple[TupleValue, ...]

#: Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 UTC).
PG_EPOCH_OFFSET_US: Final = 946_684_800_000_000
_UNIX_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

ReplicaIdentity = Literal["d", "n", "f", "i"]
OldKind = Literal["K", "O"]


def format_lsn(lsn: int) -> str:
    """An LSN in PostgreSQL's ``XXX/XXX`` notation."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    """The inverse of :func:`format_lsn`."""
    high, sep, low = text.partition("/")
    if not sep:
        raise ValueError(f"{text!r} is not an LSN (expected XXX/XXX)")
    return (int(high, 16) << 32) | int(low, 16)


def _ts(micros: int) -> datetime:
    return _UNIX_EPOCH + timedelta(microseconds=micros)


# -- messages ----------------------------------------------------------------------


class _Committed:
    """A message that carries its transaction's commit time (``commit_ts``)."""

    __slots__ = ()
    commit_ts: int

    @property
    def commit_time(self) -> datetime:
        """``commit_ts`` as an aware UTC datetime."""
        return _ts(self.commit_ts)


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a :class:`Relation`; ``flags`` bit 1 marks a replica-identity key."""

    flags: int
    name: str
    type_oid: int
    type_modifier: int

    @property
    def is_key(self) -> bool:
        """Whether the column is part of the table's replica identity."""
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class Relation:
    """``R``: a table's shape as the stream will send its rows.

    ``namespace`` is the schema (``"pg_catalog"`` where the protocol sends an empty
    string); ``replica_identity`` is ``d`` (default: primary key), ``n`` (nothing),
    ``f`` (full row) or ``i`` (an index).
    """

    oid: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[Column, ...]
    xid: int | None = None

    @property
    def key_columns(self) -> tuple[Column, ...]:
        """The replica-identity columns, in table order."""
        return tuple(c for c in self.columns if c.flags & 1)

    @property
    def qualified_name(self) -> str:
        """``schema.table``."""
        return f"{self.namespace}.{self.name}"


@dataclass(frozen=True, slots=True)
class Begin(_Committed):
    """``B``: a transaction starts; its commit will be at ``final_lsn``.

    ``commit_ts`` is microseconds since the Unix epoch (the protocol counts from
    2000-01-01; the offset is applied here).
    """

    final_lsn: int
    commit_ts: int
    xid: int


@dataclass(frozen=True, slots=True)
class Commit(_Committed):
    """``C``: the transaction committed at ``commit_lsn``; ``end_lsn`` is past its record.

    ``end_lsn`` is the position to confirm to the server once every change of the
    transaction is safely stored.
    """

    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int


@dataclass(frozen=True, slots=True)
class Origin:
    """``O``: the transaction was replicated from another node (replication origin)."""

    commit_lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class TypeInfo:
    """``Y``: a non-built-in data type that a following Relation uses."""

    oid: int
    namespace: str
    name: str
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Insert:
    """``I``: a new row."""

    relation: Relation
    new: TupleData
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Update:
    """``U``: a changed row.

    ``old`` is the old key (``old_kind == "K"``, when the key changed) or the whole old
    row (``"O"``, with ``REPLICA IDENTITY FULL``); both are ``None`` otherwise. In
    ``new``, :data:`UNCHANGED_TOAST` marks TOASTed values the update did not touch.
    """

    relation: Relation
    old: TupleData | None
    old_kind: OldKind | None
    new: TupleData
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Delete:
    """``D``: a removed row: its key (``old_kind == "K"``) or its whole row (``"O"``).

    With the key alone, the non-key positions of ``old`` are ``None``.
    """

    relation: Relation
    old: TupleData
    old_kind: OldKind
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Truncate:
    """``T``: ``TRUNCATE`` of one or more tables."""

    relations: tuple[Relation, ...]
    options: int
    xid: int | None = None

    @property
    def cascade(self) -> bool:
        """``TRUNCATE ... CASCADE``."""
        return bool(self.options & 1)

    @property
    def restart_identity(self) -> bool:
        """``TRUNCATE ... RESTART IDENTITY``."""
        return bool(self.options & 2)


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    """``M``: a message written by ``pg_logical_emit_message`` (slot option ``messages``)."""

    transactional: bool
    lsn: int
    prefix: str
    content: bytes
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class StreamStart:
    """``S`` (protocol 2+): a chunk of an in-progress transaction follows."""

    xid: int
    first_segment: bool


@dataclass(frozen=True, slots=True)
class StreamStop:
    """``E`` (protocol 2+): the chunk started by the last StreamStart ends."""


@dataclass(frozen=True, slots=True)
class StreamCommit:
    """``c`` (protocol 2+): a streamed transaction committed."""

    xid: int
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int


@dataclass(frozen=True, slots=True)
class StreamAbort:
    """``A`` (protocol 2+): a streamed (sub)transaction aborted; discard its changes.

    ``abort_lsn``/``abort_ts`` are sent only by protocol 4 with parallel streaming.
    """

    xid: int
    subxid: int
    abort_lsn: int | None = None
    abort_ts: int | None = None


RowChange: TypeAlias = Insert | Update | Delete
Message: TypeAlias = (
    Begin
    | Commit
    | Origin
    | Relation
    | TypeInfo
    | Insert
    | Update
    | Delete
    | Truncate
    | LogicalMessage
    | StreamStart
    | StreamStop
    | StreamCommit
    | StreamAbort
)


# -- the relation cache -----------------------------------------------------------


class RelationCache:
    """Relations (oid → :class:`Relation`) and types (oid → :class:`TypeInfo`) seen so far.

    A Relation message replaces the cached one for its oid; changes decoded before it
    keep the relation they were decoded with.
    """

    __slots__ = ("_relations", "_types")

    def __init__(self) -> None:
        self._relations: dict[int, Relation] = {}
        self._types: dict[int, TypeInfo] = {}

    def put(self, relation: Relation) -> None:
        """Remember ``relation`` (replacing an older shape of the same oid)."""
        self._relations[relation.oid] = relation

    def put_type(self, info: TypeInfo) -> None:
        """Remember a type described by a Type message."""
        self._types[info.oid] = info

    def get(self, oid: int) -> Relation | None:
        """The relation of ``oid``, or ``None`` if none was described."""
        return self._relations.get(oid)

    def type_info(self, oid: int) -> TypeInfo | None:
        """The type of ``oid`` a Type message described, or ``None``."""
        return self._types.get(oid)

    def __contains__(self, oid: object) -> bool:
        return oid in self._relations

    def __iter__(self) -> Iterator[Relation]:
        return iter(list(self._relations.values()))

    def __len__(self) -> int:
        return len(self._relations)
