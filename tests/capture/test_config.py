"""The capture file (capture/config.py): a bad one fails at once with a sentence, the
defaults follow the server name. Issue 41: a column a table's ``exclude`` names never
leaves the database, not in a dead letter or a parked record either, whether the row
that fails to convert was read by the snapshot or the stream (real PostgreSQL,
MariaDB, broker and registry)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bizevents.capture.config import CaptureConfig, ColumnFilter, load_capture_config
from bizevents.capture.core.quarantine import ask_capture, parked_keys
from bizevents.capture.postgres.messages import (
    UNCHANGED_TOAST,
    Insert,
    Relation,
    RelationCache,
    Update,
)
from bizevents.capture.postgres.pgoutput import PgOutputDecoder, blank_values
from bizevents.contracts.technical.topics import table_topic
from bizevents.plumbing.errors import ConfigError
from bizevents.plumbing.parking import PARKED_HEADER
from bizevents.plumbing.parkingio import read_to_end
from tests.capture import capture_helpers as pgh
from tests.capture import mysql_helpers as myh
from tests.capture.quarantine_helpers import events_by_id
from tests.capture.sources import MySource, PgSource, Source

#: What the excluded column holds: it must appear in no record capture writes.
SECRET = "pbkdf2_sha256$600000$NEVER-LEAVES$c2VjcmV0"


def _leaks(kafka: dict[str, Any], topic: str) -> list[str]:
    """The records of ``topic`` whose value, key or headers hold the secret."""
    found = []
    for m in read_to_end(kafka, topic):
        blobs = [m.value() or b"", m.key() or b""] + [v or b"" for _, v in m.headers() or []]
        if any(SECRET.encode() in b for b in blobs):
            found.append(f"offset {m.offset()}: {dict(m.headers() or [])}")
    return found


def test_blanked_pgoutput_decodes_with_nulls_in_the_blanked_columns() -> None:
    """A parked change is decoded again at its re-drive: the blanked bytes are pgoutput
    still, the other values untouched (text, binary, unchanged TOAST, NULL)."""
    relations = RelationCache()
    relation = Relation(1, "s", "t", "f", ())
    relations.put(relation)
    decoder = PgOutputDecoder(1, relations)
    old = (b"\x00\x01", "secret", None)
    new = ("1", "secret", UNCHANGED_TOAST)
    raw = b"U" + (1).to_bytes(4, "big") + b"O" + _tuple(old) + b"N" + _tuple(new)
    m = decoder.decode(raw)
    assert isinstance(m, Update) and m.old == old and m.new == new
    blanked = decoder.decode(blank_values(raw, m, {1}))
    assert isinstance(blanked, Update)
    assert blanked.old == (b"\x00\x01", None, None) and blanked.new == ("1", None, new[2])
    insert = b"I" + (1).to_bytes(4, "big") + b"N" + _tuple(("7", "secret", "x"))
    m2 = decoder.decode(insert)
    assert isinstance(m2, Insert)
    assert blank_values(insert, m2, ()) == insert
    assert decoder.decode(blank_values(insert, m2, {1})) == Insert(relation, ("7", None, "x"))


def _tuple(values: tuple[Any, ...]) -> bytes:
    out = len(values).to_bytes(2, "big")
    for v in values:
        if v is None:
            out += b"n"
        elif isinstance(v, bytes):
            out += b"b" + len(v).to_bytes(4, "big") + v
        elif isinstance(v, str):
            out += b"t" + len(v.encode()).to_bytes(4, "big") + v.encode()
        else:
            out += b"u"
    return out


def _redriven(source: Source, config: CaptureConfig, state_dir: Path) -> None:
    """The one parked key re-driven by capture with the source's fix: the parked
    changes, blanked, still decode, and row 3's reach its topic without the excluded
    column."""
    kafka = {"bootstrap.servers": source.db.endpoints.bootstrap_servers}
    with source.converter_fixed(), source.in_process(config, state_dir) as run:
        run.wait_snapshot()
        ((ref, _state),) = parked_keys(kafka, config.parked_topic_name)[0].parked.items()
        (answer,) = ask_capture(kafka, config.parked_topic_name, "redrive", ref[3].hex(), 60)
        assert answer.status == "done", answer.message
        source.caught_up(run)
        run.stop()
    rows = [dict(e.after or {}) for e in events_by_id(source.db.endpoints, source.topic("t"))[3]]
    assert [r["note"] for r in rows] == ["streamed", "behind"]
    assert all("v" not in r for r in rows)


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["dead-letter", "park"])
def test_postgres_dead_letters_and_parked_records_hold_no_excluded_column(
    pg: pgh.Db, tmp_path: Path, mode: str
) -> None:
    """A row read by the snapshot and rows read from the stream whose numeric is NaN
    (which does not convert) while ``v``, excluded, holds a password hash: the dead
    letters (and, under ``park``, the parked records and those parked behind them) keep
    the other values, never ``v``."""
    s = pg.schema
    pg.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, v text, n numeric, note text)")
    pg.sql(f"INSERT INTO {s}.t VALUES (1, %s, 'NaN', 'snap'), (2, %s, 1, 'ok')", (SECRET, SECRET))
    config = pg.config(
        ["t"], on_conversion_error=mode, columns={f"{s}.t": ColumnFilter(exclude=("v",))}
    )
    endpoints = pgh.capture_endpoints(pg.endpoints, tmp_path)
    with pgh.in_process(config, endpoints) as run:
        run.wait_snapshot()
        pg.sql(f"INSERT INTO {s}.t VALUES (3, %s, 'NaN', 'streamed')", (SECRET,))
        pg.sql(f"UPDATE {s}.t SET note = 'behind', v = %s WHERE id = 3", (SECRET + "2",))
        pg.sql(f"UPDATE {s}.t SET note = 'fine' WHERE id = 2")
        run.wait_acked(pg.wal_lsn())
        run.stop()
    kafka = {"bootstrap.servers": pg.endpoints.bootstrap_servers}
    dead = read_to_end(kafka, config.dlq_topic)
    formats = sorted(dict(m.headers())["bizevents.capture.format"] for m in dead)
    # The update's NaN fails too; under park it waits behind its key.
    assert formats == [b"pgoutput", b"pgoutput", b"snapshot-text-json"]
    snapshot_row = next(
        json.loads(m.value())
        for m in dead
        if dict(m.headers())["bizevents.capture.format"] == b"snapshot-text-json"
    )
    assert snapshot_row == ["1", None, "NaN", "snap"]  # the other values as they were
    assert any(b"streamed" in m.value() for m in dead)
    if mode == "park":
        assert all(PARKED_HEADER in dict(m.headers()) for m in dead if m.key() is not None)
    assert _leaks(kafka, config.dlq_topic) == []
    assert _leaks(kafka, pg.topic("t")) == []
    if mode == "park":
        _redriven(PgSource(pg), config, tmp_path)


@pytest.mark.integration
@pytest.mark.mysql
@pytest.mark.parametrize("mode", ["dead-letter", "park"])
def test_mariadb_dead_letters_and_parked_records_hold_no_excluded_column(
    my: myh.MyDb, tmp_path: Path, mode: str
) -> None:
    """MariaDB's twin: an ENUM's empty error value (which does not convert) in a row
    read by the snapshot and in rows read from the binlog, ``v`` excluded."""
    my.sql("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(80), e ENUM('a','b'), note TEXT)")
    my.sql("SET SESSION sql_mode = ''")  # a label it does not know becomes ''
    my.sql("INSERT INTO t VALUES (1, %s, 'zzz', 'snap'), (2, %s, 'a', 'ok')", (SECRET, SECRET))
    config = my.config(
        ["t"], on_conversion_error=mode, columns={f"{my.name}.t": ColumnFilter(exclude=("v",))}
    )
    endpoints = my.capture_endpoints(tmp_path)
    with myh.in_process(config, endpoints) as run:
        run.wait_snapshot()
        my.sql("INSERT INTO t VALUES (3, %s, 'zzz', 'streamed')", (SECRET,))
        my.sql("UPDATE t SET note = 'behind', v = %s WHERE id = 3", (SECRET + "2",))
        my.sql("UPDATE t SET note = 'fine' WHERE id = 2")
        run.wait_position(my.binlog_end())
        run.stop()
    kafka = {"bootstrap.servers": my.endpoints.bootstrap_servers}
    dead = read_to_end(kafka, config.dlq_topic)
    assert len(dead) == 3
    assert any(b"snap" in m.value() for m in dead) and any(b"streamed" in m.value() for m in dead)
    assert _leaks(kafka, config.dlq_topic) == []
    assert _leaks(kafka, my.topic("t")) == []
    if mode == "park":
        _redriven(MySource(my), config, tmp_path)


@pytest.mark.parametrize(
    ("toml", "fragment"),
    [
        ('server = "s"\n', "name the tables"),
        ('server = "s"\ntables = ["orders"]\n', "schema.table"),
        (
            'server = "s"\ntables = ["public.a"]\ncolumns."public.b".exclude = ["x"]\n',
            "not captured",
        ),
        (
            'server = "s"\ntables = ["public.a"]\n[columns."public.a"]\n'
            'include = ["x"]\nexclude = ["y"]\n',
            "not both",
        ),
        ('server = "s"\ntables = ["public.a"]\nslot = "Bad-Slot"\n', "slot/publication"),
        ('server = "s"\ntables = ["public.a"]\nwhat = 1\n', "what"),
        (
            'server = "s"\ntables = ["public.a"]\nrouting."public.b" = ["id"]\n',
            "routing names tables not captured",
        ),
        (
            'server = "s"\ntables = ["public.a"]\nrouting."public.a" = []\n',
            "routing of public.a must name one or more distinct columns",
        ),
    ],
    ids=[
        "no-tables",
        "unqualified",
        "filter-unknown-table",
        "include-and-exclude",
        "bad-slot",
        "unknown-key",
        "routing-unknown-table",
        "routing-no-columns",
    ],
)
def test_config_refuses_impossible_combinations(tmp_path: Path, toml: str, fragment: str) -> None:
    """A bad capture file fails at once with a sentence naming the problem."""
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=fragment):
        load_capture_config(path)


def test_config_defaults() -> None:
    """Slot, publication and topic prefix follow the server name."""
    config = CaptureConfig(server="Shop-EU", tables=("public.orders",))
    assert config.slot_name == "bizevents_shop_eu"
    assert config.publication_name == config.slot_name
    assert config.prefix == "Shop-EU"
    assert config.column_filter("public.orders").keeps("anything")


def test_table_topic_naming() -> None:
    """A table's technical topic is ``<prefix>.<schema>.<table>``, Debezium's naming that
    translators, replay and people's consumers subscribe to: capture's PostgreSQL
    (a relation), MariaDB (a ``database.table`` name) and verify sides all name it so."""
    default = CaptureConfig(server="Shop-EU", tables=("public.orders",))
    renamed = CaptureConfig(server="Shop-EU", tables=("shop.orders",), topic_prefix="cdc")
    relation = Relation(1, "public", "orders", "d", ())
    assert table_topic(default.prefix, relation.qualified_name) == "Shop-EU.public.orders"
    assert table_topic(renamed.prefix, "shop.orders") == "cdc.shop.orders"
