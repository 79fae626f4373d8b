"""Capture quarantine for PostgreSQL: a change of the slot that does not convert parks its key.

The parked change is the raw pgoutput message, with its relation (columns and types at
the time), key columns, LSN, transaction id and commit time in the context header, so
that ``bizevents capture redrive`` decodes it again with the code the capture runs then
(a converter registered since, see :func:`bizevents.capture.postgres.types.register_converter`).
What parks and re-drives, whatever the source, is
:mod:`bizevents.capture.core.quarantine`; this module holds PostgreSQL's part: the
context (pure) and :class:`PgParking`, the source's side of the capture's
:class:`~bizevents.capture.core.quarantine.Quarantine` (a part of the capture, as the
quarantine is).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.quarantine import ParkedChange, Quarantine, Record, Send, ToPark
from bizevents.capture.core.transactions import NoBlocks
from bizevents.capture.exceptions import CaptureError
from bizevents.capture.postgres.codec import TableCodec, captured_codec
from bizevents.capture.postgres.messages import (
    Column,
    Delete,
    Insert,
    Relation,
    RelationCache,
    Update,
    format_lsn,
)
from bizevents.capture.postgres.pgoutput import PgOutputDecoder, blank_values
from bizevents.capture.postgres.types import PgTypeMapper

__all__ = [
    "ParkedBehind",
    "PgParking",
    "PgParkingHost",
    "RowChange",
    "TxInfo",
    "context_record",
    "relation_of",
    "relation_record",
]


@dataclass(frozen=True, slots=True)
class TxInfo:
    """The transaction a change belongs to: its id and commit time."""

    xid: int | None
    commit_ms: int
    commit_us: int


def context_record(codec: TableCodec, lsn: int, tx: TxInfo) -> dict[str, Any]:
    """What re-decoding a change of ``codec``'s table at ``lsn`` needs later."""
    return {
        "relation": relation_record(codec.relation),
        "key": list(codec.key_names),
        "key_nullable": codec.key_nullable,
        "lsn": lsn,
        "position": lsn,
        "xid": tx.xid,
        "commit_ms": tx.commit_ms,
        "commit_us": tx.commit_us,
        # when capture read it: the re-drive's envelope ``ts_ms`` (the same bytes again
        # when a re-drive is done twice)
        "read_ms": int(time.time() * 1000),
    }


def relation_record(relation: Relation) -> dict[str, Any]:
    """``relation`` as JSON-ready data (:func:`relation_of` reads it back)."""
    return {
        "oid": relation.oid,
        "namespace": relation.namespace,
        "name": relation.name,
        "replica_identity": relation.replica_identity,
        "columns": [[c.flags, c.name, c.type_oid, c.type_modifier] for c in relation.columns],
    }


def relation_of(context: dict[str, Any]) -> Relation:
    """The relation a parked change was decoded with (ValueError: not a context)."""
    try:
        r = context["relation"]
        columns = tuple(Column(int(f), str(n), int(t), int(m)) for f, n, t, m in r["columns"])
        return Relation(
            int(r["oid"]), str(r["namespace"]), str(r["name"]), str(r["replica_identity"]), columns
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a capture context: {exc}") from exc


#: ``PostgresCapture.row_change``: one change's records sent (``m``, its codec, its
#: ``source`` bytes, the envelopes' stamp, the send); how many.
RowChange = Callable[
    [Insert | Update | Delete, TableCodec, bytes, Callable[[str], bytes], Callable[..., None]],
    int,
]
#: :meth:`PgParking.parked_behind`.
ParkedBehind = Callable[
    [Insert | Update | Delete, TableCodec, bytes, int, "TxInfo", Callable[..., None]], int | None
]


class PgParkingHost(Protocol):
    """What PostgreSQL's parking asks of its capture."""

    config: CaptureConfig
    #: The database's name (the ``source`` block's ``db``).
    database: str
    types: PgTypeMapper
    quarantine: Quarantine

    def topic(self, relation: Relation) -> str: ...

    def register(self, codec: Any, table: str) -> None: ...

    @property
    def row_change(self) -> RowChange: ...


class PgParking:
    """The PostgreSQL capture's side of its quarantine
    (:class:`~bizevents.capture.core.quarantine.ParkedSource`): what parks a change
    of the slot, and what decodes a parked one again."""

    raw_format = "pgoutput"

    def __init__(self, capture: PgParkingHost) -> None:
        self.capture = capture

    def describe(self, position: int) -> str:
        return format_lsn(position)

    def park_failed(
        self,
        m: Insert | Update | Delete,
        codec: TableCodec,
        raw: bytes,
        lsn: int,
        exc: CaptureError,
        tx: TxInfo,
        send: Send,
    ) -> int | None:
        """Park the key of a change that did not convert; the records sent, or None when
        it cannot be parked (its key does not convert either: dead-letter it)."""
        quarantine = self.capture.quarantine
        if quarantine.parking is None:
            return None
        key = _key_of(codec, m.old if isinstance(m, Delete) else m.new)
        if key is None:
            return None
        table = codec.relation.qualified_name
        context = context_record(codec, lsn, tx)
        return quarantine.park_key(ToPark(table, codec.topic, key, raw, lsn, context), exc, send)

    def parked_behind(
        self,
        m: Insert | Update | Delete,
        codec: TableCodec,
        raw: bytes,
        lsn: int,
        tx: TxInfo,
        send: Send,
    ) -> int | None:
        """A change of a table with parked (or re-driven) keys: parked behind its key
        (the records sent), skipped as already re-driven (0), or None: not parked."""
        keys = []
        if not isinstance(m, Delete):
            keys.append(_key_of(codec, m.new))
        if not isinstance(m, Insert) and m.old is not None:
            keys.append(_key_of(codec, m.old))
        return self.capture.quarantine.park_behind(
            codec.relation.qualified_name,
            codec.topic,
            keys,
            lambda: blank_values(raw, m, codec.dropped),
            lsn,
            lambda: context_record(codec, lsn, tx),
            send,
        )

    def redecode(self, change: ParkedChange, cache: dict[str, Any]) -> list[Record]:
        context = change.context
        shape = json.dumps([context["relation"], context["key"], context["key_nullable"]])
        codec = cache.get(shape)
        relation = relation_of(context)
        if codec is None:
            capture = self.capture
            codec = cache[shape] = captured_codec(
                capture.config,
                capture.database,
                relation,
                [str(k) for k in context["key"]],
                capture.types,
                bool(context["key_nullable"]),
            )
            capture.register(codec, relation.qualified_name)
        relations = RelationCache()
        relations.put(relation)
        m = PgOutputDecoder(1, relations).decode(change.raw)
        if not isinstance(m, Insert | Update | Delete):
            raise ValueError(f"a parked record holds a {type(m).__name__}, not a row change")
        xid = context.get("xid")
        blocks = NoBlocks()  # no transaction block: its END record did not count it
        # The time capture first read the change: a re-drive done twice (a kill -9
        # between its records and the key's unpark) writes the same bytes twice.
        blocks.start(int(xid or 0), 0, int(context["commit_ms"]), int(context["read_ms"]))
        src = codec.source(
            int(context["commit_ms"]), int(context["commit_us"]), "false", xid
        ).with_long(change.position)
        out: list[Record] = []

        def collect(topic: str, key: bytes | None, value: bytes | None) -> None:
            out.append((topic, key, value))

        self.capture.row_change(m, codec, src, blocks.stamp, collect)
        return out


def _key_of(codec: TableCodec, values: Any) -> bytes | None:
    try:
        return codec.key(values)
    except CaptureError:
        return None
