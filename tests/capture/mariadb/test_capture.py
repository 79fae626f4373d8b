"""MySQL/MariaDB capture against the session's real MariaDB and the real broker."""

from __future__ import annotations

import dataclasses
import json
import random
import signal
import subprocess
import sys
import threading
import time as clock
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient
from pydantic import SecretStr

from bizevents.capture.mariadb import queries as my
from bizevents.contracts.envelope import ChangeEvent, Tombstone
from bizevents.contracts.logical import JsonDocument
from bizevents.plumbing.kafka import ensure_topics
from tests.capture.capture_helpers import cli_env, final_state, read_topic
from tests.capture.mysql_helpers import MyDb, Proxy, in_process, wait_stored
from tests.capture.sources import MySource

pytestmark = [pytest.mark.integration, pytest.mark.mysql]


TYPES_DDL = """
CREATE TABLE types (
  id BIGINT UNSIGNED PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT,
  f FLOAT, d DOUBLE, dec_big DECIMAL(65,30), dec_money DECIMAL(10,2),
  dt0 DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), ts6 TIMESTAMP(6) NULL, tm6 TIME(6),
  tm0 TIME, y YEAR, dte DATE, b1 BIT(1), b12 BIT(12),
  e ENUM('SUCCESS','FAILURE','it''s'), s SET('a','b','c'), j JSON,
  vc VARCHAR(40), tx TEXT, ch CHAR(3), bn BINARY(4), vb VARBINARY(10), bl BLOB
) DEFAULT CHARSET=utf8mb4
"""

EXTREMES: dict[str, Any] = {
    "id": 18446744073709551615,
    "ti": -128,
    "tiu": 255,
    "si": -32768,
    "siu": 65535,
    "mi": -8388608,
    "miu": 16777215,
    "i": -2147483648,
    "iu": 4294967295,
    "bi": -9223372036854775808,
    "f": 1.5,
    "d": -2.2250738585072014e-308,
    "dec_big": Decimal("-99999999999999999999999999999999999.999999999999999999999999999999"),
    "dec_money": Decimal("-0.01"),
    "dt0": datetime(9999, 12, 31, 23, 59, 59),
    "dt3": datetime(1000, 1, 1, 0, 0, 0, 1000),
    "dt6": datetime(2020, 2, 29, 12, 34, 56, 123456),
    "ts6": datetime(2038, 1, 19, 3, 14, 7, 999999),
    "tm6": timedelta(hours=-838, minutes=-59, seconds=-58, microseconds=-999999),
    "tm0": timedelta(hours=838, minutes=59, seconds=59),
    "y": 2155,
    "dte": date(1000, 1, 1),
    "b1": 1,
    "b12": 0b100000000001,
    "e": "FAILURE",
    "s": "a,c",
    "j": '{"k": [1, 2.5, "é😀"], "n": null}',
    "vc": "héllo 😀 ✓",
    "tx": "x" * 70_000 if False else "ünïcode\n\t\\'\"",
    "ch": "abc",
    "bn": b"\x00\xff\x01\x02",
    "vb": b"\x00",
    "bl": bytes(range(256)),
}
OTHER: dict[str, Any] = {
    **{k: None for k in EXTREMES},
    "id": 0,
    "ti": 127,
    "bi": 9223372036854775807,
    "dec_big": Decimal("0.000000000000000000000000000001"),
    "ts6": datetime(1970, 1, 1, 0, 0, 1),
    "tm6": timedelta(0),
    "y": 1901,
    "b1": 0,
    "e": "it's",
    "s": "",
    "j": "[]",
    "vc": "",
    "bn": b"\x00\x00\x00\x00",
    "bl": b"",
}


def _expected(row: dict[str, Any]) -> dict[str, Any]:
    """What a translator reads back for a row written as ``row``."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        if v is None:
            out[k] = None
        elif k in ("dt0", "dt3", "dt6", "ts6"):
            out[k] = v.replace(tzinfo=UTC)
        elif k in ("tm6", "tm0"):
            micros = (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
            out[k] = (
                time(
                    micros // 3_600_000_000,
                    micros // 60_000_000 % 60,
                    micros // 1_000_000 % 60,
                    micros % 1_000_000,
                )
                if 0 <= micros < 86_400_000_000
                else v
            )
        elif k == "b1":
            out[k] = bool(v)
        elif k == "b12":
            out[k] = v.to_bytes(2, "little")
        elif k == "j":
            out[k] = JsonDocument(v)
        elif k == "dec_money":
            out[k] = v.quantize(Decimal("0.01"))
        else:
            out[k] = v
    return out


def _insert(db: MyDb, row: dict[str, Any]) -> None:
    cols = ", ".join(row)
    marks = ", ".join("%s" for _ in row)
    db.sql(f"INSERT INTO types ({cols}) VALUES ({marks})", tuple(row.values()))


def _by_id(records: list[Any], op: str) -> dict[int, ChangeEvent]:
    out: dict[int, ChangeEvent] = {}
    for r in records:
        d = r.decoded
        if isinstance(d, ChangeEvent) and d.op == op:
            row = d.after if d.after is not None else d.before
            assert row is not None
            out[int(row["id"])] = d
    return out


def test_every_type_round_trips_through_snapshot_and_stream(db: MyDb, tmp_path: Path) -> None:
    """Each type at its extremes, and NULL, reads back value for value: op r and op c."""
    db.sql(TYPES_DDL)
    _insert(db, EXTREMES)
    config = db.config(["types"])
    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        _insert(db, {**OTHER, "id": 7})
        _insert(db, OTHER)
        run.wait_position(db.binlog_end())
        run.stop()
    records = read_topic(db.endpoints, db.topic("types"))
    snapshot = _by_id(records, "r")
    created = _by_id(records, "c")
    assert set(snapshot) == {EXTREMES["id"]}
    assert set(created) == {0, 7}
    want = _expected(EXTREMES)
    got = dict(snapshot[EXTREMES["id"]].after or {})
    assert got == want
    assert dict(created[0].after or {}) == _expected(OTHER)
    source = created[0].source
    assert source.connector == "mysql"
    assert source.db == db.name and source.table == "types"


def test_streamed_extremes_equal_snapshot_extremes(db: MyDb, tmp_path: Path) -> None:
    """The binlog decoder and the snapshot's reader give the same values for every type."""
    db.sql(TYPES_DDL)
    config = db.config(["types"])
    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        _insert(db, EXTREMES)
        run.wait_position(db.binlog_end())
        run.stop()
    created = _by_id(read_topic(db.endpoints, db.topic("types")), "c")
    assert dict(created[EXTREMES["id"]].after or {}) == _expected(EXTREMES)


def test_changes_deletes_key_changes_and_transactions(db: MyDb, tmp_path: Path) -> None:
    """update, delete + tombstone, key change as delete + tombstone + create, one GTID per
    transaction, a rolled-back transaction never appears."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10)) ENGINE=InnoDB")
    config = db.config(["t"])
    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("BEGIN")
        db.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        db.sql("COMMIT")
        db.sql("BEGIN")
        db.sql("INSERT INTO t VALUES (99, 'never')")
        db.sql("UPDATE t SET v = 'never' WHERE id = 1")
        db.sql("ROLLBACK")
        db.sql("UPDATE t SET v = 'a2' WHERE id = 1")
        db.sql("DELETE FROM t WHERE id = 2")
        db.sql("UPDATE t SET id = 30 WHERE id = 3")
        run.wait_position(db.binlog_end())
        run.stop()
    records = read_topic(db.endpoints, db.topic("t"))
    events = [r.decoded for r in records]
    assert not any(
        isinstance(e, ChangeEvent) and "never" in json.dumps([e.before, e.after], default=str)
        for e in events
    )
    changes = [e for e in events if isinstance(e, ChangeEvent)]
    ops = [(e.op, (e.before or {}).get("id"), (e.after or {}).get("id")) for e in changes]
    assert ops == [
        ("c", None, 1),
        ("c", None, 2),
        ("c", None, 3),
        ("u", 1, 1),
        ("d", 2, None),
        ("d", 3, None),
        ("c", None, 30),
    ]
    tombstones = [e.key for e in events if isinstance(e, Tombstone)]
    assert tombstones == [{"id": 2}, {"id": 3}]
    gtids = [e.source.position.gtid for e in changes]  # type: ignore[union-attr]
    # one GTID per transaction: the three inserts share one, the key change's two events too
    assert None not in gtids
    assert [gtids.index(g) for g in gtids] == [0, 0, 0, 3, 4, 5, 5]
    rows = [e.source.position.row for e in changes[:3]]  # type: ignore[union-attr]
    assert rows == [0, 1, 2]
    assert final_state(records) == {
        (("id", 1),): {"id": 1, "v": "a2"},
        (("id", 30),): {"id": 30, "v": "c"},
    }


def test_snapshot_under_concurrent_writes_then_stream_is_the_final_table(
    db: MyDb, tmp_path: Path
) -> None:
    """Writers run through the snapshot and after it: the topic's compacted state equals
    the table, nothing lost or doubled at the seam."""
    db.sql("CREATE TABLE acc (id INT PRIMARY KEY, n INT NOT NULL, note VARCHAR(20))")
    rows = [(i, 0, "init") for i in range(20_000)]
    with db.conn.cursor() as cur:
        cur.executemany("INSERT INTO acc VALUES (%s, %s, %s)", rows)
    stop = threading.Event()
    writes = {"n": 0}

    def write() -> None:
        conn = my.connect(db.dsn)
        rnd = random.Random(7)
        try:
            with conn.cursor() as cur:
                while not stop.is_set():
                    i = rnd.randrange(25_000)
                    what = rnd.random()
                    if what < 0.5:
                        cur.execute(
                            f"INSERT INTO {db.name}.acc VALUES (%s, 1, 'w') "
                            "ON DUPLICATE KEY UPDATE n = n + 1",
                            (i,),
                        )
                    elif what < 0.8:
                        cur.execute(f"UPDATE {db.name}.acc SET n = n + 1 WHERE id = %s", (i,))
                    else:
                        cur.execute(f"DELETE FROM {db.name}.acc WHERE id = %s", (i,))
                    writes["n"] += 1
        finally:
            conn.close()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        with in_process(db.config(["acc"]), db.capture_endpoints(tmp_path)) as run:
            run.wait_snapshot()
            clock.sleep(1.0)
            stop.set()
            writer.join(10)
            run.wait_position(db.binlog_end())
            run.stop()
    finally:
        stop.set()
    assert writes["n"] > 100
    records = read_topic(db.endpoints, db.topic("acc"))
    ops = {r.decoded.op for r in records if isinstance(r.decoded, ChangeEvent)}
    assert {"r", "c", "u", "d"} <= ops
    table = {
        (("id", i),): {"id": i, "n": n, "note": note}
        for i, n, note in db.sql("SELECT id, n, note FROM acc")
    }
    assert final_state(records) == table


def test_ddl_mid_stream_decodes_every_row_with_its_own_layout(db: MyDb, tmp_path: Path) -> None:
    """Rows written before, between and after ADD COLUMN and DROP COLUMN read back each
    with its own columns, also when capture resumes from a position before the DDL."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10))")
    config = db.config(["t"])
    MySource(db).capture_through(
        config,
        tmp_path,
        "INSERT INTO t VALUES (1, 'a1')",
        "ALTER TABLE t ADD COLUMN b DECIMAL(5,2) NOT NULL DEFAULT 1.50",
        "INSERT INTO t VALUES (2, 'a2', 2.25)",
    )
    # Stopped: the rest is read after a restart from the position before them.
    db.sql("INSERT INTO t VALUES (3, 'a3', 3.00)")
    db.sql("ALTER TABLE t DROP COLUMN a")
    db.sql("INSERT INTO t VALUES (4, 4.75)")
    db.sql("ALTER TABLE t ADD COLUMN c ENUM('x','y') NULL")
    db.sql("UPDATE t SET c = 'y' WHERE id = 4")
    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_position(db.binlog_end())
        run.stop()
    records = read_topic(db.endpoints, db.topic("t"))
    afters = [
        dict(r.decoded.after)
        for r in records
        if isinstance(r.decoded, ChangeEvent) and r.decoded.after is not None
    ]
    assert afters == [
        {"id": 1, "a": "a1"},
        {"id": 2, "a": "a2", "b": Decimal("2.25")},
        {"id": 3, "a": "a3", "b": Decimal("3.00")},
        {"id": 4, "b": Decimal("4.75")},
        {"id": 4, "b": Decimal("4.75"), "c": "y"},
    ]
    registry = SchemaRegistryClient({"url": db.endpoints.registry_url})
    assert len(registry.get_versions(f"{db.topic('t')}-value")) == 4


def _cli(db: MyDb, tmp_path: Path, tables: list[str], dsn: str | None = None, **extra: Any) -> Path:
    path = tmp_path / "capture.toml"
    lines = [
        f'server = "{db.server}"',
        f'dsn = "{dsn or db.dsn}"',
        f"tables = {json.dumps([f'{db.name}.{t}' for t in tables])}",
        f'state_dir = "{tmp_path / "state"}"',
        *(f"{k} = {json.dumps(v)}" for k, v in extra.items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _run_cli(db: MyDb, config: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-m", "bizevents", "capture", "mysql", str(config)],
            env=cli_env(db.endpoints),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"capture did not stop: {exc.stderr!r}"[-3000:]) from None


@pytest.mark.parametrize(
    ("variable", "bad", "good"),
    [("binlog_format", "STATEMENT", "ROW"), ("binlog_row_image", "MINIMAL", "FULL")],
)
def test_wrong_server_setting_stops_with_a_sentence(
    db: MyDb, tmp_path: Path, variable: str, bad: str, good: str
) -> None:
    """A statement-based binlog or a minimal row image: exit 1, the setting and its fix."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    db.sql(f"SET GLOBAL {variable} = '{bad}'")
    try:
        result = _run_cli(db, _cli(db, tmp_path, ["t"]))
    finally:
        db.sql(f"SET GLOBAL {variable} = '{good}'")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"{variable} is {bad}, capture needs {good}" in result.stderr
    assert f"SET GLOBAL {variable} = '{good}'" in result.stderr


def test_missing_replication_privileges_stop_with_a_sentence(db: MyDb, tmp_path: Path) -> None:
    """A user that may only read tables: exit 1, naming both privileges and the GRANT."""
    user = f"ro_{db.name[-6:]}"
    db.sql(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'")
    try:
        db.sql(f"GRANT SELECT ON {db.name}.* TO '{user}'@'%'")
        db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
        dsn = db.dsn.replace(db.dsn.split("//")[1].split("@")[0], f"{user}:pw")
        result = _run_cli(db, _cli(db, tmp_path, ["t"], dsn=dsn))
    finally:
        db.sql(f"DROP USER '{user}'@'%'")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "lacks the REPLICATION SLAVE and REPLICATION CLIENT privileges" in result.stderr
    assert "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.*" in result.stderr


def test_table_without_primary_key_is_refused_or_keyed_by_config(db: MyDb, tmp_path: Path) -> None:
    """No primary key: a sentence naming the table; with [keys] it is captured by them."""
    db.sql("CREATE TABLE nokey (a INT NOT NULL, b VARCHAR(5))")
    db.sql("INSERT INTO nokey VALUES (1, 'x')")
    result = _run_cli(db, _cli(db, tmp_path, ["nokey"]))
    assert result.returncode == 1
    assert f"table {db.name}.nokey has no primary key" in result.stderr
    config = db.config(["nokey"], keys={f"{db.name}.nokey": ("a",)})
    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("UPDATE nokey SET b = 'y'")
        run.wait_position(db.binlog_end())
        run.stop()
    records = read_topic(db.endpoints, db.topic("nokey"))
    assert [(r.decoded.op, r.decoded.key) for r in records] == [  # type: ignore[union-attr]
        ("r", {"a": 1}),
        ("u", {"a": 1}),
    ]


def test_restart_resumes_and_a_purged_position_is_a_clear_error(db: MyDb, tmp_path: Path) -> None:
    """A stopped capture resumes where it stored its position; once the binlog holding
    that position is purged, it stops with the position and the way out."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    config = db.config(["t"])
    endpoints = db.capture_endpoints(tmp_path)
    MySource(db).capture_through(config, tmp_path, "INSERT INTO t VALUES (1)")
    stored = db.stored_offset(config)
    assert stored is not None and stored["snapshot_done"]
    db.sql("INSERT INTO t VALUES (2)")
    with in_process(config, endpoints) as run:
        run.wait_position(db.binlog_end())
        run.stop()
    ops = [
        (r.decoded.op, (r.decoded.after or {}).get("id"))
        for r in read_topic(db.endpoints, db.topic("t"))
        if isinstance(r.decoded, ChangeEvent)
    ]
    assert ops == [("c", 1), ("c", 2)]
    before = db.stored_offset(config)
    assert before is not None
    db.sql("INSERT INTO t VALUES (3)")  # after the stored position, in its file
    db.sql("FLUSH BINARY LOGS")
    newest = db.sql("SHOW MASTER STATUS")[0][0]
    deadline = clock.monotonic() + 20
    while db.sql("SHOW BINARY LOGS")[0][0] != newest:
        # the server skips a file a closing binlog dump thread still holds
        assert clock.monotonic() < deadline, "the binlog was not purged"
        db.sql(f"PURGE BINARY LOGS TO '{newest}'")
        clock.sleep(0.2)
    result = _run_cli(db, _cli(db, tmp_path, ["t"]))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"{before['file']}:{before['pos']}" in result.stderr
    assert "is no longer on the server" in result.stderr
    assert "Take a new snapshot" in result.stderr


def _high_watermark(db: MyDb, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": db.endpoints.bootstrap_servers, "group.id": "hw"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def test_kill_9_in_the_middle_of_50000_changes_loses_none(db: MyDb, tmp_path: Path) -> None:
    """25,000 inserts and 25,000 updates; capture is killed -9 while they stream and
    restarted: every change is in the topic (duplicates allowed), the state equals the table."""
    db.sql("CREATE TABLE big (id INT PRIMARY KEY, n INT NOT NULL, pad VARCHAR(20))")
    config_file = _cli(db, tmp_path, ["big"])
    config = db.config(["big"])
    log = open(tmp_path / "capture.log", "ab")  # noqa: SIM115
    argv = [sys.executable, "-m", "bizevents", "capture", "mysql", str(config_file)]

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, env=cli_env(db.endpoints), stdout=log, stderr=log)

    first = start()
    try:
        wait_stored(db, config, db.binlog_end(), first, timeout=60)

        def write() -> None:
            conn = my.connect(db.dsn)
            with conn.cursor() as cur:
                for start_id in range(0, 25_000, 50):
                    cur.execute("BEGIN")
                    cur.executemany(
                        f"INSERT INTO {db.name}.big VALUES (%s, 0, 'p')",
                        [(i,) for i in range(start_id, start_id + 50)],
                    )
                    cur.execute("COMMIT")
                for start_id in range(0, 25_000, 50):
                    cur.execute(
                        f"UPDATE {db.name}.big SET n = 1 WHERE id >= %s AND id < %s",
                        (start_id, start_id + 50),
                    )
            conn.close()

        writer = threading.Thread(target=write)
        writer.start()
        deadline = clock.monotonic() + 60
        while _high_watermark(db, db.topic("big")) < 10_000:
            assert clock.monotonic() < deadline and first.poll() is None
            clock.sleep(0.05)
        first.kill()
        first.wait()
        at_kill = _high_watermark(db, db.topic("big"))
        writer.join(120)
        second = start()
        try:
            wait_stored(db, config, db.binlog_end(), second)
            second.send_signal(signal.SIGTERM)
            assert second.wait(60) == 0
        finally:
            if second.poll() is None:
                second.kill()
    finally:
        if first.poll() is None:
            first.kill()
        log.close()
    assert at_kill < 50_000, "the kill came after every change was in Kafka"
    records = read_topic(db.endpoints, db.topic("big"), timeout=120)
    changes = [r.decoded for r in records if isinstance(r.decoded, ChangeEvent)]
    created = {e.after["id"] for e in changes if e.op == "c" and e.after is not None}
    updated = {e.after["id"] for e in changes if e.op == "u" and e.after is not None}
    assert created == set(range(25_000))
    assert updated == set(range(25_000))
    assert final_state(records) == {
        (("id", i),): {"id": i, "n": 1, "pad": "p"} for i in range(25_000)
    }


def test_lost_connection_is_retried_and_nothing_lost(db: MyDb, tmp_path: Path) -> None:
    """The server kills capture's binlog connection: the stream reconnects (the library
    does, from the session's start position) and goes on; nothing is lost."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    config = db.config(["t"])
    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("INSERT INTO t VALUES (1)")
        run.wait_position(db.binlog_end())
        dumps = [r[0] for r in db.sql("SHOW PROCESSLIST") if r[4] == "Binlog Dump"]
        assert dumps
        for thread in dumps:
            db.sql(f"KILL {thread}")
        db.sql("INSERT INTO t VALUES (2)")
        run.wait_position(db.binlog_end())
        run.stop()
    ids = {
        (r.decoded.after or {}).get("id")
        for r in read_topic(db.endpoints, db.topic("t"))
        if isinstance(r.decoded, ChangeEvent)
    }
    assert ids == {1, 2}


def test_truncate_is_an_op_t_event_in_every_partition(db: MyDb, tmp_path: Path) -> None:
    """TRUNCATE TABLE mid-stream, ``truncate_events = true``: op t with a null key in each
    partition, as PostgreSQL's (on a topic not compacted: a compacted one takes no keyless
    record)."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    admin = AdminClient({"bootstrap.servers": db.endpoints.bootstrap_servers})
    ensure_topics(admin, [db.topic("t")], 2, config={"cleanup.policy": "delete"})
    config = db.config(["t"], partitions=2, truncate_events=True)
    with in_process(config, db.capture_endpoints(tmp_path)) as run:
        run.wait_snapshot()
        db.sql("INSERT INTO t VALUES (1)")
        db.sql(f"TRUNCATE TABLE {db.name}.t")
        run.wait_position(db.binlog_end())
        run.stop()
    records = read_topic(db.endpoints, db.topic("t"))
    truncates = [r for r in records if isinstance(r.decoded, ChangeEvent) and r.decoded.op == "t"]
    assert sorted(r.partition for r in truncates) == [0, 1]
    assert all(r.decoded.key is None for r in truncates)  # type: ignore[union-attr]


def test_server_away_is_retried_with_backoff_and_nothing_lost(db: MyDb, tmp_path: Path) -> None:
    """The server unreachable for a few seconds (connections broken, new ones refused):
    capture retries with backoff, then goes on from its last acknowledged position."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    settings = my.connection_settings(db.dsn)
    proxy = Proxy(settings["host"], settings["port"])
    proxy.start()
    dsn = db.dsn.replace(f":{settings['port']}/", f":{proxy.port}/")
    config = db.config(["t"]).model_copy(update={"dsn": SecretStr(dsn)})
    endpoints = dataclasses.replace(db.capture_endpoints(tmp_path), dsn=dsn)
    try:
        with in_process(config, endpoints) as run:
            run.wait_snapshot()
            db.sql("INSERT INTO t VALUES (1)")
            run.wait_position(db.binlog_end())
            proxy.cut()
            db.sql("INSERT INTO t VALUES (2)")
            deadline = clock.monotonic() + 20
            while run.stats.reconnects < 2:
                assert clock.monotonic() < deadline, "capture did not retry"
                clock.sleep(0.1)
            proxy.start()  # the same port again
            run.wait_position(db.binlog_end())
            run.stop()
    finally:
        proxy.cut()
    ids = [
        (r.decoded.after or {}).get("id")
        for r in read_topic(db.endpoints, db.topic("t"))
        if isinstance(r.decoded, ChangeEvent)
    ]
    assert set(ids) == {1, 2}


def test_a_wrong_password_stops_with_one_sentence_and_no_secret(db: MyDb, tmp_path: Path) -> None:
    """Refused credentials are not an outage: exit 1 at once (no retry every 30 s), the
    server's sentence naming the user, never the password, no traceback."""
    db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    user = db.dsn.split("//")[1].split("@")[0].split(":")[0]
    secret = "Wr0ng-s3cret"
    dsn = db.dsn.replace(db.dsn.split("//")[1].split("@")[0], f"{user}:{secret}")
    started = clock.monotonic()
    result = _run_cli(db, _cli(db, tmp_path, ["t"], dsn=dsn), timeout=45)
    assert result.returncode == 1, result.stderr
    assert clock.monotonic() - started < 30, "a refused password was retried"
    assert "the server refused the connection: Access denied for user" in result.stderr
    output = result.stdout + result.stderr
    assert secret not in output and "Traceback" not in output
    assert len([line for line in result.stderr.splitlines() if "error:" in line]) == 1


def test_a_dsn_whose_port_is_not_a_number_is_one_sentence(db: MyDb, tmp_path: Path) -> None:
    """``mysql://u:p@host:33o6/db``: exit 1, one sentence, the DSN (password) not shown."""
    secret = "n0t-to-be-shown"
    dsn = f"mysql://capture:{secret}@127.0.0.1:33o6/{db.name}"
    result = _run_cli(db, _cli(db, tmp_path, ["t"], dsn=dsn), timeout=45)
    assert result.returncode == 1
    assert "port is not a number" in result.stderr
    output = result.stdout + result.stderr
    assert secret not in output and "Traceback" not in output and "ValueError" not in output
