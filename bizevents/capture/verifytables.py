"""Verify's readers of a table, one per source (PostgreSQL, MariaDB/MySQL) on a shared
base: each row put through capture's codec and the topic's decoder (the canonical
encoding), the table in chunks by key, in the order the database sorts the key, and the
rows of given keys."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

from bizevents.capture.core.filters import Compare, Condition, InList, Value, all_of
from bizevents.capture.exceptions import DatabaseUnreachableError
from bizevents.capture.postgres import queries as pg
from bizevents.capture.postgres.codec import encoded_ts
from bizevents.capture.verify import (
    LOCAL_KEY_ID,
    LOCAL_VALUE_ID,
    Key,
    TableChunk,
    digest_of,
    key_of,
)
from bizevents.contracts.envelope import ChangeEvent
from bizevents.contracts.technical import AvroDecoder

__all__ = [
    "MyTable",
    "PgTable",
    "TableReader",
    "binlog_position",
    "is_mysql",
    "my_tables",
    "open_readers",
    "pg_tables",
]


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
        position, cur = my.open_chunk(
            self.conn, self.database, self.name, self.codec.key_names, after, where, limit
        )
        try:
            got = list(cur.fetchall())
        finally:
            my.end_chunk(self.conn, cur)
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
    from bizevents.capture.postgres.codec import captured_codec
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
        codec = captured_codec(
            config, database, info.relation, info.key_names, types, info.key_nullable
        )
        readers.append((info.qualified, codec.topic, PgTable(chunks, info, codec, lookup)))
    return readers


def my_tables(
    side: Any, chunks: Any, config: Any, names: list[str], lookup: Callable[[int], str]
) -> list[tuple[str, str, MyTable]]:
    """As :func:`pg_tables`, for MySQL/MariaDB tables (``names``, else the capture's)."""
    from bizevents.capture.mariadb import queries as my
    from bizevents.capture.mariadb.codec import captured_codec

    readers = []
    for qualified in names or list(config.tables):
        database, _, name = qualified.partition(".")
        layout = my.catalog_table(side, database, name)
        codec = captured_codec(config, layout)
        readers.append((qualified, codec.topic, MyTable(chunks, database, name, codec, lookup)))
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
