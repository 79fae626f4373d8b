"""Issue 11: no single change halts capture (real PostgreSQL, broker and registry)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg2
import pytest

from bizevents.capture.exceptions import ValueConversionError
from bizevents.contracts.envelope import ChangeEvent
from bizevents.contracts.logical import UNAVAILABLE
from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import (
    Db,
    capture_endpoints,
    database,
    in_process,
    read_topic,
)
from tests.capture.sources import PgSource

pytestmark = pytest.mark.integration


def _changes(db: Db, table: str) -> list[ChangeEvent]:
    records = sorted(read_topic(db.endpoints, db.topic(table)), key=lambda r: r.offset)
    return [r.decoded for r in records if isinstance(r.decoded, ChangeEvent)]


# Each a type family PostgreSQL can store out of line, and a value big enough to be.
_TOASTED = {
    "ints": ("int[]", "(SELECT array_agg(g) FROM generate_series(1, 3000) g)"),
    "big_ints": ("bigint[]", "(SELECT array_agg(g) FROM generate_series(1, 3000) g)"),
    "moods": ("{s}.mood[]", "(SELECT array_agg('ok'::{s}.mood) FROM generate_series(1, 3000))"),
    "amount": ("numeric(1000, 2)", "(repeat('7', 990) || '.25')::numeric"),
    "free": ("numeric", "(repeat('9', 3000))::numeric"),
    "amounts": (
        "numeric(10, 2)[]",
        "(SELECT array_agg(g::numeric) FROM generate_series(1, 3000) g)",
    ),
    "body": ("text", "repeat('x', 9000)"),
    "doc": ("jsonb", "(SELECT jsonb_agg(g) FROM generate_series(1, 3000) g)"),
    "blob": ("bytea", "decode(repeat('ab', 9000), 'hex')"),
    "ids": ("uuid[]", "(SELECT array_agg(gen_random_uuid()) FROM generate_series(1, 300))"),
    "stamps": ("timestamptz[]", "(SELECT array_agg(now()) FROM generate_series(1, 600))"),
    "days": ("date[]", "(SELECT array_agg(current_date + g) FROM generate_series(1, 3000) g)"),
    "flags": ("boolean[]", "(SELECT array_agg(g % 2 = 0) FROM generate_series(1, 9000) g)"),
    "ratios": ("float8[]", "(SELECT array_agg(g / 3.0::float8) FROM generate_series(1, 900) g)"),
}


def test_unchanged_toasted_values_of_every_type_are_unavailable(db: Db, tmp_path: Path) -> None:
    """An UPDATE that leaves a TOASTed value of any type alone: UNAVAILABLE, no halt."""
    s = db.schema
    db.sql(f"CREATE TYPE {s}.mood AS ENUM ('sad', 'ok', 'happy')")
    cols = ", ".join(f"{n} {t.format(s=s)}" for n, (t, _) in _TOASTED.items())
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, small text, {cols})")
    # Every value out of line, even a 500-byte numeric, once the row is big at all.
    db.sql(f"ALTER TABLE {s}.t SET (toast_tuple_target = 128)")
    for name in _TOASTED:
        db.sql(f"ALTER TABLE {s}.t ALTER COLUMN {name} SET STORAGE EXTERNAL")
    values = ", ".join(v.format(s=s) for _, v in _TOASTED.values())
    config = db.config(["t"])
    PgSource(db).capture_through(
        config,
        tmp_path,
        f"INSERT INTO {s}.t VALUES (1, 'a', {values})",
        f"UPDATE {s}.t SET small = 'b'",
        f"INSERT INTO {s}.t (id, small) VALUES (2, 'after')",
    )
    events = _changes(db, "t")
    assert [e.op for e in events] == ["c", "u", "c"]
    created, updated, _ = events
    assert created.after is not None and updated.after is not None
    assert updated.after["small"] == "b"
    for name in _TOASTED:
        assert created.after[name] is not UNAVAILABLE, name
        assert updated.after[name] is UNAVAILABLE, name


@pytest.fixture
def own_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """A PostgreSQL of this test alone (it is restarted): ``(dsn, bin dir, data dir)``."""
    from bizevents.devstack.services import Postgres, postgres_bin_dir
    from bizevents.settings import DevSettings

    dev = DevSettings(postgres_port=0)
    started = Postgres().start(tmp_path_factory.mktemp("own-pg"), dev)
    bin_dir = postgres_bin_dir(dev)
    data = Path(started.extra["data_dir"])
    try:
        yield started.extra["dsn"], bin_dir, data
    finally:
        _pg_ctl(bin_dir, data, "stop", "-m", "immediate")


def _pg_ctl(bin_dir: Path, data: Path, *args: str) -> None:
    # PostgreSQL refuses root; the devstack runs it as the postgres user.
    user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    log = data.parent / "pg_ctl.log"
    subprocess.run(
        [*user, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", *args],
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
    )


def test_database_fast_restarts_reconnect_and_lose_nothing(
    bizevents_stack: Endpoints, own_postgres: tuple[str, Path, Path], tmp_path: Path
) -> None:
    """``pg_ctl restart -m fast`` three times under capture: it reconnects each time."""
    dsn, bin_dir, data = own_postgres
    endpoints = dataclasses.replace(bizevents_stack, postgres_dsn=dsn)
    with database(endpoints) as db:
        db.sql(f"CREATE TABLE {db.schema}.t (id int PRIMARY KEY)")
        stop = threading.Event()
        next_id = [0]

        def write() -> None:
            conn = None
            while not stop.is_set():
                try:
                    if conn is None or conn.closed:
                        conn = psycopg2.connect(dsn)
                        conn.autocommit = True
                    with conn.cursor() as cur:
                        cur.execute(f"INSERT INTO {db.schema}.t VALUES (%s)", (next_id[0] + 1,))
                    next_id[0] += 1
                except psycopg2.Error:
                    conn = None
                    time.sleep(0.2)
                time.sleep(0.01)

        config = db.config(["t"])
        writer = threading.Thread(target=write, daemon=True)
        with in_process(config, capture_endpoints(endpoints, tmp_path)) as run:
            run.wait_snapshot()
            writer.start()
            for _ in range(3):
                time.sleep(1.5)
                _pg_ctl(bin_dir, data, "restart", "-m", "fast")
            time.sleep(1.5)
            stop.set()
            writer.join(30)
            db.conn = psycopg2.connect(dsn)
            db.conn.autocommit = True
            run.wait_acked(db.wal_lsn(), timeout=120)
            assert run.thread.is_alive() and run.error is None, run.error
            assert run.stats.reconnects >= 3
            run.stop()
        ids = {r[0] for r in db.sql(f"SELECT id FROM {db.schema}.t")}
        assert len(ids) > 50
        seen = {e.after["id"] for e in _changes(db, "t") if e.after is not None}
        assert ids <= seen, sorted(ids - seen)[:10]


def _raw_records(db: Db, topic: str, count: int = 2) -> list[Any]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": db.endpoints.bootstrap_servers, "group.id": "raw"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[Any] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(out) < count:
            out += [m for m in consumer.consume(100, timeout=1) if m.error() is None]
        return out
    finally:
        consumer.close()


_HUGE = "(repeat('9', 5000))::numeric"  # more digits than Python converts to int


@pytest.mark.parametrize("mode", ["dead-letter", "skip"])
def test_unconvertible_numeric_goes_to_the_dlq_and_later_rows_flow(
    db: Db, tmp_path: Path, mode: str
) -> None:
    """A 5,000-digit numeric, in the snapshot and the stream: dead-lettered (or skipped)."""
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, n numeric)")
    db.sql(f"INSERT INTO {s}.t VALUES (1, {_HUGE}), (2, 1.5)")
    config = db.config(["t"], on_conversion_error=mode)
    run = PgSource(db).capture_through(
        config,
        tmp_path,
        f"INSERT INTO {s}.t VALUES (3, {_HUGE})",
        f"INSERT INTO {s}.t VALUES (4, 2.5)",
    )
    assert [e.after["id"] for e in _changes(db, "t") if e.after] == [2, 4]
    assert run.stats.conversion_errors == {(f"{s}.t", mode): 2}
    if mode == "skip":
        return
    dead = _raw_records(db, config.dlq_topic)
    assert len(dead) == 2
    snapshot, streamed = (dict(m.headers()) for m in dead)
    assert snapshot["bizevents.dlq.stage"] == b"capture"
    assert b"n" in snapshot["bizevents.dlq.reason"]
    assert snapshot["bizevents.source.position"] == b"snapshot"
    assert json.loads(dead[0].value())[0] == "1"
    assert streamed["bizevents.capture.format"] == b"pgoutput"
    assert streamed["bizevents.source.position"].startswith(b"0/")
    assert dead[1].value()[:1] == b"I"  # the pgoutput Insert message itself


def test_unconvertible_value_with_fail_stops_with_one_sentence(db: Db, tmp_path: Path) -> None:
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, n numeric)")
    config = db.config(["t"], on_conversion_error="fail")
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        db.sql(f"INSERT INTO {s}.t VALUES (3, 'NaN')")
        run.thread.join(30)
    assert isinstance(run.error, ValueConversionError)
    assert f"{s}.t" in str(run.error) and "\n" not in str(run.error)


def test_new_enum_label_gets_a_new_value_schema(db: Db, tmp_path: Path) -> None:
    """ALTER TYPE ... ADD VALUE under capture: the row with the new label decodes."""
    s = db.schema
    db.sql(f"CREATE TYPE {s}.state AS ENUM ('NEW', 'PAID')")
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, st {s}.state, sts {s}.state[])")
    config = db.config(["t"])
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        db.sql(f"INSERT INTO {s}.t VALUES (1, 'PAID', '{{NEW}}')")
        run.wait_acked(db.wal_lsn())
        db.sql(f"ALTER TYPE {s}.state ADD VALUE 'CANCELLED'")
        db.sql(f"INSERT INTO {s}.t VALUES (2, 'CANCELLED', '{{NEW}}')")
        db.sql(f"INSERT INTO {s}.t VALUES (3, 'NEW', '{{CANCELLED}}')")
        run.wait_acked(db.wal_lsn())
        run.stop()
    records = sorted(read_topic(db.endpoints, db.topic("t")), key=lambda r: r.offset)
    events = [r.decoded for r in records]
    assert all(isinstance(e, ChangeEvent) for e in events)
    assert [(e.after["st"], e.after["sts"]) for e in events] == [  # type: ignore[union-attr]
        ("PAID", ["NEW"]),
        ("CANCELLED", ["NEW"]),
        ("NEW", ["CANCELLED"]),
    ]
    assert run.stats.schema_refreshes == 1
    frames = [m.value()[1:5] for m in _raw_records(db, db.topic("t"), 3)]
    assert frames[0] != frames[1] == frames[2]  # the new schema id from that row on


# -- PostgresCapture's own state: the slot's feedback, snapshot dead letters, conditions ----


class _Cursor:
    """A replication cursor's feedback side."""

    def __init__(self, wal_end: int = 0) -> None:
        self.wal_end = wal_end
        self.sent: list[int] = []

    def send_feedback(self, *, write_lsn: int, flush_lsn: int, force: bool) -> None:
        assert write_lsn == flush_lsn and force
        self.sent.append(flush_lsn)


def _capture(tmp_path: Path, **config: Any) -> Any:
    from bizevents.capture.config import CaptureConfig
    from bizevents.capture.core.capture import CaptureEndpoints, Session
    from bizevents.capture.postgres.runner import PostgresCapture

    cfg = CaptureConfig(server="shop", tables=("public.t",), **config)
    capture = PostgresCapture(cfg, CaptureEndpoints("postgresql://u@h/db", {}, {}, tmp_path))
    capture._session = Session(producer=None, admin=None, registrar=None, store=None)  # type: ignore[arg-type]
    return capture


def test_feedback_confirms_what_kafka_acknowledged_at_most_every_half_second(
    tmp_path: Path,
) -> None:
    """A transaction acknowledged is confirmed at its end; a second call within half a
    second sends nothing, unless forced; the acknowledged position never goes back."""
    capture = _capture(tmp_path)
    tracker = capture.session.tracker
    tx = tracker.begin(1)
    tx.produced(1)
    tracker.commit(tx, 0x200)
    cursor = _Cursor(wal_end=0x300)
    capture.feedback(cursor, force=True)
    assert cursor.sent == [0] and capture.stats.acknowledged_lsn == 0  # not yet acknowledged
    tx.ack(None, None)
    tracker.begin(2).produced(1)  # the next one in flight: the server's end is not ours
    capture.feedback(cursor, force=False)
    assert cursor.sent == [0]  # within half a second of the last
    capture.feedback(cursor, force=True)
    assert cursor.sent == [0, 0x200] and capture.stats.acknowledged_lsn == 0x200
    assert capture.last_sent_lsn == 0x200


def test_feedback_with_nothing_in_flight_confirms_the_servers_position(tmp_path: Path) -> None:
    """Idle: the slot may move to the server's end (WAL of other databases, heartbeats)."""
    capture = _capture(tmp_path)
    cursor = _Cursor(wal_end=0x500)
    capture.feedback(cursor, force=True)
    assert cursor.sent == [0x500] and capture.stats.acknowledged_lsn == 0x500


def test_feedback_keeps_the_connection_alive_past_a_heartbeat(tmp_path: Path) -> None:
    """No progress, not forced: still a status update once a heartbeat interval passed."""
    capture = _capture(tmp_path, heartbeat_interval_s=1.0)
    cursor = _Cursor(wal_end=0)
    capture.feedback(cursor, force=True)
    capture._last_feedback -= 0.6  # past the half second, within the heartbeat
    capture.feedback(cursor, force=False)
    assert cursor.sent == [0]
    capture._last_feedback -= 1.0
    capture.feedback(cursor, force=False)
    assert cursor.sent == [0, 0]


def test_a_snapshot_row_dead_letter_holds_no_column_not_captured(tmp_path: Path) -> None:
    capture = _capture(tmp_path)
    codec = SimpleNamespace(dropped=frozenset({1}))
    raw, fmt = capture.snapshot_raw(codec, ("1", "secret", None))
    assert fmt == "snapshot-text-json" and json.loads(raw) == ["1", None, None]


def test_a_condition_is_checked_by_the_database_and_named_as_the_table_names_it(
    db: Db, tmp_path: Path
) -> None:
    """``checked_condition`` (a snapshot signal's ``where``): the canonical text once the
    database took it; a table not captured, a column it lacks or a condition the
    database refuses: :class:`FilterError` with the reason."""
    from bizevents.capture.core.filters import FilterError
    from bizevents.capture.postgres import queries as pg
    from bizevents.capture.postgres.runner import PostgresCapture

    s = db.schema
    db.sql(f'CREATE TABLE {s}.t (id int PRIMARY KEY, "Amount" numeric)')
    capture = PostgresCapture(db.config(["t"]), capture_endpoints(db.endpoints, tmp_path))
    (info,) = pg.describe_tables(db.conn, [f"{s}.t"])
    capture.infos = {info.oid: info}
    assert capture.captured_tables() == [f"{s}.t"]
    assert capture.info_named(f"{s}.t") is info and capture.info_named(f"{s}.u") is None
    assert capture.checked_condition(f"{s}.t", "amount > 3") == "Amount > 3"
    with pytest.raises(FilterError, match="is not captured"):
        capture.checked_condition(f"{s}.u", "id > 3")
    with pytest.raises(FilterError, match="nope"):
        capture.checked_condition(f"{s}.t", "nope > 3")
    with pytest.raises(FilterError, match="invalid input syntax for type integer"):
        capture.checked_condition(f"{s}.t", "id = 'x'")
