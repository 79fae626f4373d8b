"""The pgoutput decoder and type conversions against a real PostgreSQL 15.

A table with every mapped type is changed in transactions (inserts, an update that
leaves a TOASTed column alone, a key change, a delete, a truncate); the changes are
read from a ``pgoutput`` slot over psycopg2's replication protocol, decoded, converted,
and compared value for value with what SELECT returns for the same rows.
"""

from __future__ import annotations

import itertools
import math
import os
import select
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg2
import psycopg2.extras
import pytest

from bizevents.capture.postgres.messages import (
    UNCHANGED_TOAST,
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Relation,
    Truncate,
    TypeInfo,
    Update,
)
from bizevents.capture.postgres.pgoutput import PgOutputDecoder
from bizevents.capture.postgres.types import (
    BUILTIN_TYPE_OIDS,
    ENUM_TYPES_SQL,
    REPLICATION_SESSION_OPTIONS,
    PgTypeMapper,
    RowConverter,
    enum_types_from_rows,
)
from bizevents.contracts.logical import JsonDocument
from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import drop_slots

pytestmark = pytest.mark.integration

READ_TIMEOUT_S = 60.0

# Column list: name, SQL type. `big` is a TOASTed text column.
COLUMNS = [
    ("id", "bigint PRIMARY KEY"),
    ("small", "smallint"),
    ("i", "integer"),
    ("big_int", "bigint"),
    ("f4", "real"),
    ("f8", "double precision"),
    ("num", "numeric(12,3)"),
    ("free", "numeric"),
    ("cash", "money"),
    ("flag", "boolean"),
    ("t", "text"),
    ("vc", "varchar(20)"),
    ("ch", "char(5)"),
    ("nm", "name"),
    ("b", "bytea"),
    ("d", "date"),
    ("tm", "time"),
    ("ttz", "timetz"),
    ("ts", "timestamp(6)"),
    ("tstz", "timestamptz"),
    ("iv", "interval"),
    ("u", "uuid"),
    ("j", "json"),
    ("jb", "jsonb"),
    ("mood", "{mood}"),
    ("tags", "text[]"),
    ("nums", "integer[]"),
    ("moods", "{mood}[]"),
    ("addr", "inet"),
    ("net", "cidr"),
    ("mac", "macaddr"),
    ("x", "xml"),
    ("o", "oid"),
    ("big", "text"),
]

# What SELECT reads, per column: casts where psycopg2 has no typecaster of its own.
SELECT_EXPR = {"cash": "cash::numeric", "moods": "moods::text[]", "j": "j::text", "jb": "jb::text"}

BIG = os.urandom(60_000).hex()  # incompressible: stored out of line (TOASTed)

ROWS = [
    {
        "id": 1, "small": -32768, "i": 2147483647, "big_int": -9223372036854775808,
        "f4": 1.5, "f8": 0.1, "num": Decimal("123456789.125"),
        "free": Decimal("3.14159265358979323846264338327950288419716939937510"),
        "cash": Decimal("-1234.56"), "flag": True, "t": 'grüße, "world" \\ ✓',
        "vc": "varchar", "ch": "ab", "nm": "some_name", "b": b"\x00\xff\x10binary",
        "d": "2024-02-29", "tm": "13:14:15.123456", "ttz": "13:14:15.5+05:30",
        "ts": "2024-05-01 12:34:56.789012", "tstz": "2024-05-01 12:34:56.123456+02",
        "iv": "3 days 04:05:06.5", "u": str(uuid.UUID(int=12345678901234567890)),
        "j": '{"a": [1, 2.50, "x"],  "b": null}', "jb": '{"b": {"c": true}, "a": 1}',
        "mood": "happy", "tags": ["plain", "with space", 'q"uote', "back\\slash", None, "NULL", ""],
        "nums": [1, None, -3], "moods": "{sad,happy}", "addr": "192.168.0.1/24",
        "net": "10.0.0.0/8", "mac": "08:00:2b:01:02:03", "x": "<a>b &amp; c</a>",
        "o": 4294967295, "big": BIG,
    },
    {"id": 2, "t": "mostly null", "big": "short, stays inline"},
    {
        "id": 3, "f8": float("nan"), "f4": float("-inf"), "free": Decimal("NaN"),
        "d": "infinity", "iv": "-1 days +02:00:00", "tags": [], "nums": [],
        "tstz": "1890-01-01 00:00:00 Europe/Amsterdam", "ttz": "00:00:00-07",
    },
]  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return (a.is_nan() and b.is_nan()) or str(a) == str(b)  # exact digits, not just value
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _expected(column: str, selected: Any) -> Any:
    """What SELECT gave, in the form the capture conversion promises."""
    if selected is None:
        return None
    if column == "b":
        return bytes(selected)
    if column in ("j", "jb"):
        return JsonDocument(selected)
    if column == "u":
        return uuid.UUID(str(selected))
    return selected


@pytest.fixture
def pg(bizevents_stack: Endpoints) -> Iterator[tuple[str, str]]:
    """A fresh schema, publication and pgoutput slot; all dropped afterwards."""
    tag = uuid.uuid4().hex[:10]
    schema, slot = f"cap_{tag}", f"bizevents_test_{tag}"
    conn = psycopg2.connect(bizevents_stack.postgres_dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE SCHEMA {schema}")
            cur.execute(f"CREATE TYPE {schema}.mood AS ENUM ('sad', 'ok', 'happy')")
            cols = ", ".join(f"{name} {sql.format(mood=f'{schema}.mood')}" for name, sql in COLUMNS)
            cur.execute(f"CREATE TABLE {schema}.everything ({cols})")
            cur.execute(f"CREATE PUBLICATION pub_{tag} FOR TABLE {schema}.everything")
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        yield schema, slot
    finally:
        with conn.cursor() as cur:
            drop_slots(cur, slot)
            cur.execute(f"DROP PUBLICATION IF EXISTS pub_{tag}")
            cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.close()


def _select(cur: Any, schema: str, ids: list[int]) -> dict[int, dict[str, Any]]:
    exprs = ", ".join(f"{SELECT_EXPR.get(n, n)} AS {n}" for n, _ in COLUMNS)
    cur.execute(f"SELECT {exprs} FROM {schema}.everything WHERE id = ANY(%s)", (ids,))
    names = [d[0] for d in cur.description]
    return {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}


def _read_stream(dsn: str, slot: str, publication: str, commits: int) -> list[Message]:
    """Decoded messages of the slot until ``commits`` transactions were seen (bounded)."""
    conn = psycopg2.connect(
        dsn,
        connection_factory=psycopg2.extras.LogicalReplicationConnection,
        options=REPLICATION_SESSION_OPTIONS,
    )
    decoder = PgOutputDecoder()
    out: list[Message] = []
    try:
        cur = conn.cursor()
        cur.start_replication(
            slot_name=slot,
            decode=False,
            options={"proto_version": "1", "publication_names": publication},
        )
        deadline = time.monotonic() + READ_TIMEOUT_S
        seen = 0
        while seen < commits:
            if time.monotonic() > deadline:
                pytest.fail(f"only {seen} of {commits} transactions within {READ_TIMEOUT_S}s")
            msg = cur.read_message()
            if msg is None:
                select.select([cur], [], [], 0.5)
                continue
            decoded = decoder.decode(msg.payload)
            out.append(decoded)
            if isinstance(decoded, Commit):
                seen += 1
                cur.send_feedback(flush_lsn=decoded.end_lsn)
    finally:
        conn.close()
    return out


def test_every_type_round_trips_through_pgoutput(
    bizevents_stack: Endpoints, pg: tuple[str, str]
) -> None:
    """Decoded, converted changes equal what SELECT returns, value for value."""
    schema, slot = pg
    publication = "pub_" + slot.rsplit("_", 1)[1]
    dsn = bizevents_stack.postgres_dsn
    conn = psycopg2.connect(dsn, options="-c timezone=America/New_York")
    psycopg2.extras.register_uuid(conn_or_curs=conn)
    snapshots: dict[str, dict[int, dict[str, Any]]] = {}
    try:
        with conn.cursor() as cur:
            cur.execute(ENUM_TYPES_SQL)
            enum_rows = cur.fetchall()
            for row in ROWS:  # T1: inserts
                names = list(row)
                cur.execute(
                    f"INSERT INTO {schema}.everything ({', '.join(names)}) "
                    f"VALUES ({', '.join(['%s'] * len(names))})",
                    [row[n] for n in names],
                )
            conn.commit()
            snapshots["insert"] = _select(cur, schema, [1, 2, 3])
            # T2: an update that leaves the TOASTed column alone.
            cur.execute(f"UPDATE {schema}.everything SET i = i - 1, tags = ARRAY['x'] WHERE id = 1")
            conn.commit()
            snapshots["update"] = _select(cur, schema, [1])
            # T3: the key changes.
            cur.execute(f"UPDATE {schema}.everything SET id = 102 WHERE id = 2")
            conn.commit()
            snapshots["rekey"] = _select(cur, schema, [102])
            cur.execute(f"DELETE FROM {schema}.everything WHERE id = 3")  # T4
            conn.commit()
            cur.execute(f"TRUNCATE {schema}.everything RESTART IDENTITY")  # T5
            conn.commit()
    finally:
        conn.close()

    messages = _read_stream(dsn, slot, publication, commits=5)

    labels, arrays = enum_types_from_rows(enum_rows)
    types = PgTypeMapper(enum_labels=labels, array_elements=arrays)
    converters: dict[int, RowConverter] = {}

    def convert(relation: Relation, values: Any) -> dict[str, Any]:
        if relation.oid not in converters or converters[relation.oid].relation is not relation:
            converters[relation.oid] = types.row_converter(relation)
        return converters[relation.oid](values)

    def check_row(got: dict[str, Any], want: dict[str, Any], toast_untouched: bool) -> None:
        for name, _ in COLUMNS:
            if toast_untouched and name == "big":
                assert got[name] is UNCHANGED_TOAST
                continue
            expected = _expected(name, want[name])
            assert _same(got[name], expected), (name, got[name], expected)

    begins = [m for m in messages if isinstance(m, Begin)]
    commits = [m for m in messages if isinstance(m, Commit)]
    assert len(begins) == len(commits) == 5
    assert [c.commit_lsn for c in commits] == [b.final_lsn for b in begins]
    assert all(a.end_lsn < b.end_lsn for a, b in itertools.pairwise(commits))
    assert all(b.xid > 0 for b in begins)

    relations = [m for m in messages if isinstance(m, Relation)]
    assert relations and relations[0].qualified_name == f"{schema}.everything"
    assert [c.name for c in relations[0].key_columns] == ["id"]
    assert relations[0].replica_identity == "d"
    type_names = {m.name for m in messages if isinstance(m, TypeInfo)}
    assert "mood" in type_names

    inserts = [m for m in messages if isinstance(m, Insert)]
    assert len(inserts) == 3
    for ins in inserts:
        captured = convert(ins.relation, ins.new)
        check_row(captured, snapshots["insert"][captured["id"]], toast_untouched=False)
    # The walsender wrote the text under REPLICATION_SESSION_OPTIONS (UTC, ISO).
    names = [c.name for c in inserts[0].relation.columns]
    assert inserts[0].new[names.index("tstz")] == "2024-05-01 10:34:56.123456+00"
    assert inserts[0].new[names.index("b")] == "\\x00ff1062696e617279"
    # The TOASTed value arrived in full with the insert.
    assert convert(inserts[0].relation, inserts[0].new)["big"] == BIG

    updates = [m for m in messages if isinstance(m, Update)]
    assert len(updates) == 2
    plain, rekey = updates
    assert plain.old is None
    check_row(convert(plain.relation, plain.new), snapshots["update"][1], toast_untouched=True)
    assert snapshots["update"][1]["big"] == BIG  # the database still has it
    assert rekey.old_kind == "K"
    assert rekey.old is not None
    old_key = convert(rekey.relation, rekey.old)
    assert old_key["id"] == 2 and old_key["t"] is None
    check_row(convert(rekey.relation, rekey.new), snapshots["rekey"][102], toast_untouched=False)

    (delete,) = [m for m in messages if isinstance(m, Delete)]
    assert delete.old_kind == "K"
    assert convert(delete.relation, delete.old)["id"] == 3

    (truncate,) = [m for m in messages if isinstance(m, Truncate)]
    assert [r.name for r in truncate.relations] == ["everything"]
    assert truncate.restart_identity and not truncate.cascade


def test_type_oids_match_the_catalog(bizevents_stack: Endpoints) -> None:
    """Every built-in oid the mapping uses names the type it claims (format_type)."""
    oids = sorted(BUILTIN_TYPE_OIDS)
    conn = psycopg2.connect(bizevents_stack.postgres_dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT oid::int, format_type(oid, NULL) FROM pg_type WHERE oid = ANY(%s)", (oids,)
            )
            catalog = dict(cur.fetchall())
    finally:
        conn.close()
    types = PgTypeMapper()
    assert {oid: types.type_name(oid) for oid in oids} == catalog
