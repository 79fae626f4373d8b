"""Capture from a real PostgreSQL 15 into the real broker, read back and decoded.

Each test has its own schema, slot, publication and topics; slots are dropped at the
end (a slot left behind holds WAL).
"""

from __future__ import annotations

import random
import signal
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.capture.exceptions import TableNotCapturableError
from bizevents.contracts.envelope import ChangeEvent, PgPosition
from bizevents.contracts.logical import UNAVAILABLE
from tests.capture.capture_helpers import (
    Db,
    capture_endpoints,
    committed_change_lsns,
    final_state,
    in_process,
    key_of,
    read_topic,
    start_cli,
    terminate,
    wait_confirmed,
    wait_snapshot_done,
    write_config,
)
from tests.capture.postgres.test_pgoutput_live import (
    BIG,
    COLUMNS,
    ROWS,
    SELECT_EXPR,
    _expected,
    _same,
)
from tests.capture.sources import PgSource

pytestmark = pytest.mark.integration


def _table_state(db: Db, table: str, key: str = "id") -> dict[tuple[Any, ...], dict[str, Any]]:
    with db.conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute(f"SELECT * FROM {db.schema}.{table}")
        return {((key, r[key]),): dict(r) for r in cur.fetchall()}


def test_snapshot_with_concurrent_writes(db: Db, tmp_path: Path) -> None:
    """Rows written while the snapshot runs end in the right final per-key state."""
    db.sql(f"CREATE TABLE {db.schema}.accounts (id bigint PRIMARY KEY, balance int, note text)")
    db.sql(
        f"INSERT INTO {db.schema}.accounts SELECT g, 0, 'start' FROM generate_series(1, 20000) g"
    )
    stop = threading.Event()
    written = [0]

    def writer() -> None:
        conn = psycopg2.connect(db.endpoints.postgres_dsn)
        rnd = random.Random(4)
        try:
            with conn.cursor() as cur:
                while not stop.is_set():
                    for _ in range(20):
                        k = rnd.randrange(1, 22_000)
                        action = rnd.random()
                        if action < 0.6:
                            cur.execute(
                                f"INSERT INTO {db.schema}.accounts VALUES (%s, 1, 'w') "
                                "ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + 1, "
                                "note = 'u'",
                                (k,),
                            )
                        else:
                            cur.execute(f"DELETE FROM {db.schema}.accounts WHERE id = %s", (k,))
                        written[0] += 1
                    conn.commit()
        finally:
            conn.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.3)
        config = db.config(["accounts"], partitions=3, snapshot_fetch_rows=200)
        with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
            while not run.stats.snapshot_done and run.error is None:
                time.sleep(0.05)
            time.sleep(0.5)
            stop.set()
            thread.join()
            run.wait_acked(db.wal_lsn())
            run.stop()
    finally:
        stop.set()
        thread.join()
    assert written[0] > 0
    records = read_topic(db.endpoints, db.topic("accounts"))
    snapshot_events = [
        r.decoded for r in records if isinstance(r.decoded, ChangeEvent) and r.decoded.op == "r"
    ]
    assert len(snapshot_events) >= 20_000 - written[0]
    assert [e.source.snapshot_raw for e in snapshot_events].count("last") == 1
    streamed = [r for r in records if isinstance(r.decoded, ChangeEvent) and r.decoded.op != "r"]
    assert streamed, "the concurrent writes after the snapshot were streamed"
    assert final_state(records) == _table_state(db, "accounts")


def _selected(db: Db, ids: list[int]) -> dict[int, dict[str, Any]]:
    exprs = ", ".join(f"{SELECT_EXPR.get(n, n)} AS {n}" for n, _ in COLUMNS)
    with db.conn.cursor() as cur:
        cur.execute(f"SELECT {exprs} FROM {db.schema}.everything WHERE id = ANY(%s)", (ids,))
        names = [d[0] for d in cur.description]
        return {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}


def _wire_expected(column: str, selected: Any) -> Any:
    """What SELECT gave, as contracts' decoders give it back from the topic."""
    value = _expected(column, selected)
    if column == "ts" and value is not None:
        from datetime import UTC

        return value.replace(tzinfo=UTC)  # a timestamp reads back as its wall clock in UTC
    return value


def test_every_type_last_event_equals_select(db: Db, tmp_path: Path) -> None:
    """Snapshot and stream of every mapped type: the last event per key equals SELECT."""
    db.sql(f"CREATE TYPE {db.schema}.mood AS ENUM ('sad', 'ok', 'happy')")
    cols = ", ".join(f"{n} {t.format(mood=f'{db.schema}.mood')}" for n, t in COLUMNS)
    db.sql(f"CREATE TABLE {db.schema}.everything ({cols})")
    rows = [dict(r) for r in ROWS]
    rows[2]["free"] = Decimal("-0.000000000000000000000000000001")  # NaN has no Avro decimal

    def insert(row: dict[str, Any]) -> None:
        names = list(row)
        db.sql(
            f"INSERT INTO {db.schema}.everything ({', '.join(names)}) "
            f"VALUES ({', '.join(['%s'] * len(names))})",
            [row[n] for n in names],
        )

    insert(rows[0])  # read by the snapshot
    config = db.config(["everything"], partitions=2)
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        insert(rows[1])  # streamed
        insert(rows[2])
        db.sql(f"UPDATE {db.schema}.everything SET i = i - 1 WHERE id = 1")  # TOAST untouched
        run.wait_acked(db.wal_lsn())
        run.stop()
    records = read_topic(db.endpoints, db.topic("everything"))
    last: dict[int, ChangeEvent] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert isinstance(r.decoded, ChangeEvent)
        assert r.decoded.after is not None
        last[r.decoded.after["id"]] = r.decoded
    assert {e.op for e in last.values()} == {"c", "u"}, [
        (r.partition, r.offset, getattr(r.decoded, "op", None)) for r in records
    ]
    selected = _selected(db, [1, 2, 3])
    for key, event in last.items():
        after = event.after
        assert after is not None
        for name, _ in COLUMNS:
            if key == 1 and name == "big":
                assert after[name] is UNAVAILABLE  # unchanged TOAST, never passed off as null
                continue
            want = _wire_expected(name, selected[key][name])
            assert _same(after[name], want), (key, name, after[name], want)
    assert selected[1]["big"] == BIG
    source = last[2].source
    assert (source.connector, source.name, source.schema, source.table) == (
        "postgresql",
        db.server,
        db.schema,
        "everything",
    )
    assert isinstance(source.position, PgPosition) and source.position.tx_id
    assert source.ts_ms > 0 and not source.snapshot


def test_kill_9_mid_stream_then_restart_loses_nothing(db: Db, tmp_path: Path) -> None:
    """kill -9 in the middle of 50,000 changes, restart: final state right, no change missing."""
    for t in ("items", "stock"):
        db.sql(f"CREATE TABLE {db.schema}.{t} (id bigint PRIMARY KEY, v int, label text)")
    db.sql(f"INSERT INTO {db.schema}.items SELECT g, 0, 'seed' FROM generate_series(1, 500) g")
    config = db.config(["items", "stock"], partitions=3, state_dir=tmp_path / "state")
    config_file = write_config(tmp_path / "capture.toml", config)
    log = tmp_path / "capture.log"
    process = start_cli(config_file, db.endpoints, log)
    try:
        wait_snapshot_done(db, tmp_path / "state", process, log)
        witness = db.slot + "_witness"
        db.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (witness,))

        done = threading.Event()
        total = 50_000

        def writer() -> None:
            conn = psycopg2.connect(db.endpoints.postgres_dsn)
            rnd = random.Random(9)
            changes = 0
            try:
                with conn.cursor() as cur:
                    while changes < total:
                        for _ in range(50):
                            table = "items" if rnd.random() < 0.7 else "stock"
                            k = rnd.randrange(1, 3000)
                            if rnd.random() < 0.85:
                                cur.execute(
                                    f"INSERT INTO {db.schema}.{table} VALUES (%s, 1, 'n') "
                                    f"ON CONFLICT (id) DO UPDATE SET v = {table}.v + 1, "
                                    "label = 'u'",
                                    (k,),
                                )
                            else:
                                cur.execute(f"DELETE FROM {db.schema}.{table} WHERE id = %s", (k,))
                            changes += cur.rowcount  # a delete of a missing row changes nothing
                        conn.commit()
            finally:
                conn.close()
                done.set()

        thread = threading.Thread(target=writer)
        start_lsn = db.wal_lsn()
        thread.start()
        # Kill once capture is well into the changes (some confirmed, more to come).
        deadline = time.monotonic() + 60
        while db.confirmed() <= start_lsn or db.wal_lsn() - start_lsn < 1_000_000:
            assert time.monotonic() < deadline and process.poll() is None, log.read_text()[-3000:]
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        killed_at = db.confirmed()
        assert not done.is_set(), "the kill came after the last change"
        process = start_cli(config_file, db.endpoints, log)
        thread.join()
        end = db.wal_lsn()
        wait_confirmed(db, end, process=process, log=log)
        assert terminate(process) == 0, log.read_text()[-3000:]
        assert killed_at < end
        expected_lsns = committed_change_lsns(db, witness)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert len(expected_lsns) >= total
    seen: set[int] = set()
    for table in ("items", "stock"):
        records = read_topic(db.endpoints, db.topic(table))
        assert final_state(records) == _table_state(db, table), table
        for r in records:
            if isinstance(r.decoded, ChangeEvent) and r.decoded.op != "r":
                pos = r.decoded.source.position
                assert isinstance(pos, PgPosition) and pos.lsn is not None
                seen.add(pos.lsn)
    missing = expected_lsns - seen
    assert not missing, f"{len(missing)} committed changes never reached Kafka"
    assert "snapshot started" not in log.read_text().split("streaming", 1)[1], (
        "the restart resumed from the slot instead of snapshotting again"
    )


def test_column_added_mid_stream_registers_a_new_version(db: Db, tmp_path: Path) -> None:
    """ALTER TABLE ADD COLUMN: a new value schema version, and events keep flowing."""
    db.sql(f"CREATE TABLE {db.schema}.people (id int PRIMARY KEY, name text)")
    db.sql(f"INSERT INTO {db.schema}.people VALUES (1, 'ann')")
    config = db.config(["people"])
    PgSource(db).capture_through(
        config,
        tmp_path,
        f"INSERT INTO {db.schema}.people VALUES (2, 'bob')",
        f"ALTER TABLE {db.schema}.people ADD COLUMN city text DEFAULT 'Gent'",
        f"INSERT INTO {db.schema}.people VALUES (3, 'cy', 'Oslo')",
        f"UPDATE {db.schema}.people SET name = 'ann2' WHERE id = 1",
    )
    registry = SchemaRegistryClient({"url": db.endpoints.registry_url})
    topic = db.topic("people")
    assert len(registry.get_versions(f"{topic}-value")) == 2
    assert len(registry.get_versions(f"{topic}-key")) == 1
    records = read_topic(db.endpoints, topic)
    events = [r.decoded for r in sorted(records, key=lambda r: r.offset)]
    assert [
        (e.op, dict(e.after or {}).get("id")) for e in events if isinstance(e, ChangeEvent)
    ] == [
        ("r", 1),
        ("c", 2),
        ("c", 3),
        ("u", 1),
    ]
    assert final_state(records) == {
        key_of({"id": 1}): {"id": 1, "name": "ann2", "city": "Gent"},
        key_of({"id": 2}): {"id": 2, "name": "bob"},
        key_of({"id": 3}): {"id": 3, "name": "cy", "city": "Oslo"},
    }


def test_table_without_key_or_identity_is_refused(db: Db, tmp_path: Path) -> None:
    """No primary key and no replica identity: refused with the sentence that fixes it."""
    db.sql(f"CREATE TABLE {db.schema}.loose (a int, b text)")
    config = db.config(["loose"])
    with (
        in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run,
        pytest.raises(TableNotCapturableError) as caught,
    ):
        run.thread.join(30)
        if run.error is not None:
            raise run.error
    message = str(caught.value)
    assert f"ALTER TABLE {db.schema}.loose REPLICA IDENTITY FULL" in message
    assert "primary key" in message
    # With REPLICA IDENTITY FULL it is captured, keyed by the whole row.
    db.sql(f"ALTER TABLE {db.schema}.loose REPLICA IDENTITY FULL")
    db.sql(f"INSERT INTO {db.schema}.loose VALUES (1, 'x'), (2, NULL)")
    PgSource(db).capture_through(
        config, tmp_path, f"UPDATE {db.schema}.loose SET b = 'y' WHERE a = 1"
    )
    state = final_state(read_topic(db.endpoints, db.topic("loose")))
    assert sorted(state.values(), key=lambda r: r["a"]) == [
        {"a": 1, "b": "y"},
        {"a": 2, "b": None},
    ]


def test_sigterm_exits_0_after_acknowledging(db: Db, tmp_path: Path) -> None:
    """SIGTERM mid-stream: exit 0; everything up to the confirmed position is in Kafka."""
    db.sql(f"CREATE TABLE {db.schema}.events (id bigint PRIMARY KEY, payload text)")
    config = db.config(["events"], partitions=2, state_dir=tmp_path / "state")
    config_file = write_config(tmp_path / "capture.toml", config)
    log = tmp_path / "capture.log"
    witness = db.slot + "_witness"
    db.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (witness,))
    process = start_cli(config_file, db.endpoints, log)
    try:
        wait_snapshot_done(db, tmp_path / "state", process, log)
        db.sql(
            f"INSERT INTO {db.schema}.events SELECT g, repeat('p', 50) "
            "FROM generate_series(1, 20000) g"
        )
        wait_confirmed(db, db.wal_lsn(), process=process, log=log)
        for i in range(20):
            db.sql(
                f"INSERT INTO {db.schema}.events SELECT g, 'late' FROM generate_series(%s, %s) g",
                (100_000 + i * 1000, 100_999 + i * 1000),
            )
        assert terminate(process) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    confirmed = db.confirmed()
    assert "stopped; slot confirmed" in log.read_text()
    records = read_topic(db.endpoints, db.topic("events"))
    seen = {
        r.decoded.source.position.lsn
        for r in records
        if isinstance(r.decoded, ChangeEvent) and isinstance(r.decoded.source.position, PgPosition)
    }
    # Confirmed means every transaction committed by then (psycopg2 forwards the flush
    # position to the server's keepalive position when nothing is pending; that can lie
    # after the changes, not yet sent, of a transaction that commits later).
    expected = committed_change_lsns(db, witness, confirmed_before=confirmed)
    assert len(expected) >= 20_000
    assert expected <= seen


def test_database_connection_lost_reconnects_and_metrics_show_it(db: Db, tmp_path: Path) -> None:
    """The walsender is killed mid-stream: capture reconnects, resumes; metrics say so."""
    import urllib.request

    from bizevents.capture.metrics import serve_metrics

    db.sql(f"CREATE TABLE {db.schema}.ledger (id bigint PRIMARY KEY, amount int)")
    config = db.config(["ledger"], partitions=2)
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        _, port = serve_metrics(run.stats, "127.0.0.1", 0)
        run.wait_snapshot()
        db.sql(f"INSERT INTO {db.schema}.ledger SELECT g, g FROM generate_series(1, 3000) g")
        db.sql(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            "WHERE slot_name = %s AND active_pid IS NOT NULL",
            (db.slot,),
        )
        db.sql(f"UPDATE {db.schema}.ledger SET amount = -amount WHERE id % 3 = 0")
        db.sql(f"DELETE FROM {db.schema}.ledger WHERE id % 5 = 0")
        run.wait_acked(db.wal_lsn())
        time.sleep(1.2)  # a heartbeat: lag and per-table counts
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        run.stop()
    assert run.stats.reconnects >= 1
    assert (
        f'bizevents_capture_events_total{{server="{db.server}",slot="{db.slot}",table="{db.schema}.ledger"}}'
        in text
    )
    assert "bizevents_capture_lag_bytes" in text
    assert "bizevents_capture_acknowledged_lsn" in text
    assert "bizevents_capture_snapshot_done{" in text
    assert final_state(read_topic(db.endpoints, db.topic("ledger"))) == _table_state(db, "ledger")


def test_negative_zero_keeps_its_sign_from_the_snapshot_as_from_the_stream(
    db: Db, tmp_path: Path
) -> None:
    """A ``real`` and a ``double precision`` holding -0.0: the snapshot's ``r`` event and
    the stream's ``c`` event both carry -0.0 (the sign bit), not 0.0."""
    import math

    db.sql(f"CREATE TABLE {db.schema}.z (id int PRIMARY KEY, r real, d double precision)")
    db.sql(f"INSERT INTO {db.schema}.z VALUES (1, '-0'::real, '-0'::float8)")
    with in_process(db.config(["z"]), capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        db.sql(f"INSERT INTO {db.schema}.z VALUES (2, '-0'::real, '-0'::float8)")
        run.wait_acked(db.wal_lsn())
        run.stop()
    events = {
        r.decoded.op: r.decoded.after
        for r in read_topic(db.endpoints, db.topic("z"))
        if isinstance(r.decoded, ChangeEvent)
    }
    for op in ("r", "c"):
        after = events[op]
        assert after is not None
        assert after["r"] == 0.0 and math.copysign(1.0, after["r"]) == -1.0, (op, after)
        assert after["d"] == 0.0 and math.copysign(1.0, after["d"]) == -1.0, (op, after)
