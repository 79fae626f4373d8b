"""The MySQL/MariaDB side of capture: connections, the server-settings check, the
catalog's table layouts, the snapshot's position and the binlog's table maps.

Everything here talks to the server through PyMySQL; the binlog itself is read by
``pymysqlreplication`` in :mod:`bizevents.capture.mariadb.capture`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote, urlparse

import pymysql
import pymysql.cursors

from bizevents.capture.core.filters import Condition, to_sql
from bizevents.capture.exceptions import CaptureError, DatabaseAccessError
from bizevents.capture.mariadb import types as t
from bizevents.capture.mariadb.codec import MyTable
from bizevents.capture.mariadb.types import MyColumn
from bizevents.plumbing.errors import ConfigError

__all__ = [
    "BinlogPosition",
    "ServerSettingsError",
    "catalog_table",
    "check_server",
    "connect",
    "connection_settings",
    "json_columns",
    "key_bound",
    "read_snapshot_rows",
    "snapshot_position",
    "table_from_map",
]


class ServerSettingsError(CaptureError):
    """The server is not set up for row-based capture (a setting or a privilege)."""


@dataclass(frozen=True, slots=True)
class BinlogPosition:
    """Where in the binlog: file and position (the next event), and the GTID state."""

    file: str
    pos: int
    gtid: str | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}" + (f" (GTID {self.gtid})" if self.gtid else "")


def connection_settings(dsn: str) -> dict[str, Any]:
    """PyMySQL keyword arguments from ``mysql://user:password@host:port/database``.

    A DSN that does not parse is one sentence that never repeats it (it holds the
    password)."""
    u = urlparse(dsn)
    if u.scheme not in ("mysql", "mariadb") or not u.hostname:
        raise ConfigError(
            "the MySQL DSN does not read mysql://user:password@host:port/database (it is "
            "not repeated here because it holds the password): check dsn in the capture file"
        )
    try:
        port = u.port or 3306
    except ValueError:
        raise ConfigError(
            "the MySQL DSN's port is not a number between 0 and 65535 (the DSN is not "
            "repeated here because it holds the password): check dsn in the capture file"
        ) from None
    return {
        "host": u.hostname,
        "port": port,
        "user": unquote(u.username or ""),
        "password": unquote(u.password or ""),
    }


#: The server's "no" (retrying cannot help): access denied for the user or to the
#: database, an unknown database.
_REFUSED: Final = {1044, 1045, 1049, 1698}


def connect(dsn: str, **extra: Any) -> pymysql.connections.Connection[Any]:
    """A connection in UTC with utf8mb4, autocommit unless told otherwise.

    Refused credentials raise :class:`DatabaseAccessError` (terminal, never retried,
    the server's sentence, which names the user and never the password); an
    unreachable server stays an ``OperationalError``, which capture retries."""
    settings = connection_settings(dsn)
    try:
        return pymysql.connect(
            **settings,
            charset="utf8mb4",
            autocommit=extra.pop("autocommit", True),
            init_command="SET time_zone = '+00:00'",
            connect_timeout=10,
            **extra,
        )
    except pymysql.err.OperationalError as exc:
        code = exc.args[0] if exc.args else None
        if code in _REFUSED:
            reason = str(exc.args[1]) if len(exc.args) > 1 else "access denied"
            password = settings["password"]
            if password:
                reason = reason.replace(password, "***")
            raise DatabaseAccessError(f"the server refused the connection: {reason}") from None
        raise


_REQUIRED = (
    ("log_bin", "1", "log_bin", "start the server with --log-bin"),
    ("binlog_format", "ROW", "binlog_format", "SET GLOBAL binlog_format = 'ROW' (and in my.cnf)"),
    (
        "binlog_row_image",
        "FULL",
        "binlog_row_image",
        "SET GLOBAL binlog_row_image = 'FULL' (and in my.cnf)",
    ),
    (
        "binlog_row_metadata",
        "FULL",
        "binlog_row_metadata",
        "SET GLOBAL binlog_row_metadata = 'FULL' (and in my.cnf; MySQL 8.0.1+ or MariaDB 10.5+)",
    ),
)


def check_server(conn: pymysql.connections.Connection[Any]) -> int:
    """Refuse a server not set up for capture, naming the setting and the fix; returns
    the server's ``server_id``."""
    with conn.cursor() as cur:
        for variable, want, name, fix in _REQUIRED:
            try:
                cur.execute(f"SELECT @@GLOBAL.{variable}")
                row = cur.fetchone()
            except pymysql.err.OperationalError:
                row = None
            got = "" if row is None or row[0] is None else str(row[0]).upper()
            if got != want:
                raise ServerSettingsError(
                    f"the server's {name} is {got or 'not available'}, capture needs {want}: "
                    f"{fix}, then restart capture"
                )
        cur.execute("SELECT @@GLOBAL.server_id")
        row = cur.fetchone()
        server_id = int(row[0]) if row else 0
        if server_id == 0:
            raise ServerSettingsError(
                "the server's server_id is 0, capture needs a non-zero one: SET GLOBAL "
                "server_id = 1 (any number unique among its replicas, and in my.cnf), then "
                "restart capture"
            )
        cur.execute("SHOW GRANTS")
        grants = " ".join(str(r[0]).upper() for r in cur.fetchall())
    everything = re.search(r"GRANT ALL PRIVILEGES ON \*\.\*", grants) is not None
    missing = [
        p
        for p, alternatives in (
            ("REPLICATION SLAVE", ("REPLICATION SLAVE", "REPLICATION REPLICA")),
            ("REPLICATION CLIENT", ("REPLICATION CLIENT", "BINLOG MONITOR", "SUPER")),
        )
        if not everything and not any(a in grants for a in alternatives)
    ]
    if missing:
        raise ServerSettingsError(
            f"the capture user lacks the {' and '.join(missing)} privilege"
            f"{'s' if len(missing) > 1 else ''}: GRANT {', '.join(missing)} ON *.* TO "
            "the capture user, then restart capture"
        )
    return server_id


def master_position(conn: pymysql.connections.Connection[Any]) -> BinlogPosition:
    """The binlog's current end."""
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
        if row is None:
            raise ServerSettingsError("the server writes no binlog: start it with --log-bin")
        return BinlogPosition(str(row[0]), int(row[1]), _gtid_at(cur, str(row[0]), int(row[1])))


def _gtid_at(cur: Any, file: str, pos: int) -> str | None:
    try:
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
        row = cur.fetchone()
    except pymysql.err.MySQLError:  # MySQL has no BINLOG_GTID_POS
        try:
            cur.execute("SELECT @@GLOBAL.gtid_executed")
            row = cur.fetchone()
        except pymysql.err.MySQLError:
            return None
    return str(row[0]) if row and row[0] is not None else None


def snapshot_position(conn: pymysql.connections.Connection[Any]) -> BinlogPosition:
    """Open a consistent snapshot on ``conn`` and return the binlog position it matches.

    MariaDB says, without any lock, which binlog position an InnoDB consistent
    snapshot corresponds to (``binlog_snapshot_file``/``_position``: the snapshot and
    the binlog commit together). Elsewhere (MySQL), Debezium's way: a global read lock
    held only while the position is read and the snapshot opened.
    """
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
        if status.get("binlog_snapshot_file"):
            file, pos = status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
            return BinlogPosition(file, pos, _gtid_at(cur, file, pos))
        cur.execute("ROLLBACK")
        cur.execute("FLUSH TABLES WITH READ LOCK")
        try:
            position = master_position(conn)
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        finally:
            cur.execute("UNLOCK TABLES")
        return position


def table_exists(conn: pymysql.connections.Connection[Any], qualified: str) -> bool:
    """Whether the table ``database.table`` exists."""
    database, _, table = qualified.partition(".")
    with conn.cursor() as cur:
        cur.execute(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (database, table),
        )
        return cur.fetchone() is not None


def binlog_files(conn: pymysql.connections.Connection[Any]) -> list[str]:
    """The binlog files the server still has."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [str(r[0]) for r in cur.fetchall()]


def json_columns(conn: pymysql.connections.Connection[Any], database: str, table: str) -> set[str]:
    """MariaDB's JSON columns of a table (LONGTEXT with a ``json_valid`` check)."""
    with conn.cursor() as cur:
        try:
            cur.execute(
                "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
                "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s",
                (database, table),
            )
        except pymysql.err.MySQLError:
            return set()
        found = set()
        for (clause,) in cur.fetchall():
            m = re.fullmatch(r"\s*json_valid\(`((?:[^`]|``)+)`\)\s*", str(clause))
            if m:
                found.add(m.group(1).replace("``", "`"))
        return found


_TYPE_CODES = {
    "tinyint": t.TINY,
    "smallint": t.SHORT,
    "mediumint": t.INT24,
    "int": t.LONG,
    "bigint": t.LONGLONG,
    "float": t.FLOAT,
    "double": t.DOUBLE,
    "decimal": t.NEWDECIMAL,
    "date": t.DATE,
    "datetime": t.DATETIME2,
    "timestamp": t.TIMESTAMP2,
    "time": t.TIME2,
    "year": t.YEAR,
    "bit": t.BIT,
    "enum": t.ENUM,
    "set": t.SET,
    "json": t.JSON,
    "char": t.STRING,
    "binary": t.STRING,
    "varchar": t.VARCHAR,
    "varbinary": t.VARCHAR,
    "tinytext": t.BLOB,
    "text": t.BLOB,
    "mediumtext": t.BLOB,
    "longtext": t.BLOB,
    "tinyblob": t.BLOB,
    "blob": t.BLOB,
    "mediumblob": t.BLOB,
    "longblob": t.BLOB,
}


def _labels(column_type: str) -> tuple[str, ...]:
    inner = column_type[column_type.index("(") + 1 : column_type.rindex(")")]
    return tuple(m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", inner))


def catalog_table(conn: pymysql.connections.Connection[Any], database: str, table: str) -> MyTable:
    """A table's layout as the catalog says now (for the snapshot), described like a
    binlog table map would describe it."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, "
            "NUMERIC_SCALE, DATETIME_PRECISION, CHARACTER_SET_NAME, CHARACTER_OCTET_LENGTH "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        rows = cur.fetchall()
        if not rows:
            raise CaptureError(f"table {database}.{table} does not exist or is not visible")
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE "
            "TABLE_SCHEMA = %s AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' "
            "ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        primary = tuple(str(r[0]) for r in cur.fetchall())
    jsons = json_columns(conn, database, table)
    columns = []
    for name, data_type, column_type, nullable, prec, scale, dt_prec, charset, octets in rows:
        data_type = str(data_type).lower()
        column_type = str(column_type)
        code = _TYPE_CODES.get(data_type)
        if code is None:
            code = t.GEOMETRY
        binary = data_type in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
        bits = int(prec or 1) if code == t.BIT else 0
        columns.append(
            MyColumn(
                name=str(name),
                type=code,
                unsigned="unsigned" in column_type.lower(),
                nullable=str(nullable) == "YES",
                fsp=int(dt_prec or 0),
                precision=int(prec) if code == t.NEWDECIMAL and prec is not None else None,
                scale=int(scale) if code == t.NEWDECIMAL and scale is not None else None,
                binary=binary or (charset is None and code in (t.STRING, t.VARCHAR, t.BLOB)),
                labels=_labels(column_type) if code in (t.ENUM, t.SET) else (),
                bits=bits,
                json=str(name) in jsons,
                pad=int(octets or 0) if data_type == "binary" else 0,
            )
        )
    return MyTable(database, table, tuple(columns), primary)


def table_from_map(event: Any, jsons: set[str]) -> MyTable:
    """The layout a binlog table map event describes (``binlog_row_metadata=FULL``)."""
    columns = []
    null_bits = event.null_bitmask
    for i, c in enumerate(event.columns):
        nullable = bool(null_bits[i // 8] & (1 << (i % 8)))
        code = c.type
        labels: tuple[str, ...] = ()
        if code == t.ENUM and c.enum_values:
            labels = tuple(v for v in c.enum_values[1:])  # [0] is the library's ''
        elif code == t.SET and c.set_values:
            labels = tuple(c.set_values)
        columns.append(
            MyColumn(
                name=str(c.name),
                type=code,
                unsigned=bool(c.unsigned),
                nullable=nullable,
                fsp=int(getattr(c, "fsp", 0) or 0),
                precision=getattr(c, "precision", None),
                scale=getattr(c, "decimals", None),
                binary=c.character_set_name == "binary"
                or (code in (t.STRING, t.VARCHAR, t.BLOB) and c.character_set_name is None),
                labels=labels,
                bits=int(getattr(c, "bits", 0) or 0),
                json=str(c.name) in jsons,
                pad=int(c.max_length)
                if code == t.STRING and c.character_set_name == "binary"
                else 0,
            )
        )
    primary = tuple(
        str(event.columns[i].name) for i in event.optional_metadata.simple_primary_key_list
    )
    return MyTable(str(event.schema), str(event.table), tuple(columns), primary)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def key_bound(table: MyTable, key_names: Sequence[str], values: Sequence[Any]) -> list[Any]:
    """A key's values (in ``key_names``' order) as a bound of a key range in SQL: an
    ENUM's label as its index. The server orders an ENUM key by index, but compares it
    with a label as a string (``(kind, id) > ('zeta', 1)`` would skip every ``'alpha'``
    row after ``'zeta'`` in ``ENUM('zeta', 'alpha')``), and with a number by index."""
    labels = {c.name: c.labels for c in table.columns if c.type == t.ENUM}
    return [
        labels[name].index(v) + 1 if name in labels and v in labels[name] else v
        for name, v in zip(key_names, values, strict=True)
    ]


def read_snapshot_rows(
    conn: pymysql.connections.Connection[Any], database: str, table: str, fetch_rows: int
) -> Iterator[list[dict[str, Any]]]:
    """The table's rows in the open snapshot, ``fetch_rows`` at a time (an unbuffered
    cursor keeps memory bounded)."""
    with conn.cursor(pymysql.cursors.SSDictCursor) as cur:
        cur.execute(f"SELECT * FROM {_quoted(database)}.{_quoted(table)}")
        while rows := cur.fetchmany(fetch_rows):
            yield list(rows)


def open_chunk(
    conn: pymysql.connections.Connection[Any],
    database: str,
    table: str,
    key_names: tuple[str, ...],
    after: list[Any] | None,
    where: Condition | None,
    limit: int,
    timeout_s: float | None = None,
) -> tuple[BinlogPosition, Any]:
    """The next rows by key after ``after`` (those meeting ``where``), at most
    ``limit``, queried in a consistent snapshot of their own, read only, left open:
    ``(the binlog position the snapshot matches, an unbuffered cursor of the rows)``;
    the caller fetches them (a slice at a time) and calls :func:`end_chunk`.
    ``timeout_s``: the query's ``max_statement_time`` (its rows fetched within it).

    Lock-free on MariaDB, which says which binlog position an InnoDB consistent snapshot
    matches; MySQL does not, and is refused with a sentence.
    """
    # PyMySQL formats the query with its parameters: a % of a name is doubled.
    keys = ", ".join(_quoted(k).replace("%", "%%") for k in key_names)
    name = f"{_quoted(database)}.{_quoted(table)}".replace("%", "%%")
    conditions = []
    params: list[Any] = []
    if after is not None:
        conditions.append(f"({keys}) > ({', '.join(['%s'] * len(after))})")
        params.extend(after)
    if where is not None:
        text, values = to_sql(where, "mariadb")
        conditions.append(f"({text})")
        params.extend(values)
    query = (
        _timed(timeout_s)
        + f"SELECT * FROM {name}"
        + (" WHERE " + " AND ".join(conditions) if conditions else "")
        + f" ORDER BY {keys} LIMIT {int(limit)}"
    )
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION READ ONLY, WITH CONSISTENT SNAPSHOT")
        try:
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
            if not status.get("binlog_snapshot_file"):
                raise CaptureError(
                    "incremental snapshots need MariaDB: its consistent snapshot says which "
                    "binlog position it matches (MySQL's would need a global read lock per chunk)"
                )
            position = BinlogPosition(
                status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
            )
            rows = conn.cursor(pymysql.cursors.SSDictCursor)
            try:
                rows.execute(query, params)
            except BaseException:
                rows.close()
                raise
        except BaseException:
            cur.execute("COMMIT")
            raise
    return position, rows


def end_chunk(conn: pymysql.connections.Connection[Any], rows: Any) -> None:
    """The chunk's rows were fetched (or are given up): its transaction ends."""
    rows.close()  # reads what is left of the result: the connection is free again
    with conn.cursor() as cur:
        cur.execute("COMMIT")  # read only: nothing to commit


def check_condition(
    conn: pymysql.connections.Connection[Any],
    database: str,
    table: str,
    where: Condition,
    timeout_s: float,
) -> str | None:
    """``None`` when ``where`` is a valid condition on the table (``EXPLAIN``, in a
    read-only transaction under ``max_statement_time``), else the server's reason."""
    text, params = to_sql(where, "mariadb")
    name = f"{_quoted(database)}.{_quoted(table)}".replace("%", "%%")
    query = f"EXPLAIN SELECT 1 FROM {name} WHERE {text}"
    try:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION READ ONLY")
            try:
                cur.execute(_timed(timeout_s) + query, params)
                cur.fetchall()
            finally:
                cur.execute("ROLLBACK")
    except pymysql.err.MySQLError as exc:
        if not statement_failed(exc):
            raise
        return str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    return None


def _timed(timeout_s: float | None) -> str:
    """The prefix that bounds one statement's time (MariaDB's ``SET STATEMENT``)."""
    if timeout_s is None:
        return ""
    return f"SET STATEMENT max_statement_time = {max(0.001, float(timeout_s)):.3f} FOR "


#: Server errors that mean the connection or the server went away, not the statement.
_GONE: Final = frozenset(
    (1040, 1053, 1077, 1152, 1153, 1154, 1155, 1156, 1157, 1158, 1159, 1160, 1161, 1184, 1927)
)


def statement_failed(exc: pymysql.err.MySQLError) -> bool:
    """Whether the server refused or interrupted a statement (a bad condition, past
    ``max_statement_time``), rather than the connection or the server going away."""
    code = exc.args[0] if exc.args else None
    return isinstance(code, int) and 1000 <= code < 2000 and code not in _GONE
