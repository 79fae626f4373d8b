"""Unit and property tests of the pgoutput decoder, on hand-built protocol messages."""

from __future__ import annotations

import contextlib
import struct
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    Origin,
    Relation,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    TypeInfo,
    Update,
    format_lsn,
    parse_lsn,
)
from bizevents.capture.postgres.pgoutput import PgOutputDecoder
from bizevents.contracts.logical import UNAVAILABLE

# -- message builders ------------------------------------------------------------------

Value = str | bytes | None | object


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def tuple_data(values: list[Value]) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED_TOAST:
            out += b"u"
        elif isinstance(v, str):
            raw = v.encode()
            out += b"t" + struct.pack(">i", len(raw)) + raw
        elif isinstance(v, bytes):
            out += b"b" + struct.pack(">i", len(v)) + v
        else:
            raise TypeError(v)
    return out


def xid_field(xid: int | None) -> bytes:
    return b"" if xid is None else struct.pack(">I", xid)


def relation_msg(
    oid: int = 16400,
    namespace: str = "public",
    name: str = "orders",
    identity: bytes = b"d",
    columns: tuple[tuple[int, str, int, int], ...] = ((1, "id", 23, -1), (0, "note", 25, -1)),
    xid: int | None = None,
) -> bytes:
    out = b"R" + xid_field(xid) + struct.pack(">I", oid) + cstr(namespace) + cstr(name) + identity
    out += struct.pack(">h", len(columns))
    for flags, col, type_oid, typmod in columns:
        out += bytes([flags]) + cstr(col) + struct.pack(">Ii", type_oid, typmod)
    return out


def insert_msg(values: list[Value], oid: int = 16400, xid: int | None = None) -> bytes:
    return b"I" + xid_field(xid) + struct.pack(">I", oid) + b"N" + tuple_data(values)


def update_msg(
    new: list[Value], old: list[Value] | None = None, kind: bytes = b"K", oid: int = 16400
) -> bytes:
    out = b"U" + struct.pack(">I", oid)
    if old is not None:
        out += kind + tuple_data(old)
    return out + b"N" + tuple_data(new)


def delete_msg(old: list[Value], kind: bytes = b"K", oid: int = 16400) -> bytes:
    return b"D" + struct.pack(">I", oid) + kind + tuple_data(old)


def begin_msg(final_lsn: int = 0x16B3748, ts: int = 0, xid: int = 742) -> bytes:
    return b"B" + struct.pack(">QqI", final_lsn, ts, xid)


def commit_msg(commit_lsn: int = 0x16B3748, end_lsn: int = 0x16B3778, ts: int = 0) -> bytes:
    return b"C" + struct.pack(">BQQq", 0, commit_lsn, end_lsn, ts)


def truncate_msg(oids: list[int], options: int = 0) -> bytes:
    return b"T" + struct.pack(">iB", len(oids), options) + struct.pack(f">{len(oids)}I", *oids)


def message_msg(content: bytes, prefix: str = "bizevents", transactional: bool = True) -> bytes:
    return (
        b"M"
        + struct.pack(">BQ", int(transactional), 0x100)
        + cstr(prefix)
        + struct.pack(">i", len(content))
        + content
    )


@pytest.fixture
def decoder() -> PgOutputDecoder:
    d = PgOutputDecoder()
    d.decode(relation_msg())
    return d


# -- each message type ---------------------------------------------------------------


def test_begin() -> None:
    """Begin carries the final LSN, the commit time shifted to the Unix epoch and the xid."""
    ts = 768_000_000_123_456  # microseconds since 2000-01-01
    msg = PgOutputDecoder().decode(begin_msg(0x1_0000_00FF, ts, 4_000_000_000))
    assert msg == Begin(0x1_0000_00FF, ts + PG_EPOCH_OFFSET_US, 4_000_000_000)
    assert isinstance(msg, Begin)
    assert msg.commit_time == datetime(2000, 1, 1, tzinfo=UTC) + timedelta(microseconds=ts)


def test_commit() -> None:
    """Commit carries flags, commit LSN, end LSN and the commit time."""
    msg = PgOutputDecoder().decode(commit_msg(10, 20, 0))
    assert msg == Commit(0, 10, 20, PG_EPOCH_OFFSET_US)
    assert isinstance(msg, Commit)
    assert msg.commit_time == datetime(2000, 1, 1, tzinfo=UTC)


def test_origin() -> None:
    """Origin carries the origin's commit LSN and its name."""
    payload = b"O" + struct.pack(">Q", 77) + cstr("node_a")
    assert PgOutputDecoder().decode(payload) == Origin(77, "node_a")


def test_relation_is_decoded_and_cached() -> None:
    """A Relation message describes the columns and enters the cache."""
    d = PgOutputDecoder()
    cols = ((1, "id", 20, -1), (0, "amount", 1700, 655366), (1, "tenant", 25, -1))
    rel = d.decode(relation_msg(oid=5, name="lines", identity=b"f", columns=cols))
    assert rel == Relation(
        5,
        "public",
        "lines",
        "f",
        (Column(1, "id", 20, -1), Column(0, "amount", 1700, 655366), Column(1, "tenant", 25, -1)),
    )
    assert isinstance(rel, Relation)
    assert [c.name for c in rel.key_columns] == ["id", "tenant"]
    assert rel.qualified_name == "public.lines"
    assert d.relations.get(5) is rel
    assert 5 in d.relations and len(d.relations) == 1


def test_relation_in_pg_catalog_has_empty_namespace() -> None:
    """The protocol sends an empty namespace for pg_catalog."""
    rel = PgOutputDecoder().decode(relation_msg(namespace=""))
    assert isinstance(rel, Relation) and rel.namespace == "pg_catalog"


def test_type_message() -> None:
    """A Type message names a non-built-in type and is remembered."""
    d = PgOutputDecoder()
    payload = b"Y" + struct.pack(">I", 16390) + cstr("public") + cstr("mood")
    assert d.decode(payload) == TypeInfo(16390, "public", "mood")
    assert d.relations.type_info(16390) == TypeInfo(16390, "public", "mood")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["1", "hello"], ("1", "hello")),
        (["1", None], ("1", None)),
        (["1", UNCHANGED_TOAST], ("1", UNAVAILABLE)),
        (["1", b"\x00\x01"], ("1", b"\x00\x01")),
        (["1", ""], ("1", "")),
        (["1", "grüße ✓"], ("1", "grüße ✓")),
    ],
    ids=["text", "null", "unchanged-toast", "binary", "empty-text", "utf8"],
)
def test_insert_tuple_kinds(
    decoder: PgOutputDecoder, values: list[Value], expected: tuple[object, ...]
) -> None:
    """Every TupleData kind decodes: n → None, u → UNCHANGED_TOAST, t → str, b → bytes."""
    msg = decoder.decode(insert_msg(values))
    assert isinstance(msg, Insert)
    assert msg.new == expected
    assert msg.relation is decoder.relations.get(16400)
    assert msg.xid is None


def test_unchanged_toast_is_not_none(decoder: PgOutputDecoder) -> None:
    """An unchanged TOASTed value is a sentinel distinct from SQL NULL."""
    msg = decoder.decode(update_msg(["1", UNCHANGED_TOAST]))
    assert isinstance(msg, Update)
    assert msg.new[1] is UNCHANGED_TOAST
    assert msg.new[1] is not None
    assert repr(UNCHANGED_TOAST) == "UNAVAILABLE"


def test_update_without_old(decoder: PgOutputDecoder) -> None:
    """An update that did not change the key carries the new row only."""
    msg = decoder.decode(update_msg(["1", "b"]))
    assert isinstance(msg, Update)
    assert (msg.old, msg.old_kind, msg.new) == (None, None, ("1", "b"))


def test_update_with_old_key(decoder: PgOutputDecoder) -> None:
    """An update that changed the key carries the old key (K) first."""
    msg = decoder.decode(update_msg(["2", "b"], old=["1", None], kind=b"K"))
    assert isinstance(msg, Update)
    assert (msg.old, msg.old_kind, msg.new) == (("1", None), "K", ("2", "b"))


def test_update_with_old_row(decoder: PgOutputDecoder) -> None:
    """With REPLICA IDENTITY FULL the old row (O) comes first."""
    msg = decoder.decode(update_msg(["1", "b"], old=["1", "a"], kind=b"O"))
    assert isinstance(msg, Update)
    assert (msg.old, msg.old_kind) == (("1", "a"), "O")


@pytest.mark.parametrize("kind", [b"K", b"O"])
def test_delete(decoder: PgOutputDecoder, kind: bytes) -> None:
    """A delete carries the old key (K) or the old row (O)."""
    msg = decoder.decode(delete_msg(["1", None if kind == b"K" else "a"], kind=kind))
    assert isinstance(msg, Delete)
    assert msg.old_kind == kind.decode()
    assert msg.old[0] == "1"


@pytest.mark.parametrize(
    ("options", "cascade", "restart"),
    [(0, False, False), (1, True, False), (2, False, True), (3, True, True)],
)
def test_truncate(options: int, cascade: bool, restart: bool) -> None:
    """Truncate lists its relations and its CASCADE / RESTART IDENTITY options."""
    d = PgOutputDecoder()
    d.decode(relation_msg(oid=1))
    d.decode(relation_msg(oid=2, name="lines"))
    msg = d.decode(truncate_msg([1, 2], options))
    assert isinstance(msg, Truncate)
    assert [r.name for r in msg.relations] == ["orders", "lines"]
    assert (msg.cascade, msg.restart_identity, msg.options) == (cascade, restart, options)


@pytest.mark.parametrize("transactional", [True, False])
def test_logical_message(transactional: bool) -> None:
    """A logical decoding message keeps its prefix and raw content."""
    msg = PgOutputDecoder().decode(message_msg(b"\x00hi\xff", transactional=transactional))
    assert msg == LogicalMessage(transactional, 0x100, "bizevents", b"\x00hi\xff")


def test_relation_change_keeps_old_shape_for_earlier_changes() -> None:
    """A new Relation message replaces the cached one; decoded changes keep theirs."""
    d = PgOutputDecoder()
    d.decode(relation_msg())
    first = d.decode(insert_msg(["1", "a"]))
    d.decode(relation_msg(columns=((1, "id", 23, -1), (0, "note", 25, -1), (0, "x", 16, -1))))
    second = d.decode(insert_msg(["2", "b", "t"]))
    assert isinstance(first, Insert) and isinstance(second, Insert)
    assert len(first.relation.columns) == 2
    assert len(second.relation.columns) == 3


def test_streamed_transaction_messages_carry_the_xid() -> None:
    """Protocol 2: inside Stream Start/Stop, changes carry the xid of their transaction."""
    d = PgOutputDecoder(protocol_version=2)
    assert d.decode(b"S" + struct.pack(">IB", 900, 1)) == StreamStart(900, True)
    rel = d.decode(relation_msg(xid=900))
    assert isinstance(rel, Relation) and rel.xid == 900
    ins = d.decode(insert_msg(["1", "a"], xid=900))
    assert isinstance(ins, Insert) and ins.xid == 900 and ins.new == ("1", "a")
    assert d.decode(b"E") == StreamStop()
    commit = d.decode(b"c" + struct.pack(">IBQQq", 900, 0, 5, 6, 0))
    assert commit == StreamCommit(900, 0, 5, 6, PG_EPOCH_OFFSET_US)
    # Outside a stream, no xid field.
    plain = d.decode(insert_msg(["2", "b"]))
    assert isinstance(plain, Insert) and plain.xid is None


def test_stream_abort_v2_and_v4() -> None:
    """Stream Abort has xid/subxid; protocol 4 adds the abort LSN and time."""
    d = PgOutputDecoder(protocol_version=4)
    assert d.decode(b"A" + struct.pack(">II", 1, 2)) == StreamAbort(1, 2)
    v4 = d.decode(b"A" + struct.pack(">IIQq", 1, 2, 3, 0))
    assert v4 == StreamAbort(1, 2, 3, PG_EPOCH_OFFSET_US)


def test_buffer_types_are_accepted(decoder: PgOutputDecoder) -> None:
    """bytes, bytearray and memoryview payloads decode the same way."""
    raw = insert_msg(["1", "x"])
    assert decoder.decode(bytearray(raw)) == decoder.decode(memoryview(raw)) == decoder.decode(raw)


def test_lsn_text_round_trip() -> None:
    """LSNs print and parse in PostgreSQL's XXX/XXX notation."""
    assert format_lsn(0x1_0000_00FF) == "1/FF"
    assert parse_lsn("16/B374D848") == 0x16_B374D848
    with pytest.raises(ValueError):
        parse_lsn("nope")


# -- malformed input ----------------------------------------------------------------------


def test_unknown_relation(decoder: PgOutputDecoder) -> None:
    """A change to a relation never described is a typed protocol error naming the oid."""
    with pytest.raises(UnknownRelationError) as info:
        decoder.decode(insert_msg(["1"], oid=999))
    assert info.value.relation_oid == 999
    assert info.value.message_type == "I"
    assert info.value.offset == 1


@pytest.mark.parametrize(
    ("payload", "tag", "offset", "words"),
    [
        (b"", "?", 0, "empty"),
        (b"Z", "Z", 0, "unknown message type"),
        (b"P" + b"\0" * 30, "P", 0, "two-phase"),
        (begin_msg()[:-1], "B", 1, "ends too early"),
        (begin_msg() + b"x", "B", 21, "after the end"),
        (b"O" + struct.pack(">Q", 1) + b"abc", "O", 9, "NUL"),
        (relation_msg(identity=b"x"), "R", 19, "replica identity"),
        (insert_msg(["1", "x"])[:-1], "I", 15, "bad value length"),
        (b"I" + struct.pack(">I", 16400) + b"X" + tuple_data([]), "I", 5, "expected 'N'"),
        (b"I" + struct.pack(">I", 16400) + b"N\x00\x01q", "I", 8, "TupleData kind"),
        (b"I" + struct.pack(">I", 16400) + b"N\x00\x01t\xff\xff\xff\xff", "I", 9, "length -1"),
        (b"I" + struct.pack(">I", 16400) + b"N\x00\x01t\x00\x00\x00\x01\xff", "I", 8, "UTF-8"),
        (update_msg(["1"], old=["1"])[:14], "U", 14, "before the new tuple"),
        (delete_msg(["1"], kind=b"N"), "D", 5, "expected 'K' or 'O'"),
        (b"T" + struct.pack(">iB", 1000, 0), "T", 6, "do not fit"),
        (message_msg(b"abcde")[:-3], "M", 20, "content length"),
    ],
    ids=[
        "empty",
        "unknown-type",
        "two-phase",
        "short-begin",
        "trailing-bytes",
        "unterminated-string",
        "bad-identity",
        "short-value",
        "missing-N",
        "bad-tuple-kind",
        "negative-length",
        "bad-utf8",
        "update-no-new",
        "delete-bad-kind",
        "truncate-count",
        "message-length",
    ],
)
def test_malformed_messages(
    decoder: PgOutputDecoder, payload: bytes, tag: str, offset: int, words: str
) -> None:
    """Malformed input is a ProtocolError naming the message type and the byte offset."""
    with pytest.raises(ProtocolError) as info:
        decoder.decode(payload)
    err = info.value
    assert (err.message_type, err.offset) == (tag, offset)
    assert words in str(err)
    assert f"at byte {offset}" in str(err)


def test_protocol_error_is_terminal() -> None:
    """Protocol errors belong to the terminal family: retrying will not fix them."""
    from bizevents.plumbing.errors import TerminalError

    assert issubclass(ProtocolError, TerminalError)


# -- properties ---------------------------------------------------------------------------

VALID_MESSAGES = [
    begin_msg(),
    commit_msg(),
    b"O" + struct.pack(">Q", 77) + cstr("node_a"),
    relation_msg(),
    b"Y" + struct.pack(">I", 16390) + cstr("public") + cstr("mood"),
    insert_msg(["1", "hello"]),
    insert_msg([None, UNCHANGED_TOAST]),
    insert_msg(["1", b"\x01\x02"]),
    update_msg(["1", "b"]),
    update_msg(["2", "b"], old=["1", None]),
    update_msg(["1", "b"], old=["1", "a"], kind=b"O"),
    delete_msg(["1", None]),
    truncate_msg([16400], 3),
    message_msg(b"content"),
]


def _fresh() -> PgOutputDecoder:
    d = PgOutputDecoder(protocol_version=2)
    d.decode(relation_msg())
    return d


@given(st.binary(max_size=200))
@settings(max_examples=2000, deadline=None)
def test_random_bytes_raise_protocol_error_only(payload: bytes) -> None:
    """Arbitrary bytes either decode or raise ProtocolError, never anything else."""
    with contextlib.suppress(ProtocolError):
        _fresh().decode(payload)


@given(
    st.sampled_from([bytes([t]) for t in b"BCORYIUDTMSEcA"]),
    st.binary(max_size=120),
)
@settings(max_examples=2000, deadline=None)
def test_random_bodies_of_known_types_raise_protocol_error_only(tag: bytes, body: bytes) -> None:
    """Random bodies behind every known type byte: decoded or ProtocolError."""
    with contextlib.suppress(ProtocolError):
        _fresh().decode(tag + body)


@given(st.sampled_from(VALID_MESSAGES), st.data())
@settings(max_examples=1000, deadline=None)
def test_truncations_raise_protocol_error(message: bytes, data: st.DataObject) -> None:
    """Every strict prefix of a valid message is a ProtocolError."""
    cut = data.draw(st.integers(min_value=0, max_value=len(message) - 1))
    with pytest.raises(ProtocolError):
        _fresh().decode(message[:cut])


@given(st.sampled_from(VALID_MESSAGES), st.data())
@settings(max_examples=2000, deadline=None)
def test_mutations_raise_protocol_error_only(message: bytes, data: st.DataObject) -> None:
    """A valid message with one byte changed either decodes or raises ProtocolError."""
    at = data.draw(st.integers(min_value=0, max_value=len(message) - 1))
    byte = data.draw(st.integers(min_value=0, max_value=255))
    mutated = message[:at] + bytes([byte]) + message[at + 1 :]
    with contextlib.suppress(ProtocolError):
        _fresh().decode(mutated)


@pytest.mark.parametrize("message", VALID_MESSAGES, ids=lambda m: chr(m[0]))
def test_valid_messages_decode(message: bytes) -> None:
    """The property tests' seed messages are themselves valid."""
    _fresh().decode(message)
