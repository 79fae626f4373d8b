"""A decoder of PostgreSQL's ``pgoutput`` logical replication messages.

``pgoutput`` is the output plugin built into PostgreSQL (10+) that logical replication
itself uses; a replication slot created with it streams each committed transaction as
``Begin``, row changes (``Insert``/``Update``/``Delete``/``Truncate``) and ``Commit``
messages, preceded by a ``Relation`` message whenever a table is first seen or its
columns change. The byte layout is PostgreSQL's "Logical Replication Message Formats".

:class:`PgOutputDecoder` turns the payload of one replication message (the bytes of
psycopg2's ``ReplicationMessage.payload`` with ``decode=False``) into one frozen
dataclass. It keeps the one piece of state the protocol needs, a
:class:`RelationCache`, because row changes name their table by oid only.

Protocol version 1 is decoded completely. Version 2's streamed in-progress
transactions (``Stream Start/Stop/Commit/Abort`` and the xid that row changes carry
inside a stream) are decoded too; version 3's two-phase messages are refused with a
:class:`~bizevents.capture.exceptions.ProtocolError` naming them.

Tuple values come back as the protocol gives them: ``None`` for SQL NULL,
:data:`UNCHANGED_TOAST` for a TOASTed value the update did not touch (the server does
not send it), ``str`` for the text format and ``bytes`` for the binary format.
:mod:`bizevents.capture.postgres.types` turns text into typed Python values.

Pure: no I/O. Malformed input raises :class:`~bizevents.capture.exceptions.ProtocolError` and
nothing else, naming the message type and the byte offset.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection
from typing import Final

from bizevents.capture.exceptions import ProtocolError, UnknownRelationError
from bizevents.capture.postgres.messages import (
    PG_EPOCH_OFFSET_US,
    UNCHANGED_TOAST,
    Begin,
    Column,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    OldKind,
    Origin,
    Relation,
    RelationCache,
    RowChange,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    TupleValue,
    TypeInfo,
    Update,
)
from bizevents.contracts.logical import UNAVAILABLE

__all__ = ["PgOutputDecoder", "blank_values"]

# -- decoding ----------------------------------------------------------------------

_U8: Final = struct.Struct(">B")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_U32: Final = struct.Struct(">I")
_BEGIN: Final = struct.Struct(">QqI")
_COMMIT: Final = struct.Struct(">BQQq")
_ORIGIN: Final = struct.Struct(">Q")
_TYPMOD: Final = struct.Struct(">Ii")
_U32_CHAR: Final = struct.Struct(">Ic")
_I32_B: Final = struct.Struct(">iB")
_MESSAGE: Final = struct.Struct(">BQ")
_STREAM_START: Final = struct.Struct(">IB")
_STREAM_COMMIT: Final = struct.Struct(">IBQQq")
_STREAM_ABORT: Final = struct.Struct(">II")
_STREAM_ABORT_V4: Final = struct.Struct(">IIQq")

_N, _U, _T, _B = ord("n"), ord("u"), ord("t"), ord("b")

_TWO_PHASE: Final = {
    "b": "Begin Prepare",
    "P": "Prepare",
    "K": "Commit Prepared",
    "r": "Rollback Prepared",
    "p": "Stream Prepare",
}

#: What escapes a parser on short or malformed input before it is made a ProtocolError.
_LOW_LEVEL = (struct.error, IndexError, ValueError)


def _reason(exc: Exception) -> str:
    if isinstance(exc, struct.error | IndexError):
        return "message ends too early"
    if isinstance(exc, UnicodeDecodeError):
        return "a string is not valid UTF-8"
    if isinstance(exc, ValueError) and "subsection not found" in str(exc):
        return "a string has no terminating NUL byte"
    return str(exc)


def _cstring(data: bytes, pos: int) -> tuple[str, int]:
    stop = data.index(0, pos)
    return data[pos:stop].decode(), stop + 1


def _python_tuple_data(kind: str, data: bytes, pos: int) -> tuple[TupleData, int]:
    """One TupleData starting at ``pos``; returns it and the position after it. The
    reference of the compiled ``_tuples.tuple_data``, and what runs without it."""
    end = len(data)
    try:
        (count,) = _I16.unpack_from(data, pos)
        if count < 0:
            raise ProtocolError(kind, pos, f"negative column count {count}")
        pos += 2
        values: list[TupleValue] = []
        append = values.append
        length_at = _I32.unpack_from
        for _ in range(count):
            k = data[pos]
            if k in (_T, _B):
                (length,) = length_at(data, pos + 1)
                start = pos + 5
                stop = start + length
                if length < 0 or stop > end:
                    raise ProtocolError(kind, start - 4, f"bad value length {length}")
                append(data[start:stop].decode() if k == _T else data[start:stop])
                pos = stop
            elif k == _N:
                append(None)
                pos += 1
            elif k == _U:
                append(UNAVAILABLE)
                pos += 1
            else:
                raise ProtocolError(kind, pos, f"unknown TupleData kind {k!r}")
    except _LOW_LEVEL as exc:
        raise ProtocolError(kind, pos, _reason(exc)) from None
    return tuple(values), pos


try:  # capture/postgres/_tuples.c, built with the others by scripts/setup
    from bizevents.capture.postgres import _tuples  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - without a C compiler
    _tuples = None

#: Whether the compiled tuple reader runs (tests/capture/postgres/test_tuples_native.py).
COMPILED: Final = _tuples is not None


def _compiled_tuple_data(kind: str, data: bytes, pos: int) -> tuple[TupleData, int]:
    try:
        values, end = _tuples.tuple_data(data, pos, UNAVAILABLE)
    except ValueError as exc:  # the Python's offset and reason
        offset, reason = exc.args
        raise ProtocolError(kind, offset, reason) from None
    return values, end


_tuple_data: Final = _compiled_tuple_data if COMPILED else _python_tuple_data


class PgOutputDecoder:
    """Decodes pgoutput messages one at a time, keeping the relation cache.

    ``protocol_version`` is the ``proto_version`` the slot was started with; it only
    matters to refuse messages a version does not have. A decoder belongs to one
    replication stream: streams share no state.
    """

    __slots__ = ("_dispatch", "_in_stream", "protocol_version", "relations")

    def __init__(self, protocol_version: int = 1, relations: RelationCache | None = None) -> None:
        if protocol_version < 1:
            raise ValueError(f"pgoutput protocol versions start at 1, not {protocol_version}")
        self.protocol_version = protocol_version
        self.relations = relations if relations is not None else RelationCache()
        self._in_stream = False
        self._dispatch: dict[int, Callable[[bytes], Message]] = {
            ord("B"): self._begin,
            ord("C"): self._commit,
            ord("O"): self._origin,
            ord("R"): self._relation,
            ord("Y"): self._type,
            ord("I"): self._insert,
            ord("U"): self._update,
            ord("D"): self._delete,
            ord("T"): self._truncate,
            ord("M"): self._message,
            ord("S"): self._stream_start,
            ord("E"): self._stream_stop,
            ord("c"): self._stream_commit,
            ord("A"): self._stream_abort,
        }

    def decode(self, payload: bytes | bytearray | memoryview) -> Message:
        """The message in ``payload`` (one whole pgoutput message)."""
        data = payload if type(payload) is bytes else bytes(payload)
        if not data:
            raise ProtocolError("?", 0, "empty message")
        parse = self._dispatch.get(data[0])
        if parse is None:
            tag = chr(data[0])
            if tag in _TWO_PHASE:
                raise ProtocolError(
                    tag, 0, f"{_TWO_PHASE[tag]} (two-phase commit, protocol 3) is not supported"
                )
            raise ProtocolError(tag, 0, "unknown message type")
        return parse(data)

    # Each parser keeps ``pos`` at the start of the field being read, so that the
    # error names the offset where the message stopped making sense.

    def _xid(self, data: bytes, pos: int) -> tuple[int | None, int]:
        if not self._in_stream:
            return None, pos
        return _U32.unpack_from(data, pos)[0], pos + 4

    def _relation_for(self, tag: str, oid: int, pos: int) -> Relation:
        relation = self.relations.get(oid)
        if relation is None:
            raise UnknownRelationError(tag, pos, oid)
        return relation

    @staticmethod
    def _done(tag: str, data: bytes, pos: int) -> None:
        if pos != len(data):
            raise ProtocolError(tag, pos, f"{len(data) - pos} bytes after the end of the message")

    def _begin(self, data: bytes) -> Begin:
        try:
            final_lsn, ts, xid = _BEGIN.unpack_from(data, 1)
        except _LOW_LEVEL as exc:
            raise ProtocolError("B", 1, _reason(exc)) from None
        self._done("B", data, 1 + _BEGIN.size)
        return Begin(final_lsn, ts + PG_EPOCH_OFFSET_US, xid)

    def _commit(self, data: bytes) -> Commit:
        try:
            flags, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(data, 1)
        except _LOW_LEVEL as exc:
            raise ProtocolError("C", 1, _reason(exc)) from None
        self._done("C", data, 1 + _COMMIT.size)
        return Commit(flags, commit_lsn, end_lsn, ts + PG_EPOCH_OFFSET_US)

    def _origin(self, data: bytes) -> Origin:
        pos = 1
        try:
            (lsn,) = _ORIGIN.unpack_from(data, pos)
            pos += 8
            name, pos = _cstring(data, pos)
        except _LOW_LEVEL as exc:
            raise ProtocolError("O", pos, _reason(exc)) from None
        self._done("O", data, pos)
        return Origin(lsn, name)

    def _named(self, tag: str, data: bytes) -> tuple[int | None, int, str, str, int]:
        """A Relation's or a Type's opening: the xid (inside a stream), the oid, the
        namespace (``pg_catalog`` when empty) and the name; the position after them."""
        pos = 1
        try:
            xid, pos = self._xid(data, pos)
            (oid,) = _U32.unpack_from(data, pos)
            pos += 4
            namespace, pos = _cstring(data, pos)
            name, pos = _cstring(data, pos)
        except _LOW_LEVEL as exc:
            raise ProtocolError(tag, pos, _reason(exc)) from None
        return xid, oid, namespace or "pg_catalog", name, pos

    def _relation(self, data: bytes) -> Relation:
        xid, oid, namespace, name, pos = self._named("R", data)
        try:
            identity = chr(data[pos])
            if identity not in "dnfi":
                raise ProtocolError("R", pos, f"unknown replica identity {identity!r}")
            pos += 1
            (count,) = _I16.unpack_from(data, pos)
            if count < 0:
                raise ProtocolError("R", pos, f"negative column count {count}")
            pos += 2
            columns = []
            for _ in range(count):
                flags = data[pos]
                pos += 1
                col_name, pos = _cstring(data, pos)
                type_oid, typmod = _TYPMOD.unpack_from(data, pos)
                pos += 8
                columns.append(Column(flags, col_name, type_oid, typmod))
        except _LOW_LEVEL as exc:
            raise ProtocolError("R", pos, _reason(exc)) from None
        self._done("R", data, pos)
        relation = Relation(oid, namespace, name, identity, tuple(columns), xid)
        self.relations.put(relation)
        return relation

    def _type(self, data: bytes) -> TypeInfo:
        xid, oid, namespace, name, pos = self._named("Y", data)
        self._done("Y", data, pos)
        info = TypeInfo(oid, namespace, name, xid)
        self.relations.put_type(info)
        return info

    def _row_head(self, tag: str, data: bytes) -> tuple[int | None, Relation, bytes, int]:
        """A row change's opening: the xid (inside a stream), the relation, the marker
        after the oid; and the oid's position."""
        # _xid and _relation_for written out: this runs once per change.
        pos = 1
        xid = None
        try:
            if self._in_stream:
                xid = _U32.unpack_from(data, pos)[0]
                pos += 4
            oid, marker = _U32_CHAR.unpack_from(data, pos)
        except _LOW_LEVEL as exc:
            raise ProtocolError(tag, pos, _reason(exc)) from None
        relation = self.relations.get(oid)
        if relation is None:
            raise UnknownRelationError(tag, pos, oid)
        return xid, relation, marker, pos

    def _insert(self, data: bytes) -> Insert:
        xid, relation, marker, pos = self._row_head("I", data)
        if marker != b"N":
            raise ProtocolError("I", pos + 4, f"expected 'N' before the new tuple, got {marker!r}")
        new, pos = _tuple_data("I", data, pos + 5)
        self._done("I", data, pos)
        return Insert(relation, new, xid)

    def _update(self, data: bytes) -> Update:
        xid, relation, marker, pos = self._row_head("U", data)
        pos += 4
        old: TupleData | None = None
        old_kind: OldKind | None = None
        if marker == b"K" or marker == b"O":
            old_kind = "K" if marker == b"K" else "O"
            old, pos = _tuple_data("U", data, pos + 1)
            if pos >= len(data):
                raise ProtocolError("U", pos, "message ends before the new tuple")
            marker = data[pos : pos + 1]
        if marker != b"N":
            raise ProtocolError("U", pos, f"expected 'K', 'O' or 'N', got {marker!r}")
        new, pos = _tuple_data("U", data, pos + 1)
        self._done("U", data, pos)
        return Update(relation, old, old_kind, new, xid)

    def _delete(self, data: bytes) -> Delete:
        xid, relation, marker, pos = self._row_head("D", data)
        if marker != b"K" and marker != b"O":
            raise ProtocolError("D", pos + 4, f"expected 'K' or 'O', got {marker!r}")
        old, end = _tuple_data("D", data, pos + 5)
        self._done("D", data, end)
        return Delete(relation, old, "K" if marker == b"K" else "O", xid)

    def _truncate(self, data: bytes) -> Truncate:
        pos = 1
        try:
            xid, pos = self._xid(data, pos)
            count, options = _I32_B.unpack_from(data, pos)
            if count < 0:
                raise ProtocolError("T", pos, f"negative relation count {count}")
            pos += 5
            if count * 4 > len(data) - pos:
                raise ProtocolError("T", pos, f"{count} relation oids do not fit in the message")
            oids = struct.unpack_from(f">{count}I", data, pos)
        except _LOW_LEVEL as exc:
            raise ProtocolError("T", pos, _reason(exc)) from None
        relations = []
        for oid in oids:
            relations.append(self._relation_for("T", oid, pos))
            pos += 4
        self._done("T", data, pos)
        return Truncate(tuple(relations), options, xid)

    def _message(self, data: bytes) -> LogicalMessage:
        pos = 1
        try:
            xid, pos = self._xid(data, pos)
            flags, lsn = _MESSAGE.unpack_from(data, pos)
            pos += 9
            prefix, pos = _cstring(data, pos)
            (length,) = _I32.unpack_from(data, pos)
            if length < 0 or pos + 4 + length > len(data):
                raise ProtocolError("M", pos, f"bad content length {length}")
            pos += 4
            content = data[pos : pos + length]
            pos += length
        except _LOW_LEVEL as exc:
            raise ProtocolError("M", pos, _reason(exc)) from None
        self._done("M", data, pos)
        return LogicalMessage(bool(flags & 1), lsn, prefix, content, xid)

    def _stream_start(self, data: bytes) -> StreamStart:
        try:
            xid, first = _STREAM_START.unpack_from(data, 1)
        except _LOW_LEVEL as exc:
            raise ProtocolError("S", 1, _reason(exc)) from None
        self._done("S", data, 1 + _STREAM_START.size)
        self._in_stream = True
        return StreamStart(xid, first == 1)

    def _stream_stop(self, data: bytes) -> StreamStop:
        self._done("E", data, 1)
        self._in_stream = False
        return StreamStop()

    def _stream_commit(self, data: bytes) -> StreamCommit:
        try:
            xid, flags, commit_lsn, end_lsn, ts = _STREAM_COMMIT.unpack_from(data, 1)
        except _LOW_LEVEL as exc:
            raise ProtocolError("c", 1, _reason(exc)) from None
        self._done("c", data, 1 + _STREAM_COMMIT.size)
        return StreamCommit(xid, flags, commit_lsn, end_lsn, ts + PG_EPOCH_OFFSET_US)

    def _stream_abort(self, data: bytes) -> StreamAbort:
        try:
            if len(data) == 1 + _STREAM_ABORT_V4.size:
                xid, subxid, lsn, ts = _STREAM_ABORT_V4.unpack_from(data, 1)
                return StreamAbort(xid, subxid, lsn, ts + PG_EPOCH_OFFSET_US)
            xid, subxid = _STREAM_ABORT.unpack_from(data, 1)
        except _LOW_LEVEL as exc:
            raise ProtocolError("A", 1, _reason(exc)) from None
        self._done("A", data, 1 + _STREAM_ABORT.size)
        return StreamAbort(xid, subxid)


def _tuple_bytes(values: TupleData, blank: Collection[int]) -> bytes:
    parts = [_I16.pack(len(values))]
    for i, v in enumerate(values):
        if v is None or i in blank:
            parts.append(b"n")
        elif v is UNCHANGED_TOAST:
            parts.append(b"u")
        elif isinstance(v, bytes):
            parts += [b"b", _I32.pack(len(v)), v]
        else:
            text = str(v).encode()
            parts += [b"t", _I32.pack(len(text)), text]
    return b"".join(parts)


def blank_values(raw: bytes, m: RowChange, blank: Collection[int]) -> bytes:
    """``raw``, the pgoutput message ``m`` was decoded from, with the values of the
    columns at the positions ``blank`` written as NULL: what may leave capture of a row
    some of whose columns are not captured (a dead letter, a parked change)."""
    if not blank:
        return raw
    head = bytes(raw[: 5 if m.xid is None else 9])  # the tag, the streamed xid, the oid
    if isinstance(m, Insert):
        return head + b"N" + _tuple_bytes(m.new, blank)
    if isinstance(m, Update):
        old = b"" if m.old is None else (m.old_kind or "O").encode() + _tuple_bytes(m.old, blank)
        return head + old + b"N" + _tuple_bytes(m.new, blank)
    return head + m.old_kind.encode() + _tuple_bytes(m.old, blank)
