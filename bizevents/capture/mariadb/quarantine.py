"""Capture quarantine for MySQL/MariaDB: a binlog row that does not convert parks its key.

The parked change is the row as the binlog library decoded it (its ``values``, or
``before_values`` and ``after_values``, with the library's notes on NULLs), written as
typed JSON (:func:`dump_row`: decimals, dates, durations and bytes come back as the same
Python values), with what decoding it again needs in the context header: the table
map's layout (columns, types, labels, primary key), the key columns, the row's kind
(``c``, ``u``, ``d``), its binlog file, position and index in its event, the GTID, the
server id and the event's time. ``bizevents capture redrive`` decodes it with the code
the capture runs then (a converter registered since, see
:func:`bizevents.capture.mariadb.types.register_converter`). What parks and re-drives,
whatever the source, is :mod:`bizevents.capture.core.quarantine`; this module holds
MySQL's part: the row as typed JSON and its context (pure), and :class:`MysqlParking`,
the source's side of the capture's quarantine (a part of the capture, as the
quarantine is).

A parked position is one integer that grows with the binlog (:func:`position_number`:
the file's sequence number, the event's position, the row's index in the event), as
the parked-key state needs.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta
from datetime import time as clock_time
from decimal import Decimal
from typing import Any, Final, Protocol

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.capture import Session
from bizevents.capture.core.quarantine import ParkedChange, Quarantine, Record, Send, ToPark
from bizevents.capture.core.transactions import NoBlocks
from bizevents.capture.exceptions import CaptureError
from bizevents.capture.mariadb.codec import MyTable, MyTableCodec, binlog_values, fractional_times
from bizevents.capture.mariadb.types import MyColumn
from bizevents.plumbing.kafka import produce

__all__ = [
    "MysqlParking",
    "MysqlParkingHost",
    "RowAt",
    "describe_position",
    "dump_row",
    "load_row",
    "position_number",
    "table_of",
    "table_record",
]

_ROW_BITS: Final = 20
_POS_BITS: Final = 32
_ROW_MASK: Final = (1 << _ROW_BITS) - 1
_POS_MASK: Final = (1 << _POS_BITS) - 1


def position_number(file: str, pos: int, row: int) -> int:
    """One integer that grows with the binlog: ``file``'s sequence number (its suffix,
    ``mysql-bin.000003`` → 3), the event's ``pos`` in it, the ``row``'s index in the
    event (a rows event holds far fewer than a million rows: the server splits them)."""
    suffix = file.rpartition(".")[2]
    seq = int(suffix) if suffix.isdigit() else 0
    return (seq << (_POS_BITS + _ROW_BITS)) | ((pos & _POS_MASK) << _ROW_BITS) | min(row, _ROW_MASK)


def describe_position(n: int) -> str:
    """A :func:`position_number` as an operator reads it."""
    seq, pos, row = n >> (_POS_BITS + _ROW_BITS), (n >> _ROW_BITS) & _POS_MASK, n & _ROW_MASK
    return f"binlog file .{seq:06d} position {pos} row {row}"


# -- the row as the library decoded it, as typed JSON --------------------------------------


def _typed(v: Any) -> Any:
    # Plain JSON for None, booleans, integers and text; a tagged list for every other
    # value, so that no value (a JSON column's list or object included) reads as another.
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return ["f", repr(v)]
    if isinstance(v, Decimal):
        return ["D", str(v)]
    if isinstance(v, datetime):
        return ["dt", v.isoformat()]
    if isinstance(v, date):
        return ["d", v.isoformat()]
    if isinstance(v, clock_time):
        return ["t", v.isoformat()]
    if isinstance(v, timedelta):
        return ["td", v.days, v.seconds, v.microseconds]
    if isinstance(v, bytes | bytearray):
        return ["b", bytes(v).hex()]
    if isinstance(v, set | frozenset):
        return ["s", [_typed(x) for x in sorted(v, key=repr)]]
    if isinstance(v, list | tuple):
        return ["l", [_typed(x) for x in v]]
    if isinstance(v, dict):
        return ["o", [[_typed(k), _typed(x)] for k, x in v.items()]]
    raise TypeError(f"a binlog value of type {type(v).__name__} has no typed JSON form")


def _untyped(v: Any) -> Any:
    if not isinstance(v, list):
        return v
    tag = v[0]
    if tag == "f":
        return float(v[1])
    if tag == "D":
        return Decimal(v[1])
    if tag == "dt":
        return datetime.fromisoformat(v[1])
    if tag == "d":
        return date.fromisoformat(v[1])
    if tag == "t":
        return clock_time.fromisoformat(v[1])
    if tag == "td":
        return timedelta(days=v[1], seconds=v[2], microseconds=v[3])
    if tag == "b":
        return bytes.fromhex(v[1])
    if tag == "s":
        return {_untyped(x) for x in v[1]}
    if tag == "l":
        return [_untyped(x) for x in v[1]]
    if tag == "o":
        return {_untyped(k): _untyped(x) for k, x in v[1]}
    raise ValueError(f"unknown typed JSON tag {tag!r}")


def dump_row(row: dict[str, Any]) -> bytes:
    """A row as the binlog library decoded it, as typed JSON (:func:`load_row` reads it)."""
    return json.dumps(_typed(row), separators=(",", ":"), ensure_ascii=False).encode()


def load_row(raw: bytes) -> dict[str, Any]:
    """The row :func:`dump_row` wrote (ValueError: not one)."""
    row = _untyped(json.loads(raw))
    if not isinstance(row, dict):
        raise ValueError("a parked MySQL record holds no row")
    return row


def table_record(table: MyTable) -> dict[str, Any]:
    """A table map's layout as JSON-ready data (:func:`table_of` reads it back)."""
    return {
        "database": table.database,
        "name": table.name,
        "columns": [asdict(c) for c in table.columns],
        "primary_key": list(table.primary_key),
    }


def table_of(record: dict[str, Any]) -> MyTable:
    """The layout :func:`table_record` wrote (ValueError: not one)."""
    try:
        columns = tuple(
            MyColumn(**{**c, "labels": tuple(c.get("labels", ()))}) for c in record["columns"]
        )
        return MyTable(
            str(record["database"]), str(record["name"]), columns, tuple(record["primary_key"])
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a table layout: {exc}") from exc


@dataclass(frozen=True, slots=True)
class RowAt:
    """Where a binlog row is: its event's file and position, its index in the event,
    the GTID, server id and time of its transaction."""

    file: str
    pos: int
    row: int
    gtid: str | None
    server_id: int
    ts_ms: int

    @property
    def number(self) -> int:
        return position_number(self.file, self.pos, self.row)


_KINDS: Final = {"WriteRowsEvent": "c", "UpdateRowsEvent": "u", "DeleteRowsEvent": "d"}


def kind_of(event_class: type) -> str:
    """``c``, ``u`` or ``d`` for the library's rows event class."""
    return _KINDS[event_class.__name__]


class MysqlParkingHost(Protocol):
    """What MySQL's parking asks of its capture."""

    config: CaptureConfig
    quarantine: Quarantine

    @property
    def session(self) -> Session: ...

    def table_codec(self, table: MyTable) -> MyTableCodec: ...

    def conversion_failed(
        self, table: str, raw: bytes, where: str, fmt: str, exc: CaptureError, send: Send
    ) -> int: ...


class MysqlParking:
    """The MySQL/MariaDB capture's side of its quarantine
    (:class:`~bizevents.capture.core.quarantine.ParkedSource`): what parks a binlog
    row, and what decodes a parked one again."""

    raw_format = "mysql-row-typed-json"

    def __init__(self, capture: MysqlParkingHost) -> None:
        self.capture = capture

    def describe(self, position: int) -> str:
        return describe_position(position)

    def row_failed(
        self,
        codec: MyTableCodec,
        kind: str,
        row: dict[str, Any],
        at: RowAt,
        where: str,
        exc: CaptureError,
        ack: Any,
    ) -> int:
        """A row that did not convert: its key parked (``park``), else dead letter,
        skip or stop as ``on_conversion_error`` says (``where``: the stream's position,
        the dead letter's). The records sent."""
        send = self._sender(ack)
        table = codec.table.qualified
        row = _captured(codec, row)
        quarantine = self.capture.quarantine
        if quarantine.parking is not None:
            key = _keys(codec, kind, row)[-1]  # the row's key after the change
            if key is not None:
                raw, number = dump_row(row), at.number
                context = _context(codec, kind, at)
                change = ToPark(table, codec.topic, key, raw, number, context)
                return quarantine.park_key(change, exc, send)
        raw = json.dumps(row, default=str).encode()
        return self.capture.conversion_failed(table, raw, where, "mysql-row-json", exc, send)

    def row_parked_behind(
        self, codec: MyTableCodec, kind: str, row: dict[str, Any], at: RowAt, ack: Any
    ) -> int | None:
        """A row of a table with parked (or re-driven) keys: parked behind its key (the
        records sent), skipped as already re-driven (0), or None: not parked."""
        return self.capture.quarantine.park_behind(
            codec.table.qualified,
            codec.topic,
            _keys(codec, kind, row),
            lambda: dump_row(_captured(codec, row)),
            at.number,
            lambda: _context(codec, kind, at),
            self._sender(ack),
        )

    def _sender(self, ack: Any) -> Any:
        producer = self.capture.session.producer

        def send(
            topic: str,
            key: bytes | None,
            value: bytes,
            headers: list[tuple[str, Any]] | None = None,
        ) -> None:
            produce(producer, topic, value, key, headers=headers, on_delivery=ack)

        return send

    def redecode(self, change: ParkedChange, cache: dict[str, Any]) -> list[Record]:
        context = change.context
        table = table_of(context["table"])
        codec = self.capture.table_codec(table)  # built again when a converter was registered
        row = load_row(change.raw)
        kind = str(context["kind"])
        times = fractional_times(table)
        blocks = NoBlocks()  # no transaction block: its END record did not count it
        gtid = context.get("gtid")
        tx_id = gtid or f"{context['file']}:{context['pos']}"
        # The time capture first read the row: a re-drive done twice writes the same bytes.
        blocks.start_id(str(tx_id), int(context["ts_ms"]), int(context["read_ms"]))
        stamp = blocks.stamp(table.qualified)
        src = codec.source(
            ts_ms=int(context["ts_ms"]),
            snapshot="false",
            server_id=int(context["server_id"]),
            file=str(context["file"]),
            pos=int(context["pos"]),
            gtid=gtid,
        )(int(context["row"]))
        topic = codec.topic
        if kind == "u":
            old = binlog_values(row, times, "before_")
            new = binlog_values(row, times, "after_")
            old_key, new_key = codec.key(old), codec.key(new)
            before, after = codec.row(old), codec.row(new)
            if old_key != new_key:  # as the stream writes a key change
                return [
                    (topic, old_key, codec.envelope("d", before, None, src, stamp)),
                    (topic, old_key, None),
                    (topic, new_key, codec.envelope("c", None, after, src, stamp)),
                ]
            return [(topic, new_key, codec.envelope("u", before, after, src, stamp))]
        values = binlog_values(row, times)
        key = codec.key(values)
        if kind == "c":
            return [(topic, key, codec.envelope("c", None, codec.row(values), src, stamp))]
        if kind == "d":
            deleted = codec.envelope("d", codec.row(values), None, src, stamp)
            return [(topic, key, deleted), (topic, key, None)]
        raise ValueError(f"a parked MySQL record of unknown kind {kind!r}")


def _keys(codec: MyTableCodec, kind: str, row: dict[str, Any]) -> list[bytes | None]:
    """The record keys a row's change is written under (None: one does not convert);
    the key after the change last."""
    names = ("before_values", "after_values") if kind == "u" else ("values",)
    keys: list[bytes | None] = []
    for name in names:
        try:
            keys.append(codec.key(row[name]))
        except CaptureError:
            keys.append(None)
    return keys


def _captured(codec: MyTableCodec, row: dict[str, Any]) -> dict[str, Any]:
    """A binlog row without the columns ``codec`` does not capture (in each of its
    per-column maps: the values before and after, and where NULLs came from)."""
    if not codec.dropped:
        return row
    return {
        part: {c: v for c, v in cols.items() if c not in codec.dropped}
        if isinstance(cols, dict)
        else cols
        for part, cols in row.items()
    }


def _context(codec: MyTableCodec, kind: str, at: RowAt) -> dict[str, Any]:
    return {
        "table": table_record(codec.table),
        "key": list(codec.key_names),
        "kind": kind,
        "file": at.file,
        "pos": at.pos,
        "row": at.row,
        "gtid": at.gtid,
        "server_id": at.server_id,
        "ts_ms": at.ts_ms,
        # when capture read it: the re-drive's envelope ``ts_ms``
        "read_ms": int(time.time() * 1000),
    }
