"""The proof that a technical topic holds its table: ``bizevents verify``.

The topic is read to its end and reduced to the latest state per key, with
compaction's semantics (a tombstone or a delete removes the key, a truncate empties the
partition). The table is read in chunks of primary keys, each chunk in a consistent
read of its own. Both sides go through one canonical encoding: a database row is
written by capture's own codec into an envelope and read back by the same decoder as
the topic's records, so equal data gives equal values; each row is then a 16-byte
digest of its sorted values. Per chunk: the rows, the rows the topic has, and the xor
of the digests on both sides; a chunk whose counts or checksums differ is looked at key
by key: **missing** (in the table, not in the topic), **differs** (both, not equal),
**extra** (in the topic, not in the table; listed after the last chunk).

Each differing key comes with the positions between which it changed: the topic's last
record of the key (its partition and offset, and the source's position: LSN, or binlog
file:pos and GTID; for a missing key the delete or tombstone that removed it, if any)
and the database's position at which its chunk was read (MariaDB: the binlog position
the chunk's consistent snapshot matches; PostgreSQL: the WAL's insert position right
after the chunk's read, a bound the chunk's snapshot is at or before).

A row that changed after capture's position when the topic was read is not a gap: the
differing keys are checked again, table and topic, once capture has passed the
database's position of that moment (up to ``rechecks`` times). Capture must have passed
the database's position before the topic is read and before each recheck
(:func:`capture_progress`, waiting a while); when it has not, the report says so in one
sentence (:attr:`Report.behind`) instead of calling its differences gaps, and they are
not repaired.

Memory: one digest (and the key) per row of the topic, and one position per key the
topic deleted; one chunk of the table.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, TopicPartition

from bizevents.capture.core.filters import Compare, Condition, InList, Value, all_of
from bizevents.capture.exceptions import DatabaseUnreachableError
from bizevents.capture.postgres import queries as pg
from bizevents.capture.postgres.codec import encoded_ts
from bizevents.contracts.envelope import ChangeEvent, MySqlPosition, PgPosition, Position, Tombstone
from bizevents.contracts.technical import AvroDecoder

#: A key as a canonical tuple of ``(column, value)``.
Key = tuple[tuple[str, Any], ...]

__all__ = [
    "Difference",
    "Report",
    "TableChunk",
    "TopicRow",
    "TopicState",
    "capture_progress",
    "check_table",
    "compare",
    "digest_of",
    "key_of",
    "topic_state",
]

#: The schema ids of verify's own encoding of database rows (never registered: the
#: decoder is given their schemas directly).
LOCAL_KEY_ID = 2**31 - 2
LOCAL_VALUE_ID = 2**31 - 1


def key_of(key: Any) -> Key:
    """A key record as a hashable, canonical tuple."""
    return tuple(sorted((str(k), _hashable(v)) for k, v in dict(key).items()))


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def digest_of(row: Any) -> bytes:
    """The canonical row encoding's digest: its values sorted by column, by ``repr``."""
    text = repr(tuple(sorted((str(k), _hashable(v)) for k, v in dict(row).items())))
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class TopicRow:
    """A key's latest state in the topic: its row's digest and where it was written
    (and the record's key bytes and partition: where a repair's tombstone goes)."""

    digest: bytes
    position: str
    record_key: bytes = b""
    partition: int = -1


@dataclass(slots=True)
class TopicState:
    """A topic read to its end: the latest row per key, and where each key that is no
    longer there was removed (its delete or tombstone)."""

    rows: dict[Key, TopicRow] = field(default_factory=dict)
    gone: dict[Key, str] = field(default_factory=dict)
    read: int = 0


@dataclass(slots=True)
class TableChunk:
    """Rows of the table read together, and the database's position of that read."""

    rows: list[tuple[Key, list[Any], bytes]]
    position: str


@dataclass(slots=True)
class Difference:
    key: Key
    kind: Literal["missing", "differs", "extra"]
    #: The topic's last record of the key (``partition/offset``, the source's
    #: position); ``None`` when the topic has no record of it.
    topic_position: str | None
    #: The database's position when the key's side of the table was read.
    database_position: str = ""
    #: An extra key's record key and partition (``None`` when not known).
    tombstone: tuple[int, bytes] | None = None


@dataclass(slots=True)
class Report:
    table: str
    topic: str
    rows: int = 0
    topic_rows: int = 0
    chunks: int = 0
    differing_chunks: list[tuple[list[Any], list[Any]]] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    records_read: int = 0
    #: The database's position at the last chunk's read.
    database_position: str = ""
    #: Why the differences cannot be told from lag (capture had not passed the
    #: database's position): a sentence; ``None`` when they can.
    behind: str | None = None
    #: Whether the table was compared with its topic at all (not when capture was
    #: behind from the start).
    compared: bool = True

    @property
    def ok(self) -> bool:
        return not self.differences and self.behind is None

    @property
    def repairable(self) -> bool:
        """Whether its differences are gaps a repair should close (not changes that
        capture has yet to write)."""
        return self.behind is None and bool(self.differences)


def source_position(pos: Position | None) -> str:
    """A change's position in its source's log as an operator reads it."""
    if isinstance(pos, MySqlPosition):
        return f"{pos.file}:{pos.pos}" + (f" GTID {pos.gtid}" if pos.gtid else "")
    if isinstance(pos, PgPosition) and pos.lsn is not None:
        return f"LSN {pos}"
    return "no source position"


def _where(partition: int, offset: int, what: str) -> str:
    return f"partition {partition} offset {offset}: {what}"


def entry_of(
    decoded: ChangeEvent | Tombstone, partition: int, offset: int
) -> tuple[
    Literal["row", "delete", "tombstone", "truncate", "none"], Key | None, bytes | None, str
]:
    """What one record of a technical topic says: ``(kind, the key, the row's digest,
    where it stands)``; ``row`` sets the key, ``delete`` and ``tombstone`` remove it,
    ``truncate`` empties the partition before it, ``none`` says nothing of a key."""
    if isinstance(decoded, Tombstone):
        return "tombstone", key_of(decoded.key), None, _where(partition, offset, "tombstone")
    at = source_position(decoded.source.position)
    if decoded.op == "t":
        return "truncate", None, None, _where(partition, offset, f"truncate at {at}")
    if decoded.key is None:
        return "none", None, None, ""
    if decoded.after is None:
        return "delete", key_of(decoded.key), None, _where(partition, offset, f"delete at {at}")
    where = _where(partition, offset, f"{decoded.op} at {at}")
    return "row", key_of(decoded.key), digest_of(decoded.after), where


def topic_state(kafka: dict[str, Any], topic: str, decoder: AvroDecoder) -> TopicState:
    """The latest state per key of ``topic``, read to its end (compaction's semantics),
    where the removed keys went, and the number of records read."""
    consumer = Consumer(
        {
            **kafka,
            "group.id": "bizevents-verify",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    found = TopicState()
    state = found.rows
    gone = found.gone
    by_partition: dict[int, set[Key]] = {}
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return found
        ends = {}
        for p in meta.partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        at = dict.fromkeys(ends, 0)
        remaining = set(ends)
        # Each partition ends at the fetch's "end of partition" once past the high
        # watermark asked for first (which may not count a write just acknowledged);
        # a topic written to all the time is given one second more, then it ends.
        passed: float | None = None
        while remaining:
            if passed is None and all(at[p] >= ends[p] for p in remaining):
                passed = time.monotonic()
            if passed is not None and time.monotonic() - passed > 1.0:
                break
            for msg in consumer.consume(10_000, timeout=0.2 if passed is not None else 5):
                err = msg.error()
                p = msg.partition() or 0
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and at.get(p, 0) >= ends.get(p, 0):
                        remaining.discard(p)
                    continue
                offset = msg.offset() or 0
                at[p] = offset + 1
                found.read += 1
                decoded = decoder.decode(msg.key(), msg.value())
                kind, k, digest, where = entry_of(decoded, p, offset)
                keys = by_partition.setdefault(p, set())
                if kind == "truncate":
                    for gone_key in keys:
                        state.pop(gone_key, None)
                        gone[gone_key] = where
                    keys.clear()
                elif kind == "row":
                    assert k is not None and digest is not None
                    state[k] = TopicRow(digest, where, msg.key() or b"", p)
                    gone.pop(k, None)
                    keys.add(k)
                elif k is not None:  # removed: a delete, or a tombstone
                    # A tombstone after its delete: the delete says more (its position).
                    if state.pop(k, None) is not None or k not in gone or kind == "delete":
                        gone[k] = where
                    keys.discard(k)
        return found
    finally:
        consumer.close()


def _xor(digests: Iterable[bytes]) -> int:
    acc = 0
    for d in digests:
        acc ^= int.from_bytes(d, "big")
    return acc


def compare(report: Report, found: TopicState, chunks: Iterator[TableChunk]) -> None:
    """Compare the table's chunks with the topic's state; fills ``report``. The topic's
    keys left when the table ends are the extra ones."""
    topic = found.rows
    seen: set[Key] = set()
    for table_chunk in chunks:
        chunk = table_chunk.rows
        at = report.database_position = table_chunk.position
        if not chunk:
            continue
        report.chunks += 1
        report.rows += len(chunk)
        present = [(k, topic.get(k)) for k, _text, _d in chunk]
        have = [t for _k, t in present if t is not None]
        same = len(have) == len(chunk) and _xor(t.digest for t in have) == _xor(
            d for _k, _text, d in chunk
        )
        seen.update(k for k, _text, _d in chunk)
        if same:
            continue
        report.differing_chunks.append((chunk[0][1], chunk[-1][1]))
        for (k, _text, d), (_k, t) in zip(chunk, present, strict=True):
            if t is None:
                report.differences.append(Difference(k, "missing", found.gone.get(k), at))
            elif t.digest != d:
                report.differences.append(Difference(k, "differs", t.position, at))
    report.topic_rows = len(topic)
    for k, t in topic.items():
        if k not in seen:
            # Its key range was read by some chunk; the last one's position bounds them all.
            known = (t.partition, t.record_key) if t.record_key else None
            report.differences.append(
                Difference(k, "extra", t.position, report.database_position, known)
            )


def check_table(
    table: str,
    topic: str,
    behind: Callable[[], str | None],
    first: Callable[[], Report],
    state_of: Callable[[list[Key]], TopicState],
    reader: TableReader,
    rechecks: int,
) -> Report:
    """The table against its topic: ``first`` compares them once capture passed the
    database's position (``behind``: ``None`` once it has), then the differing keys
    are checked again, table (``reader``) and topic (``state_of``), up to ``rechecks``
    times, each once capture passed the database again. Capture behind at any of
    these points: the report says so and its differences are not called gaps."""
    lag = behind()
    if lag is not None:
        return Report(table, topic, behind=lag, compared=False)
    report = first()
    for _ in range(rechecks):
        if not report.differences:
            break
        lag = behind()
        if lag is not None:
            report.behind = lag
            break
        keys = [d.key for d in report.differences]
        again = Report(table, topic)
        compare(again, state_of(keys), iter([reader.rows_for(keys)]))
        report.differences = again.differences
        report.database_position = again.database_position
        if not report.differences:
            report.differing_chunks = []
    return report


def capture_progress(
    config: Any, dsn: str, side: Any, kafka: dict[str, Any], wait_s: float
) -> Callable[[], str | None]:
    """A check of capture against the database, on the catalog connection ``side``:
    ``None`` once capture confirmed a position at or past the database's position of
    the call (PostgreSQL: the slot's confirmed position; MySQL/MariaDB: the binlog
    position in capture's state topic), waiting up to ``wait_s``; else one sentence
    saying capture is behind or stopped, and by how much."""
    if is_mysql(dsn):
        return partial(_binlog_behind, config, side, kafka, wait_s)
    return partial(_slot_behind, config.slot_name, side, wait_s)


_LAG = "so a difference may be a change capture has not written yet"


def _slot_behind(slot_name: str, side: Any, wait_s: float) -> str | None:
    from bizevents.capture.postgres.pgoutput import format_lsn, parse_lsn

    def now() -> int:
        with side.cursor() as cur:
            cur.execute("SELECT pg_current_wal_lsn()::text")
            row = cur.fetchone()
        return parse_lsn(str(row[0]))

    def confirmed() -> int:
        slot = pg.slot_info(side, slot_name)
        return (slot.confirmed_flush_lsn or 0) if slot is not None else 0

    lsn = now()
    if wait_until(lambda: confirmed() >= lsn, wait_s):
        return None
    slot = pg.slot_info(side, slot_name)
    if slot is None:
        return (
            f"capture's slot {slot_name} does not exist (capture has not run, or its slot "
            f"was dropped), {_LAG}"
        )
    at = slot.confirmed_flush_lsn or 0
    state = "stopped" if slot.active_pid is None else "running but behind"
    return (
        f"capture is {state}: its slot {slot_name} confirmed {format_lsn(at)}, "
        f"{lsn - at} bytes of WAL before the database's {format_lsn(lsn)} after {wait_s:g} s, "
        f"{_LAG}"
    )


def _binlog_behind(config: Any, side: Any, kafka: dict[str, Any], wait_s: float) -> str | None:
    from bizevents.capture.core.state import StateStore
    from bizevents.capture.mariadb import queries as my

    store = StateStore(kafka, config.offsets_topic_name, config.server)

    def stored() -> tuple[str, int]:
        at = store.read(store.position_key()) or {}
        return str(at.get("file", "")), int(at.get("pos", 0))

    now = my.master_position(side)
    if wait_until(lambda: stored() >= (now.file, now.pos), wait_s):
        return None
    file, pos = stored()
    if not file:
        return (
            f"capture has stored no binlog position in {config.offsets_topic_name} "
            f"(it has not run, or its position was lost), {_LAG}"
        )
    if file == now.file:
        gap = f"{now.pos - pos} bytes of binlog"
    else:
        files = my.binlog_files(side)
        later = files.index(now.file) - files.index(file) if file in files else None
        gap = f"{later} binlog files" if later is not None else "binlogs the server no longer has"
    return (
        f"capture is behind or stopped: its stored position {file}:{pos} is {gap} before "
        f"the server's {now.file}:{now.pos} after {wait_s:g} s, {_LAG}"
    )


def wait_until(passed: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``passed`` until true or ``timeout_s``; whether it became true."""
    deadline = time.monotonic() + timeout_s
    while not passed():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


class TableReader:
    """What both sources' readers of a table share: each row put through capture's
    codec and the topic's decoder (the canonical encoding), the table in chunks by key,
    and the rows of given keys. A source reads rows (:meth:`_read_rows`), says where
    its log is (:meth:`_position_now`) and writes key conditions."""

    def __init__(self, conn: Any, codec: Any, lookup: Callable[[int], str], source: bytes) -> None:
        self.conn = conn
        self.codec = codec
        codec.set_schema_ids(LOCAL_KEY_ID, LOCAL_VALUE_ID)
        local = {LOCAL_KEY_ID: codec.key_schema_json(), LOCAL_VALUE_ID: codec.value_schema_json()}
        self.decoder = AvroDecoder(lambda i: local[i] if i in local else lookup(i))
        self._source = source

    def _read_rows(
        self, after: list[Any] | None, where: Condition | None, limit: int
    ) -> tuple[list[Any], str]:
        """Rows by key after ``after`` meeting ``where`` (at most ``limit``), in a
        consistent read of their own, and the database's position of that read."""
        raise NotImplementedError

    def _position_now(self) -> str:
        raise NotImplementedError

    def _key_text(self, values: Any) -> list[Any]:
        """A row's key values as the source gave them (for SQL conditions)."""
        raise NotImplementedError

    def _value(self, value: Any) -> Value:
        """A key value as a condition holds it: a number, text or bytes as it is, any
        other value (a date, a UUID) as its text, which the database reads back."""
        if isinstance(value, bool | int | Decimal | str | bytes):
            return value
        if isinstance(value, float):
            return Decimal(repr(value))
        return str(value)

    def keys_condition(self, keys: list[Key]) -> Condition:
        """The condition of exactly these keys."""
        names = self.key_names
        rows = tuple(
            tuple(self._value(v) for v in self._bound([dict(k)[n] for n in names])) for k in keys
        )
        return InList(names, rows)

    def range_condition(self, low: list[Any], high: list[Any]) -> Condition:
        """The condition of the keys from ``low`` to ``high`` (inclusive)."""
        return all_of([self._compare(">=", low), self._compare("<=", high)])

    def _compare(self, op: str, bound: list[Any]) -> Condition:
        return Compare(self.key_names, op, tuple(self._value(v) for v in self._bound(bound)))

    def _bound(self, values: list[Any]) -> list[Any]:
        """A key's values as a bound of a key range (as they are, unless the source
        compares some otherwise)."""
        return values

    def between(self, low: list[Any] | None, high: list[Any] | None) -> TableChunk:
        """The rows whose key is at or after ``low`` and before ``high`` (``None``: no
        bound), in a consistent read of their own."""
        parts = [self._compare(op, b) for op, b in ((">=", low), ("<", high)) if b is not None]
        got, position = self._read_rows(None, all_of(parts) if parts else None, 2**62)
        return TableChunk([self.row(v) for v in got], position)

    @property
    def key_names(self) -> tuple[str, ...]:
        """The key's columns, in the key's order."""
        raise NotImplementedError

    def boundaries(self, every: int) -> list[tuple[Key, list[Any]]]:
        """Where the table's chunks of ``every`` rows start: each first row's key (and
        its values as the source gave them), in the database's order."""
        raise NotImplementedError

    #: Whether :meth:`order_of` asks the database (else it is the identity).
    database_order = False

    def order_of(self, keys: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Each key's decoded values (in the key's order) as values that Python orders
        as the database orders the keys. Here: as they are (numbers, dates, times and
        text under a binary collation order alike)."""
        return keys

    def row(self, values: Any) -> tuple[Key, list[Any], bytes]:
        codec = self.codec
        value = codec.envelope("r", None, codec.row(values), self._source, encoded_ts(0))
        decoded = self.decoder.decode(codec.key(values), value)
        assert isinstance(decoded, ChangeEvent) and decoded.after is not None
        return key_of(decoded.key), self._key_text(values), digest_of(decoded.after)

    def chunks(self, rows: int) -> Iterator[TableChunk]:
        """The table in chunks of ``rows`` keys, in key order."""
        after: list[Any] | None = None
        while True:
            got, position = self._read_rows(after, None, rows)
            chunk = TableChunk([self.row(v) for v in got], position)
            yield chunk
            if len(got) < rows:
                return
            after = chunk.rows[-1][1]

    def rows_for(self, keys: list[Key]) -> TableChunk:
        """The rows of these keys as the table has them now."""
        out: list[tuple[Key, list[Any], bytes]] = []
        position = self._position_now() if not keys else ""
        for start in range(0, len(keys), 500):
            batch = keys[start : start + 500]
            got, position = self._read_rows(None, self.keys_condition(batch), len(batch))
            out.extend(self.row(v) for v in got)
        return TableChunk(out, position)


class PgTable(TableReader):
    """A PostgreSQL table read for verify."""

    def __init__(
        self,
        conn: Any,
        info: Any,
        codec: Any,
        lookup: Callable[[int], str],
    ) -> None:
        super().__init__(conn, codec, lookup, codec.source(0, 0, "true", None).with_long(0))
        self.info = info
        names = [c.name for c in info.relation.columns]
        self._key_at = [names.index(k) for k in info.key_names]

    def _read(self, after: list[Any] | None, where: Condition | None, limit: int) -> list[Any]:
        info = self.info
        _snapshot, cur = pg.open_chunk(
            self.conn, info.relation, info.key_names, after, where, limit
        )
        try:
            return list(cur.fetchall())
        finally:
            pg.end_chunk(self.conn, cur)

    def _read_rows(
        self, after: list[Any] | None, where: Condition | None, limit: int
    ) -> tuple[list[Any], str]:
        return self._read(after, where, limit), self._position_now()

    def _position_now(self) -> str:
        """The WAL's insert position now: a chunk just read is at or before it."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT pg_current_wal_insert_lsn()::text")
            row = cur.fetchone()
        self.conn.commit()
        return f"LSN {row[0]}"

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(self.info.key_names)

    def _key_text(self, values: Any) -> list[Any]:
        return [values[i] for i in self._key_at]

    def boundaries(self, every: int) -> list[tuple[Key, list[Any]]]:
        rows = pg.every_nth_row(self.conn, self.info.relation, self.info.key_names, every)
        return [(k, text) for k, text, _digest in (self.row(v) for v in rows)]


class MyTable(TableReader):
    """A MySQL/MariaDB table read for verify.

    Its keys are ordered as the server orders them: a string key column by its
    collation (``utf8mb4_general_ci`` puts ``a`` before ``B``, and pads with spaces:
    ``a\t`` before ``a``), an ENUM by its index. :meth:`order_of` turns keys into values
    that Python orders the same way, so that ``verify --spark`` places a topic's key in
    the chunk the server reads it in."""

    def __init__(
        self, conn: Any, database: str, name: str, codec: Any, lookup: Callable[[int], str]
    ) -> None:
        source = codec.source(ts_ms=0, snapshot="true", server_id=0, file="", pos=0, gtid=None)
        super().__init__(conn, codec, lookup, source(0))
        self.database = database
        self.name = name
        self._orders = self._key_orders()
        self.database_order = any(o is not None for o in self._orders)

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(self.codec.key_names)

    @property
    def _table(self) -> str:
        return f"{_quoted(self.database)}.{_quoted(self.name)}"

    def _key_orders(self) -> list[dict[str, int] | tuple[str, str, int] | None]:
        """Per key column how the server orders it, where Python's order of its decoded
        values differs: an ENUM's labels' indexes, a string's ``(character set,
        collation, length)`` for its weights; ``None``: as decoded."""
        labels = {c.name: c.labels for c in self.codec.table.columns}
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_SET_NAME, COLLATION_NAME, "
                "CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (self.database, self.name),
            )
            columns = {str(r[0]): r[1:] for r in cur.fetchall()}
        self.conn.commit()
        orders: list[dict[str, int] | tuple[str, str, int] | None] = []
        for name in self.key_names:
            data_type, charset, collation, length = columns[name]
            if str(data_type).lower() == "enum":
                # ENUM orders by index (1 for the first label; 0 for the empty error value).
                orders.append({label: i + 1 for i, label in enumerate(labels[name])})
            elif (
                str(data_type).lower() in _STRING_TYPES
                and charset is not None
                and _NAME.fullmatch(str(charset))
                and _NAME.fullmatch(str(collation))
            ):
                # Longer strings are placed by their first _WEIGHT_CHARS characters: a
                # key placed in a neighbouring chunk costs a key-by-key look, not a gap.
                orders.append((str(charset), str(collation), min(int(length), _WEIGHT_CHARS)))
            else:
                orders.append(None)
        return orders

    def order_of(self, keys: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Strings as their collation's weights (``WEIGHT_STRING``, padded to the
        column's length as a ``PAD SPACE`` collation compares them; asked of the server,
        a query per 500 keys), ENUM labels as their indexes."""
        out = [list(k) for k in keys]
        for i, how in enumerate(self._orders):
            if isinstance(how, dict):
                for k in out:
                    k[i] = how.get(k[i], 0)
            elif how is not None:
                weights = self._weights(how, [str(k[i]) for k in out])
                for k, w in zip(out, weights, strict=True):
                    k[i] = w
        return [tuple(k) for k in out]

    def _weights(self, how: tuple[str, str, int], values: list[str]) -> list[bytes]:
        charset, collation, length = how
        weight = f"WEIGHT_STRING(CONVERT(%s USING {charset}) COLLATE {collation} AS CHAR({length}))"
        out: list[bytes] = []
        with self.conn.cursor() as cur:
            for start in range(0, len(values), 500):
                batch = values[start : start + 500]
                cur.execute("SELECT " + ", ".join([weight] * len(batch)), batch)
                out.extend(bytes(w) for w in cur.fetchone())
        self.conn.commit()
        return out

    def boundaries(self, every: int) -> list[tuple[Key, list[Any]]]:
        import pymysql.cursors

        keys = ", ".join(_quoted(k) for k in self.key_names)
        query = (
            f"SELECT * FROM (SELECT t.*, ROW_NUMBER() OVER (ORDER BY {keys}) AS {_ROW_NUMBER} "
            f"FROM {self._table} t) numbered WHERE {_ROW_NUMBER} % {int(every)} = 1 "
            f"ORDER BY {_ROW_NUMBER}"
        )
        with self.conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(query)
            rows = list(cur.fetchall())
        self.conn.commit()
        out = []
        for values in rows:
            values.pop(_ROW_NUMBER.strip("`"))
            key, text, _digest = self.row(values)
            out.append((key, text))
        return out

    def _read_rows(
        self, after: list[Any] | None, where: Condition | None, limit: int
    ) -> tuple[list[Any], str]:
        from bizevents.capture.mariadb import queries as my

        if after is not None:
            after = self._bound(after)
        position, got = my.read_chunk(
            self.conn, self.database, self.name, self.codec.key_names, after, where, limit
        )
        return got, binlog_position(position)

    def _position_now(self) -> str:
        from bizevents.capture.mariadb import queries as my

        return binlog_position(my.master_position(self.conn))

    def _key_text(self, values: Any) -> list[Any]:
        return [values[k] for k in self.codec.key_names]

    def _value(self, value: Any) -> Value:
        if isinstance(value, bool | int | Decimal | str | bytes | float):
            return super()._value(value)
        # A date or a time: its text as PyMySQL writes it, which the server reads back.
        return str(self.conn.escape(value)).strip("'")

    def _bound(self, values: list[Any]) -> list[Any]:
        from bizevents.capture.mariadb import queries as my

        return my.key_bound(self.codec.table, self.key_names, values)


#: MariaDB's string types (ordered by a collation).
_STRING_TYPES = frozenset(("char", "varchar", "tinytext", "text", "mediumtext", "longtext"))
#: A character set's or collation's name (put into SQL as it is).
_NAME = re.compile(r"[A-Za-z0-9_]+")
#: The characters of a string key whose weights place it among the chunks.
_WEIGHT_CHARS = 512
_ROW_NUMBER = "`bizevents_row_number`"


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def binlog_position(position: Any) -> str:
    """A MariaDB binlog position (``capture.mysql.BinlogPosition``) as verify prints it."""
    gtid = f" GTID {position.gtid}" if position.gtid else ""
    return f"{position.file}:{position.pos}{gtid}"


def pg_tables(
    side: Any, chunks: Any, config: Any, names: list[str], lookup: Callable[[int], str]
) -> list[tuple[str, str, PgTable]]:
    """``(table, topic, reader)`` of each PostgreSQL table to verify (``names``, else the
    capture's tables, else its publication's): the catalog read on ``side``, the rows on
    ``chunks`` (not in autocommit), each row through the codec capture writes it with."""
    from bizevents.capture.postgres.codec import TableCodec
    from bizevents.capture.postgres.types import PgTypeMapper, enum_types_from_rows

    with side.cursor() as cur:
        cur.execute("SELECT current_database()")
        database = str(cur.fetchone()[0])
    names = (
        names or list(config.tables) or pg.publication_tables(side, config.publication_name) or []
    )
    labels, arrays = enum_types_from_rows(pg.load_enum_rows(side))
    types = PgTypeMapper(
        enum_labels=labels, array_elements=arrays, unknown_as_text=config.unknown_as_text
    )
    readers = []
    for info in pg.describe_tables(side, names):
        topic = f"{config.prefix}.{info.relation.namespace}.{info.relation.name}"
        codec = TableCodec(
            server=config.server,
            database=database,
            topic=topic,
            relation=info.relation,
            key_names=info.key_names,
            types=types,
            keep=config.column_filter(info.qualified).keeps,
            key_nullable=info.key_nullable,
        )
        readers.append((info.qualified, topic, PgTable(chunks, info, codec, lookup)))
    return readers


def my_tables(
    side: Any, chunks: Any, config: Any, names: list[str], lookup: Callable[[int], str]
) -> list[tuple[str, str, MyTable]]:
    """As :func:`pg_tables`, for MySQL/MariaDB tables (``names``, else the capture's)."""
    from bizevents.capture.mariadb import queries as my
    from bizevents.capture.mariadb.codec import MyTableCodec, key_columns

    readers = []
    for qualified in names or list(config.tables):
        database, _, name = qualified.partition(".")
        layout = my.catalog_table(side, database, name)
        topic = f"{config.prefix}.{qualified}"
        codec = MyTableCodec(
            server=config.server,
            topic=topic,
            table=layout,
            key_names=key_columns(layout, config.keys.get(qualified)),
            keep=config.column_filter(qualified).keeps,
        )
        readers.append((qualified, topic, MyTable(chunks, database, name, codec, lookup)))
    return readers


def is_mysql(dsn: str) -> bool:
    """Whether the DSN names a MySQL/MariaDB server (else PostgreSQL)."""
    return dsn.startswith(("mysql:", "mariadb:"))


def open_readers(
    config: Any, dsn: str, names: list[str], lookup: Callable[[int], str]
) -> tuple[list[tuple[str, str, TableReader]], Any, Callable[[], None]]:
    """``(table, topic, reader)`` of each table to verify, on two new connections (one
    for the catalog, one for the rows); also the catalog's connection (for the server's
    position) and how to close both."""
    import psycopg2
    import pymysql

    try:
        if is_mysql(dsn):
            from bizevents.capture.mariadb import queries as my

            side = my.connect(dsn)
            chunks = my.connect(dsn, autocommit=False)
            tables: Callable[..., list[Any]] = my_tables
        else:
            side = pg.connect(dsn, application="bizevents-verify")
            chunks = pg.connect(dsn, autocommit=False, application="bizevents-verify")
            tables = pg_tables
    except (psycopg2.OperationalError, pymysql.err.OperationalError) as exc:
        # Refused credentials and malformed DSNs are DatabaseAccessError already: what
        # is left is a server not answering, in the driver's words (host and port, never
        # the password).
        reason = str(exc.args[-1] if isinstance(exc, pymysql.MySQLError) else exc)
        raise DatabaseUnreachableError(
            f"the database is unreachable: {reason.strip().splitlines()[0]}"
        ) from None

    def close() -> None:
        side.close()
        chunks.close()

    try:
        return tables(side, chunks, config, names, lookup), side, close
    except BaseException:
        close()
        raise
