"""The PostgreSQL side of capture: catalog, publication, slot, exported snapshot.

Everything that talks SQL or the replication protocol to the source database lives
here; :mod:`bizevents.capture.postgres.runner` drives it. Connections pin the session settings of
:data:`bizevents.capture.postgres.types.REPLICATION_SESSION_OPTIONS`, so the snapshot's rows arrive
in the same text forms as the stream's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import psycopg2
import psycopg2.extensions
import psycopg2.extras
from psycopg2 import sql

from bizevents.capture.core.filters import Condition, to_sql
from bizevents.capture.exceptions import CaptureError, DatabaseAccessError, TableNotCapturableError
from bizevents.capture.postgres.messages import Column, Relation, parse_lsn
from bizevents.capture.postgres.types import (
    BUILTIN_TYPE_OIDS,
    ENUM_TYPES_SQL,
    REPLICATION_SESSION_OPTIONS,
)

__all__ = [
    "SlotInfo",
    "TableInfo",
    "connect",
    "create_slot_exporting",
    "describe_tables",
    "drop_slot",
    "ensure_publication",
    "key_columns",
    "load_enum_rows",
    "publication_tables",
    "read_snapshot_rows",
    "replication_connect",
    "slot_info",
]

#: A psycopg2 connection (psycopg2 ships no type information).
Connection: TypeAlias = Any


# libpq's words for a DSN it cannot use; retrying never helps. Its message may quote
# the DSN (password included), so only our own sentence goes on.
_BAD_DSN = re.compile(
    r"invalid (dsn|connection option|integer value|percent-encoded token|URI|\w+ value)"
    r"|missing \"=\"|unterminated quoted string"
    r"|invalid port number",
    re.IGNORECASE,
)
# The server answered and said no: credentials, pg_hba, role or database.
_REFUSED = re.compile(
    r"password authentication failed for user \"(?P<user>[^\"]*)\""
    r"|no pg_hba\.conf entry|role \"[^\"]*\" does not exist|database \"[^\"]*\" does not exist"
    r"|must be superuser or replication role|permission denied to start WAL sender"
    r"|no password supplied|SCRAM authentication requires|authentication method",
    re.IGNORECASE,
)


def _open(dsn: str, **kwargs: Any) -> Any:
    """``psycopg2.connect``, with the failures retrying cannot fix made terminal.

    A DSN libpq cannot parse and a server that refuses the credentials raise
    :class:`DatabaseAccessError` (never retried, its text never quotes the DSN);
    an unreachable server stays an ``OperationalError``, which capture retries.
    """
    if dsn.startswith(("mysql:", "mariadb:")):
        raise DatabaseAccessError(
            "the PostgreSQL DSN is a MySQL/MariaDB one (mysql://...): PostgreSQL needs "
            "postgresql://... or key=value; for MariaDB run `bizevents capture mysql`"
        )
    try:
        return psycopg2.connect(dsn, **kwargs)
    except psycopg2.OperationalError as exc:
        text = str(exc)
        refused = _REFUSED.search(text)
        if refused is not None:
            raise DatabaseAccessError(
                "the database refused the connection: " + _refusal(refused)
            ) from None
        if _BAD_DSN.search(text):
            raise DatabaseAccessError(_MALFORMED) from None
        raise
    except psycopg2.ProgrammingError:  # psycopg2's own DSN parser
        raise DatabaseAccessError(_MALFORMED) from None


_MALFORMED = (
    "the database DSN is malformed (libpq could not parse it; it is not repeated here "
    "because it holds the password): check database.postgres_dsn"
)


def _refusal(match: re.Match[str]) -> str:
    text = match.group(0)
    if match.group("user") is not None:
        return f"password authentication failed for user {match.group('user')!r}"
    return text.replace('"', "'")


def connect(
    dsn: str, *, autocommit: bool = True, application: str = "bizevents-capture"
) -> Connection:
    """A normal connection with the pinned session settings."""
    conn = _open(dsn, options=REPLICATION_SESSION_OPTIONS, application_name=application)
    conn.autocommit = autocommit
    return conn


def replication_connect(dsn: str) -> psycopg2.extras.LogicalReplicationConnection:
    """A logical replication connection (walsender) with the pinned session settings."""
    conn: psycopg2.extras.LogicalReplicationConnection = _open(
        dsn,
        connection_factory=psycopg2.extras.LogicalReplicationConnection,
        options=REPLICATION_SESSION_OPTIONS,
        application_name="bizevents-capture",
    )
    return conn


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A captured table as the catalog describes it."""

    oid: int
    relation: Relation
    primary_key: tuple[str, ...]
    key_names: tuple[str, ...]
    key_nullable: bool

    @property
    def qualified(self) -> str:
        """``schema.table``."""
        return self.relation.qualified_name


_TABLE_SQL = """
SELECT c.oid, n.nspname, c.relname, c.relreplident, c.relkind
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s
"""
_COLUMNS_SQL = """
SELECT a.attname, a.atttypid::int, a.atttypmod
FROM pg_attribute a
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
ORDER BY a.attnum
"""
_INDEX_COLUMNS_SQL = """
SELECT a.attname
FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = %s AND {which}
ORDER BY a.attnum
"""


def _fix(qualified: str, why: str) -> TableNotCapturableError:
    return TableNotCapturableError(
        qualified,
        f"table {qualified} {why}, so its updates and deletes cannot be captured; "
        f"give it a primary key, or run ALTER TABLE {qualified} REPLICA IDENTITY FULL "
        f"(or ALTER TABLE {qualified} REPLICA IDENTITY USING INDEX <a unique index on "
        "NOT NULL columns>)",
    )


def key_columns(
    qualified: str,
    identity: str,
    flagged: Sequence[str],
    primary_key: Sequence[str],
    columns: Sequence[str],
) -> tuple[tuple[str, ...], bool]:
    """The Kafka key's columns of a table and whether they may be null.

    ``d`` (default) and ``i`` (index): the replica identity's columns, which every
    delete and key change carries. ``f`` (full): the primary key if there is one, else
    the whole row (nullable). ``n`` (nothing), or ``d`` without a primary key: refused.
    """
    if identity in ("d", "i"):
        if not flagged:
            raise _fix(qualified, "has no primary key and no replica identity")
        return tuple(flagged), False
    if identity == "f":
        pk = [c for c in primary_key if c in columns]
        if pk:
            return tuple(pk), False
        return tuple(columns), True
    raise _fix(qualified, "has REPLICA IDENTITY NOTHING")


def describe_tables(conn: Connection, names: Sequence[str]) -> list[TableInfo]:
    """The tables ``schema.table``, with their columns and keys; refuses what cannot work."""
    out = []
    with conn.cursor() as cur:
        for name in names:
            schema, _, table = name.partition(".")
            cur.execute(_TABLE_SQL, (schema, table))
            row = cur.fetchone()
            if row is None:
                raise TableNotCapturableError(name, f"table {name} does not exist")
            oid, nspname, relname, identity, relkind = row
            if relkind not in ("r", "p"):
                raise TableNotCapturableError(name, f"{name} is not a table (relkind {relkind})")
            cur.execute(_COLUMNS_SQL, (oid,))
            cols = cur.fetchall()
            cur.execute(sql.SQL(_INDEX_COLUMNS_SQL).format(which=sql.SQL("i.indisprimary")), (oid,))
            pk = tuple(r[0] for r in cur.fetchall())
            if identity == "i":
                cur.execute(
                    sql.SQL(_INDEX_COLUMNS_SQL).format(which=sql.SQL("i.indisreplident")), (oid,)
                )
                flagged = tuple(r[0] for r in cur.fetchall())
            elif identity == "d":
                flagged = pk
            else:
                flagged = tuple(c[0] for c in cols)
            keys, nullable = key_columns(name, identity, flagged, pk, [c[0] for c in cols])
            relation = Relation(
                oid,
                nspname,
                relname,
                identity,
                tuple(
                    Column(1 if c[0] in flagged else 0, c[0], int(c[1]), int(c[2])) for c in cols
                ),
            )
            out.append(TableInfo(oid, relation, pk, keys, nullable))
    return out


def table_exists(conn: Connection, qualified: str) -> bool:
    """Whether the table ``schema.table`` exists."""
    schema, _, table = qualified.partition(".")
    with conn.cursor() as cur:
        cur.execute(_TABLE_SQL, (schema, table))
        return cur.fetchone() is not None


def publication_tables(conn: Connection, publication: str) -> list[str] | None:
    """``schema.table`` of every table in the publication; ``None`` if it does not exist."""
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,))
        if cur.fetchone() is None:
            return None
        cur.execute(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s "
            "ORDER BY 1, 2",
            (publication,),
        )
        return [f"{s}.{t}" for s, t in cur.fetchall()]


def ensure_publication(conn: Connection, publication: str, tables: Sequence[str]) -> None:
    """Create the publication for ``tables``, or add the tables it lacks."""
    existing = publication_tables(conn, publication)
    idents = [sql.Identifier(*t.split(".", 1)) for t in tables]
    with conn.cursor() as cur:
        if existing is None:
            cur.execute(
                sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                    sql.Identifier(publication), sql.SQL(", ").join(idents)
                )
            )
            return
        missing = [sql.Identifier(*t.split(".", 1)) for t in tables if t not in existing]
        if missing:
            cur.execute(
                sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                    sql.Identifier(publication), sql.SQL(", ").join(missing)
                )
            )


@dataclass(frozen=True, slots=True)
class SlotInfo:
    """A replication slot as ``pg_replication_slots`` shows it."""

    name: str
    plugin: str | None
    database: str | None
    active_pid: int | None
    confirmed_flush_lsn: int | None


def slot_info(conn: Connection, slot: str) -> SlotInfo | None:
    """The slot, or ``None`` when it does not exist."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT slot_name, plugin, database, active_pid, confirmed_flush_lsn::text "
            "FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        )
        row = cur.fetchone()
    if row is None:
        return None
    return SlotInfo(row[0], row[1], row[2], row[3], parse_lsn(row[4]) if row[4] else None)


def drop_slot(conn: Connection, slot: str) -> None:
    """Drop the slot if it exists (it must not be in use)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (slot,),
        )


def create_slot_exporting(cursor: psycopg2.extras.ReplicationCursor, slot: str) -> tuple[int, str]:
    """Create a pgoutput slot and export its snapshot: ``(consistent point, snapshot name)``.

    The snapshot stays importable only while the replication connection runs no
    other command, so the caller imports it before it starts streaming.
    """
    cursor.execute(f'CREATE_REPLICATION_SLOT "{slot}" LOGICAL pgoutput EXPORT_SNAPSHOT')
    row = cursor.fetchone()
    if row is None or row[2] is None:
        raise CaptureError(f"creating slot {slot} exported no snapshot")
    return parse_lsn(row[1]), str(row[2])


def load_enum_rows(conn: Connection) -> list[tuple[int, int, list[str]]]:
    """Rows of :data:`bizevents.capture.postgres.types.ENUM_TYPES_SQL`."""
    with conn.cursor() as cur:
        cur.execute(ENUM_TYPES_SQL)
        return [(int(r[0]), int(r[1]), list(r[2])) for r in cur.fetchall()]


def _raw(value: str | None, _cursor: Any) -> str | None:
    return value


def begin_snapshot(conn: Connection, snapshot_name: str) -> None:
    """Make ``conn``'s transaction see exactly the exported snapshot."""
    conn.autocommit = False
    conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
    with conn.cursor() as cur:
        cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))


def count_rows(conn: Connection, relation: Relation) -> int:
    """Rows of the table in the transaction's snapshot."""
    with conn.cursor() as cur:
        cur.execute(
            sql.SQL("SELECT count(*) FROM ONLY {}").format(
                sql.Identifier(relation.namespace, relation.name)
            )
        )
        row = cur.fetchone()
    return int(row[0]) if row else 0


def read_snapshot_rows(
    conn: Connection, relation: Relation, fetch_rows: int
) -> Iterator[list[tuple[str | None, ...]]]:
    """The table's rows in chunks, each value in its type's text output form.

    A server-side cursor keeps memory bounded; typecasting is switched off so that
    each value is the same text the walsender would send.
    """
    oids = {c.type_oid for c in relation.columns} | set(BUILTIN_TYPE_OIDS)
    raw = psycopg2.extensions.new_type(tuple(sorted(oids)), "BIZEVENTS_RAW", _raw)
    cur = conn.cursor(name=f"bizevents_snapshot_{relation.oid}")
    psycopg2.extensions.register_type(raw, cur)
    cur.itersize = fetch_rows
    try:
        cur.execute(
            sql.SQL("SELECT {} FROM ONLY {}").format(
                sql.SQL(", ").join(sql.Identifier(c.name) for c in relation.columns),
                sql.Identifier(relation.namespace, relation.name),
            )
        )
        while True:
            rows = cur.fetchmany(fetch_rows)
            if not rows:
                return
            yield rows
    finally:
        cur.close()


#: The prefix of the watermarks incremental snapshots write through the WAL.
WATERMARK_PREFIX = "bizevents-watermark"


def open_chunk(
    conn: Connection,
    relation: Relation,
    key_names: Sequence[str],
    after: Sequence[str | None] | None,
    where: Condition | None,
    limit: int,
    timeout_s: float | None = None,
) -> tuple[str, Any]:
    """The next rows by key after ``after`` (every row meeting ``where``), at most
    ``limit``, queried in a read-only repeatable-read transaction left open: ``(its
    snapshot, the cursor holding the rows)``; the caller fetches them (a slice at a time:
    each row's values are converted only then) and calls :func:`end_chunk`.

    ``pg_current_snapshot()`` says which transactions the rows include; each value is
    its type's text output, as the walsender sends it. ``conn`` is not in autocommit.
    ``timeout_s``: the query's statement timeout (a condition from a signal is bound
    in time as well as in what it can say).
    """
    oids = {c.type_oid for c in relation.columns} | set(BUILTIN_TYPE_OIDS)
    raw = psycopg2.extensions.new_type(tuple(sorted(oids)), "BIZEVENTS_RAW", _raw)
    keys = sql.SQL(", ").join(sql.Identifier(k) for k in key_names)
    conditions = []
    params: list[Any] = []
    if after is not None:
        conditions.append(
            sql.SQL("({}) > ({})").format(keys, sql.SQL(", ").join(sql.Placeholder() * len(after)))
        )
        params.extend(after)
    if where is not None:
        text, values = to_sql(where, "postgres")
        conditions.append(sql.SQL("(") + sql.SQL(text) + sql.SQL(")"))
        params.extend(values)
    query = sql.SQL("SELECT {} FROM ONLY {}{} ORDER BY {} LIMIT {}").format(
        sql.SQL(", ").join(sql.Identifier(c.name) for c in relation.columns),
        sql.Identifier(relation.namespace, relation.name),
        sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL(""),
        keys,
        sql.Literal(limit),
    )
    cur = conn.cursor()
    try:
        psycopg2.extensions.register_type(raw, cur)
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        if timeout_s is not None:
            _statement_timeout(cur, timeout_s)
        cur.execute("SELECT pg_current_snapshot()::text")
        row = cur.fetchone()
        cur.execute(query, params)
    except BaseException:
        cur.close()
        conn.rollback()
        raise
    return (str(row[0]) if row else "0:0:"), cur


def every_nth_row(
    conn: Connection, relation: Relation, key_names: Sequence[str], every: int
) -> list[tuple[str | None, ...]]:
    """The 1st, ``every+1``-th, ... rows by key (where chunks of ``every`` rows start),
    in one scan on the server; values as their type's text output."""
    oids = {c.type_oid for c in relation.columns} | set(BUILTIN_TYPE_OIDS)
    raw = psycopg2.extensions.new_type(tuple(sorted(oids)), "BIZEVENTS_RAW", _raw)
    columns = sql.SQL(", ").join(sql.Identifier(c.name) for c in relation.columns)
    query = sql.SQL(
        "SELECT {cols} FROM (SELECT {cols}, row_number() OVER (ORDER BY {keys}) AS n "
        "FROM ONLY {table}) numbered WHERE n % {every} = 1 ORDER BY n"
    ).format(
        cols=columns,
        keys=sql.SQL(", ").join(sql.Identifier(k) for k in key_names),
        table=sql.Identifier(relation.namespace, relation.name),
        every=sql.Literal(every),
    )
    with conn.cursor() as cur:
        psycopg2.extensions.register_type(raw, cur)
        cur.execute(query)
        rows = list(cur.fetchall())
    conn.rollback()
    return rows


def end_chunk(conn: Connection, cur: Any) -> None:
    """The chunk's rows were fetched (or are given up): its transaction ends."""
    cur.close()
    conn.rollback()  # read only: nothing to commit


def emit_watermark(conn: Connection, content: str) -> int:
    """Write a watermark through the WAL: a logical message in a transaction of its
    own, so that its commit flushes the WAL (a non-transactional one would wait for the
    WAL writer, up to ``wal_writer_delay``, before the walsender sends it); its LSN.
    ``conn`` is in autocommit."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT pg_logical_emit_message(true, %s, %s)::text", (WATERMARK_PREFIX, content)
        )
        row = cur.fetchone()
    return parse_lsn(str(row[0])) if row else 0


def _statement_timeout(cur: Any, timeout_s: float) -> None:
    """The open transaction's statements end after ``timeout_s`` (at least 1 ms)."""
    cur.execute("SET LOCAL statement_timeout = %s", (max(1, round(timeout_s * 1000)),))


def check_condition(
    conn: Connection, relation: Relation, where: Condition, timeout_s: float
) -> str | None:
    """``None`` when ``where`` is a valid condition on the table (``EXPLAIN``, in a
    read-only transaction under a statement timeout), else the server's reason.
    ``conn`` is not in autocommit."""
    text, params = to_sql(where, "postgres")
    query = sql.SQL("EXPLAIN SELECT 1 FROM ONLY {} WHERE ").format(
        sql.Identifier(relation.namespace, relation.name)
    ) + sql.SQL(text)
    try:
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION READ ONLY")
            _statement_timeout(cur, timeout_s)
            cur.execute(query, params)
            cur.fetchall()
    except psycopg2.Error as exc:
        if not statement_failed(exc):
            raise
        return (exc.diag.message_primary or str(exc)).strip()
    finally:
        conn.rollback()
    return None


def statement_failed(exc: psycopg2.Error) -> bool:
    """Whether the server refused or cancelled a statement (a bad condition, a statement
    timeout), rather than the connection or the server going away."""
    code = exc.pgcode
    return code is not None and not code.startswith(("08", "57P"))
