"""MySQL/MariaDB capture quarantine (capture/mariadb/quarantine.py). Its pure parts: the
typed JSON of a binlog row, the binlog position as one growing number, the table
layout's round trip and the converter seam (no broker, no database). Then issue 29 on
the real MariaDB, broker and registry: a binlog row capture cannot convert parks its key
until a re-drive with the fixed code."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.quarantine import (
    CAPTURE,
    HEADER_CAPTURE_CONTEXT,
    ask_capture,
    parked_keys,
)
from bizevents.capture.exceptions import CaptureError
from bizevents.capture.mariadb import types as t
from bizevents.capture.mariadb.codec import MyTable, MyTableCodec
from bizevents.capture.mariadb.quarantine import (
    describe_position,
    dump_row,
    load_row,
    position_number,
    table_of,
    table_record,
)
from bizevents.capture.mariadb.types import MyColumn, register_converter
from bizevents.cli import main
from bizevents.contracts.envelope import ChangeEvent, MySqlPosition
from bizevents.plumbing.parking import PARKED_HEADER
from bizevents.plumbing.parkingio import read_to_end
from tests.capture.capture_helpers import write_config
from tests.capture.mysql_helpers import MyDb, in_process, wait_stored
from tests.capture.quarantine_helpers import (
    Source,
    enum_fixed,
    events_by_id,
    kill_9_mid_redrive,
)

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.text(max_size=8),
    st.floats(allow_nan=False),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.datetimes(),
    st.dates(),
    st.times(),
    st.timedeltas(),
    st.binary(max_size=8),
    st.sets(st.text(max_size=3), max_size=3),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@given(st.dictionaries(st.text(max_size=6), _values, max_size=5))
def test_a_binlog_row_round_trips_through_typed_json(values: dict[str, Any]) -> None:
    row = {"values": values, "none_sources": {}}
    back = load_row(dump_row(row))
    assert back == row
    assert [type(v) for v in back["values"].values()] == [type(v) for v in values.values()]


def test_typed_json_keeps_what_plain_json_loses() -> None:
    row = {"values": {"d": Decimal("1.10"), "b": b"\x00", "j": ["o", 1], "t": timedelta(-1)}}
    assert load_row(dump_row(row)) == row
    assert load_row(dump_row(row))["values"]["d"].as_tuple().exponent == -2
    with pytest.raises(TypeError, match="no typed JSON form"):
        dump_row({"values": {"x": object()}})
    with pytest.raises(ValueError):
        load_row(json.dumps(["?", 1]).encode())


@given(
    st.lists(
        st.tuples(st.integers(1, 999_999), st.integers(4, 2**32 - 1), st.integers(0, 2**20 - 1)),
        min_size=2,
        max_size=6,
    )
)
def test_the_position_number_grows_with_the_binlog(places: list[tuple[int, int, int]]) -> None:
    numbers = {p: position_number(f"mysql-bin.{p[0]:06d}", p[1], p[2]) for p in places}
    assert sorted(places) == sorted(places, key=numbers.__getitem__)
    seq, pos, row = places[0]
    described = describe_position(numbers[places[0]])
    assert described == f"binlog file .{seq:06d} position {pos} row {row}"


_TABLE = MyTable(
    "shop",
    "t",
    (
        MyColumn("id", t.LONG, nullable=False),
        MyColumn("e", t.ENUM, labels=("a", "b")),
        MyColumn("d", t.NEWDECIMAL, precision=10, scale=2),
        MyColumn("bn", t.STRING, binary=True, pad=4),
    ),
    ("id",),
)


def test_a_table_layout_round_trips_through_json() -> None:
    assert table_of(json.loads(json.dumps(table_record(_TABLE)))) == _TABLE
    with pytest.raises(ValueError, match="not a table layout"):
        table_of({"database": "shop"})


def _codec() -> MyTableCodec:
    return MyTableCodec(server="srv", topic="srv.shop.t", table=_TABLE, key_names=("id",))


def test_a_registered_converter_fixes_a_value_until_unregistered() -> None:
    row = {"id": 1, "e": "", "d": Decimal("1.00"), "bn": b"\x00"}
    with pytest.raises(CaptureError, match="not one of the enum's labels"):
        _codec().row(row)
    try:
        register_converter("enum", lambda v: v or None)
        fixed = _codec()
        assert fixed.row(row) == fixed.row({**row, "e": None})
        register_converter("enum", lambda v: 1 / 0)  # a converter that raises names the value
        with pytest.raises(CaptureError, match=r"t\.e"):
            _codec().row(row)
    finally:
        register_converter("enum", None)
    with pytest.raises(CaptureError):
        _codec().row(row)
    with pytest.raises(ValueError, match="not a type capture maps"):
        register_converter("no such type", None)
    assert [t.type_name(c) for c in _TABLE.columns] == ["int", "enum", "decimal", "binary"]


def test_a_codec_knows_when_a_converter_was_registered_since() -> None:
    codec = _codec()
    try:
        register_converter("decimal", Decimal)
        assert codec.generation != t.converters_generation()
    finally:
        register_converter("decimal", None)


@pytest.fixture
def enum_fix() -> Iterator[Any]:
    """The 'code fix': MariaDB's empty error value of an ENUM (what a label it does not
    know becomes outside strict mode) written as NULL; switched on by the test."""

    def switch_on() -> None:
        register_converter("enum", enum_fixed)

    try:
        yield switch_on
    finally:
        register_converter("enum", None)


def _cli(db: MyDb, tmp_path: Path, config: CaptureConfig, *args: str) -> Any:
    """``bizevents capture ARGS FILE`` in this process, ``config`` written to FILE."""
    path = write_config(tmp_path / "capture.toml", config)
    env = {
        "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": db.endpoints.bootstrap_servers,
        "BIZEVENTS_REGISTRY__URL": db.endpoints.registry_url,
    }
    return CliRunner().invoke(main, ["capture", *args, str(path)], env=env)


def _events(db: MyDb, table: str) -> dict[int, list[ChangeEvent]]:
    return events_by_id(db.endpoints, db.topic(table))


@pytest.mark.integration
@pytest.mark.mysql
def test_unconvertible_row_parks_its_key_and_redrive_writes_it_in_order(
    db: MyDb, tmp_path: Path, enum_fix: Any
) -> None:
    db.sql("CREATE TABLE t (id INT PRIMARY KEY, e ENUM('a','b'), note VARCHAR(10))")
    db.sql("INSERT INTO t VALUES (1, 'a', 'a'), (2, 'a', 'a')")
    config = db.config(["t"], on_conversion_error="park", partitions=2)
    kafka = {"bootstrap.servers": db.endpoints.bootstrap_servers}

    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("SET SESSION sql_mode = ''")  # a label it does not know becomes ''
        db.sql("UPDATE t SET e = 'zzz', note = 'p0' WHERE id = 1")  # does not convert
        for i in range(1, 4):  # convertible, but behind the parked one
            db.sql(f"UPDATE t SET note = 'p{i}' WHERE id = 1")
            db.sql(f"UPDATE t SET note = 'q{i}' WHERE id = 2")  # another key flows on
        run.wait_position(db.binlog_end())  # parked records included

        events = _events(db, "t")
        assert [e.after["note"] for e in events[1]] == ["a"]  # nothing after the park
        assert [e.after["note"] for e in events[2]] == ["a", "q1", "q2", "q3"]
        dead = read_to_end(kafka, config.dlq_topic)
        assert len(dead) == 4 and len({m.key() for m in dead}) == 1
        first = dict(dead[0].headers())
        assert first[PARKED_HEADER] == b"1" and first["bizevents.dlq.stage"] == b"capture"
        assert f"{db.name}.t.e".encode() in first["bizevents.dlq.reason"]
        assert first["bizevents.capture.format"] == b"mysql-row-typed-json"
        context = json.loads(first[HEADER_CAPTURE_CONTEXT])
        assert context["kind"] == "u" and context["gtid"] and context["file"]
        assert [c["name"] for c in context["table"]["columns"]] == ["id", "e", "note"]
        assert json.loads(dead[0].value())[0] == "o"  # the library's row, typed
        assert [dict(m.headers())["bizevents.dlq.stage"] for m in dead[1:]] == [b"parked"] * 3
        keys, _ = parked_keys(kafka, config.parked_topic_name)
        ((ref, state),) = keys.parked.items()
        assert ref[0] == CAPTURE and ref[1] == db.topic("t")
        assert "not one of the enum's labels" in state.reason
        run.stop()

    # A second run restores the parked key from Kafka: the key's rows still park.
    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("UPDATE t SET note = 'p4' WHERE id = 1")
        run.wait_position(db.binlog_end())
        assert [e.after["note"] for e in _events(db, "t")[1]] == ["a"]
        listed = _cli(db, tmp_path, config, "parked", "--json")
        assert listed.exit_code == 0, listed.output
        (row,) = json.loads(listed.output)
        assert row["key"] == ref[3].hex() and row["since"].startswith("binlog file .0")

        # Re-driven before the fix, it fails again: the key stays parked, with the reason.
        (failed,) = ask_capture(kafka, config.parked_topic_name, "redrive", ref[3].hex(), 60)
        assert failed.status == "failed" and "still does not convert" in failed.message

        # The fix, then the re-drive while the key's live changes keep coming.
        enum_fix()
        stop = threading.Event()

        def writer() -> None:
            i = 5
            while not stop.is_set() and i < 300:
                db.sql(f"UPDATE t SET note = 'p{i}' WHERE id = 1")
                i += 1
                time.sleep(0.005)

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        try:
            time.sleep(0.3)
            (answer,) = ask_capture(kafka, config.parked_topic_name, "redrive", ref[3].hex(), 60)
            time.sleep(0.3)  # live changes of the key after its unpark too
        finally:
            stop.set()
            thread.join(30)
        assert answer.status == "done", answer.message
        run.wait_position(db.binlog_end())
        run.stop()

    events = _events(db, "t")
    written = [e.after["note"] for e in events[1]]
    last = int(db.sql("SELECT note FROM t WHERE id = 1")[0][0][1:])
    # Every change of the key, once, in binlog order: the parked ones re-driven first,
    # no live one before them.
    assert written == ["a"] + [f"p{i}" for i in range(last + 1)]
    redriven = events[1][1]
    assert redriven.after["e"] is None  # decoded with the fix
    position = redriven.source.position
    assert isinstance(position, MySqlPosition)
    where = (position.file, position.pos, position.row, position.gtid)
    assert where == (context["file"], context["pos"], context["row"], context["gtid"])
    keys, _ = parked_keys(kafka, config.parked_topic_name)
    assert not keys.parked


@pytest.mark.integration
@pytest.mark.mysql
def test_dead_letter_mode_is_as_before(db: MyDb, tmp_path: Path) -> None:
    """Without ``park`` the failure path is as before: the row as JSON on the dead-letter
    topic with the stream's position, unkeyed, and the stream goes on."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY, e ENUM('a','b'), note VARCHAR(10))")
    db.sql("INSERT INTO t VALUES (1, 'a', 'a'), (2, 'a', 'a')")
    config = db.config(["t"])  # on_conversion_error = "dead-letter"
    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("SET SESSION sql_mode = ''")
        db.sql("UPDATE t SET e = 'zzz', note = 'bad' WHERE id = 1")
        db.sql("UPDATE t SET note = 'later' WHERE id = 2")
        run.wait_position(db.binlog_end())
        run.stop()
    assert [e.after["note"] for e in _events(db, "t")[2]] == ["a", "later"]
    (dead,) = read_to_end({"bootstrap.servers": db.endpoints.bootstrap_servers}, config.dlq_topic)
    headers = dict(dead.headers())
    assert dead.key() is None and PARKED_HEADER not in headers
    assert headers["bizevents.capture.format"] == b"mysql-row-json"
    assert b"mariadb-bin" in headers["bizevents.source.position"]
    assert json.loads(dead.value())["after_values"]["note"] == "bad"


@pytest.mark.integration
@pytest.mark.mysql
def test_kill_9_mid_redrive_ends_with_every_change_once_in_order(db: MyDb, tmp_path: Path) -> None:
    """The PostgreSQL test's twin on the binlog: capture is killed -9 once Kafka
    acknowledged half of a key's re-driven rows (tests/capture/redrive_crash.py), before
    the rest and the unpark; the restarted capture carries the pending request out
    again: every row of the key once in binlog order (the repeated half byte for byte
    identical), unparked (tests/capture/quarantine_helpers.py)."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY, e ENUM('a','b'), note VARCHAR(10))")
    db.sql("INSERT INTO t VALUES (1, 'a', 'a')")
    config = db.config(["t"], on_conversion_error="park")
    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("SET SESSION sql_mode = ''")  # a label it does not know becomes ''
        db.sql("UPDATE t SET e = 'zzz', note = 'p0' WHERE id = 1")  # parks the key
        with db.conn.cursor() as cur:  # 400 rows parked behind it, one transaction
            cur.execute("BEGIN")
            cur.executemany(
                "UPDATE t SET note = %s WHERE id = 1", [(f"p{i}",) for i in range(1, 401)]
            )
            cur.execute("COMMIT")
        run.wait_position(db.binlog_end())
        run.stop()

    def live_change() -> None:
        db.sql("UPDATE t SET note = 'after' WHERE id = 1")

    def caught_up(process: subprocess.Popen[bytes], log: Path) -> None:
        wait_stored(db, config, db.binlog_end(), process)

    kill_9_mid_redrive(
        db.endpoints,
        config.parked_topic_name,
        db.topic("t"),
        write_config(tmp_path / "capture.toml", config),
        Source("mysql", live_change, caught_up),
        tmp_path / "capture.log",
        behind=400,
    )
