"""Issue 29, capture quarantine: a change capture cannot convert parks its key until a
re-drive with the fixed code (real PostgreSQL, broker and registry)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bizevents.capture.core.quarantine import (
    CAPTURE,
    HEADER_CAPTURE_CONTEXT,
    ask_capture,
    parked_keys,
)
from bizevents.capture.exceptions import CaptureError
from bizevents.capture.metrics import serve_metrics
from bizevents.capture.postgres.messages import format_lsn, parse_lsn
from bizevents.capture.postgres.types import register_converter
from bizevents.cli import main
from bizevents.contracts.envelope import ChangeEvent, PgPosition
from bizevents.plumbing.parking import PARKED_HEADER
from bizevents.plumbing.parkingio import read_to_end
from bizevents.status import figures, scrape
from tests.capture.capture_helpers import (
    Db,
    InProcess,
    capture_endpoints,
    in_process,
    wait_confirmed,
    write_config,
)
from tests.capture.quarantine_helpers import (
    Source,
    events_by_id,
    kill_9_mid_redrive,
    numeric_fixed,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def numeric_fix() -> Iterator[Any]:
    """The 'code fix': a numeric converter that takes NaN (as 0), switched on by the test."""

    def switch_on() -> None:
        register_converter("numeric", numeric_fixed)

    try:
        yield switch_on
    finally:
        register_converter("numeric", None)


def _events(db: Db, table: str) -> dict[int, list[ChangeEvent]]:
    return events_by_id(db.endpoints, db.topic(table))


def _cli(db: Db, *args: str) -> Any:
    """``bizevents capture ARGS`` in this process (the capture runs in a thread of it)."""
    env = {
        "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": db.endpoints.bootstrap_servers,
        "BIZEVENTS_REGISTRY__URL": db.endpoints.registry_url,
    }
    return CliRunner().invoke(main, ["capture", *args], env=env)


def _kafka(db: Db) -> dict[str, Any]:
    return {"bootstrap.servers": db.endpoints.bootstrap_servers}


def _scraped(run: InProcess, table: str) -> dict[str, Any]:
    """The table's figures as ``bizevents status`` reads them from the running
    capture's metrics endpoint."""
    server, port = serve_metrics(run.stats, "127.0.0.1", 0)
    try:
        samples = scrape([f"http://127.0.0.1:{port}/metrics"])
    finally:
        server.shutdown()
    tables: dict[str, Any] = figures(samples, samples, 1.0)["capture"]["tables"]
    return tables[table]


def test_unconvertible_change_parks_its_key_and_redrive_writes_it_in_order(
    db: Db, tmp_path: Path, numeric_fix: Any
) -> None:
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, n numeric(10, 2), note text)")
    db.sql(f"INSERT INTO {s}.t VALUES (1, 1.00, 'a'), (2, 2.00, 'a')")
    config = db.config(["t"], on_conversion_error="park", partitions=2)
    endpoints = capture_endpoints(db.endpoints, tmp_path)
    kafka = _kafka(db)

    with in_process(config, endpoints) as run:
        run.wait_snapshot()
        db.sql(f"UPDATE {s}.t SET n = 'NaN', note = 'p0' WHERE id = 1")  # does not convert
        for i in range(1, 4):  # convertible, but behind the parked one
            db.sql(f"UPDATE {s}.t SET note = 'p{i}' WHERE id = 1")
            db.sql(f"UPDATE {s}.t SET note = 'q{i}' WHERE id = 2")  # another key flows on
        run.wait_acked(db.wal_lsn())  # parked records included
        run.stop()

    events = _events(db, "t")
    assert [e.after["note"] for e in events[1]] == ["a"]  # nothing after the park
    assert [e.after["note"] for e in events[2]] == ["a", "q1", "q2", "q3"]
    dead = read_to_end(kafka, config.dlq_topic)
    assert len(dead) == 4
    first = dict(dead[0].headers())
    assert first[PARKED_HEADER] == b"1"
    assert first["bizevents.dlq.stage"] == b"capture"
    assert f"{s}.t.n".encode() in first["bizevents.dlq.reason"]
    context = json.loads(first[HEADER_CAPTURE_CONTEXT])
    assert context["relation"]["name"] == "t" and context["xid"] and context["lsn"] > 0
    assert [dict(m.headers())["bizevents.dlq.stage"] for m in dead[1:]] == [b"parked"] * 3
    assert len({m.key() for m in dead}) == 1 and dead[0].value()[:1] == b"U"
    keys, _ = parked_keys(kafka, config.parked_topic_name)
    ((ref, state),) = keys.parked.items()
    assert ref[0] == CAPTURE and ref[1] == db.topic("t") and state.first == context["lsn"]

    # A second run restores the parked key from Kafka: the key's changes still park.
    with in_process(config, endpoints) as run:
        run.wait_snapshot()
        # its metrics endpoint counts the restored key (parked by the first run)
        assert _scraped(run, f"{s}.t")["parked_keys"] == 1
        db.sql(f"UPDATE {s}.t SET note = 'p4' WHERE id = 1")
        run.wait_acked(db.wal_lsn())
        assert [e.after["note"] for e in _events(db, "t")[1]] == ["a"]
        assert _scraped(run, f"{s}.t")["parked"] == 1  # this run's: p4

        # The command lists it; re-driven before the fix, it fails again: exit 1, one
        # sentence, the key stays parked with the new reason.
        config_file = write_config(tmp_path / "capture.toml", config)
        listed = _cli(db, "parked", str(config_file), "--json")
        assert listed.exit_code == 0, listed.output
        assert [r["key"] for r in json.loads(listed.output)] == [ref[3].hex()]
        assert [r["key_json"] for r in json.loads(listed.output)] == ['{"id": 1}']
        # ... and shows its parked changes, in order, from the dead-letter topic (the key
        # as its JSON, as the list shows it; its hex is taken too)
        shown = _cli(db, "parked", str(config_file), "--key", '{"id": 1}', "--json")
        assert shown.exit_code == 0, shown.output
        rows = json.loads(shown.output)
        assert [r["stage"] for r in rows] == ["capture"] + ["parked"] * 4  # p0, p1 .. p4
        assert rows[0]["position"] == format_lsn(context["lsn"])
        assert f"{s}.t.n" in rows[0]["reason"] and rows[1]["reason"].startswith("key parked")
        assert {r["topic"] for r in rows} == {db.topic("t")}
        lsns = [parse_lsn(r["position"]) for r in rows]
        assert lsns == sorted(lsns) and len(set(lsns)) == 5
        text = _cli(db, "parked", str(config_file), "--key", ref[3].hex())
        assert text.exit_code == 0 and "5 parked changes" in text.output
        unknown = _cli(db, "parked", str(config_file), "--key", "ff")
        assert unknown.exit_code == 1 and "key ff is not parked" in unknown.output
        assert "Traceback" not in unknown.output
        failed = _cli(db, "redrive", str(config_file), "--key", '{"id": 1}')
        assert failed.exit_code == 1 and 'key {"id": 1}:' in failed.output
        assert "still does not convert" in failed.output and "Traceback" not in failed.output
        keys, _ = parked_keys(kafka, config.parked_topic_name)
        assert ref in keys.parked and "NaN" in keys.parked[ref].latest_reason

        # The fix, then the re-drive while the key's live changes keep coming.
        numeric_fix()
        stop = threading.Event()

        def writer() -> None:
            i = 5
            while not stop.is_set() and i < 600:
                db.sql(f"UPDATE {s}.t SET note = 'p{i}' WHERE id = 1")
                i += 1
                time.sleep(0.005)

        with _running(writer, stop):
            time.sleep(0.3)
            (answer,) = ask_capture(kafka, config.parked_topic_name, "redrive", ref[3].hex(), 60)
            at_answer = db.sql(f"SELECT note FROM {s}.t WHERE id = 1")[0][0]
            time.sleep(0.5)  # live changes of the key after its unpark too
        assert answer.status == "done", answer.message
        run.wait_acked(db.wal_lsn())
        after = _scraped(run, f"{s}.t")
        run.stop()
    redriven = int(answer.message.split()[0])  # "N parked changes of ..."
    assert redriven >= 5  # p0 .. p4, and the writer's parked before the request ran
    assert (after["parked_keys"], after["redriven"]) == (0, redriven)

    written = [e.after["note"] for e in _events(db, "t")[1]]
    last = int(db.sql(f"SELECT note FROM {s}.t WHERE id = 1")[0][0][1:])
    # Every change of the key, once, in source order: the parked ones re-driven first,
    # no live one before them.
    assert written == ["a"] + [f"p{i}" for i in range(last + 1)]
    assert last > int(at_answer[1:])  # the writer went on after the re-drive
    first_redriven = _events(db, "t")[1][1]
    assert first_redriven.after["n"] == Decimal(0)  # decoded with the fix
    position = first_redriven.source.position
    assert isinstance(position, PgPosition)
    assert position.lsn == context["lsn"] and position.tx_id == context["xid"]
    keys, _ = parked_keys(kafka, config.parked_topic_name)
    assert not keys.parked


def test_past_the_bound_capture_stops_with_one_sentence(db: Db, tmp_path: Path) -> None:
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, n numeric(10, 2))")
    config = db.config(["t"], on_conversion_error="park", max_parked_keys=1)
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        db.sql(f"INSERT INTO {s}.t VALUES (1, 'NaN')")
        db.sql(f"INSERT INTO {s}.t VALUES (2, 'NaN')")
        run.thread.join(30)
    assert isinstance(run.error, CaptureError)
    message = str(run.error)
    assert "max_parked_keys" in message and "\n" not in message
    # No capture runs now: a re-drive asked for says so in one sentence.
    kafka = _kafka(db)
    with pytest.raises(CaptureError, match="no capture answered within 1 s"):
        ask_capture(kafka, config.parked_topic_name, "redrive", None, 1)
    with pytest.raises(CaptureError, match="key ff is not parked"):
        ask_capture(kafka, config.parked_topic_name, "redrive", "ff", 1)


class _running:
    """Runs ``target`` in a thread for the ``with`` block, then stops and joins it."""

    def __init__(self, target: Any, stop: threading.Event) -> None:
        self.thread = threading.Thread(target=target, daemon=True)
        self.stop = stop

    def __enter__(self) -> None:
        self.thread.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def test_discard_drops_a_keys_parked_changes_with_the_reason(db: Db, tmp_path: Path) -> None:
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, n numeric(10, 2), note text)")
    db.sql(f"INSERT INTO {s}.t VALUES (1, 1.00, 'a')")
    config = db.config(["t"], on_conversion_error="park")
    kafka = _kafka(db)
    config_file = write_config(tmp_path / "capture.toml", config)
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        db.sql(f"UPDATE {s}.t SET n = 'NaN', note = 'bad' WHERE id = 1")  # parks the key
        db.sql(f"UPDATE {s}.t SET note = 'behind' WHERE id = 1")  # parked behind it
        run.wait_acked(db.wal_lsn())
        keys, _ = parked_keys(kafka, config.parked_topic_name)
        ((ref, _state),) = keys.parked.items()

        unknown = _cli(db, "discard", str(config_file), "--key", "ff", "--reason", "x")
        assert unknown.exit_code == 1 and "key ff is not parked" in unknown.output
        assert "Traceback" not in unknown.output
        done = _cli(
            db, "discard", str(config_file), "--key", ref[3].hex(),
            "--reason", "NaN total: repaired by hand in the ledger",
        )  # fmt: skip
        assert done.exit_code == 0, done.output
        assert "2 parked changes" in done.output

        db.sql(f"UPDATE {s}.t SET n = 3.00, note = 'after' WHERE id = 1")  # flows again
        run.wait_acked(db.wal_lsn())
        run.stop()

    # The parked changes never reach the topic; the key's later ones do.
    assert [e.after["note"] for e in _events(db, "t")[1]] == ["a", "after"]
    keys, _ = parked_keys(kafka, config.parked_topic_name)
    assert not keys.parked
    (state,) = [
        json.loads(m.value())
        for m in read_to_end(kafka, config.parked_topic_name)
        if m.key() == b"park|capture|" + ref[1].encode() + b"|-1|" + ref[3].hex().encode()
    ][-1:]
    assert state["state"] == "unparked"
    assert "NaN total: repaired by hand in the ledger" in state["how"]
    assert len(read_to_end(kafka, config.dlq_topic)) == 2  # kept, for the record


def test_kill_9_mid_redrive_ends_with_every_change_once_in_order(db: Db, tmp_path: Path) -> None:
    """Capture is killed -9 once Kafka acknowledged half of a key's re-driven changes
    (the fault planted by tests/capture/redrive_crash.py), before the rest and the
    unpark; the restarted capture carries the pending request out again: every change of
    the key once in source order (the repeated half byte for byte identical), unparked
    (tests/capture/quarantine_helpers.py, shared with MariaDB's twin)."""
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, n numeric(10, 2), note text)")
    db.sql(f"INSERT INTO {s}.t VALUES (1, 1.00, 'a')")
    config = db.config(["t"], on_conversion_error="park")
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        db.sql(f"UPDATE {s}.t SET n = 'NaN', note = 'p0' WHERE id = 1")  # parks the key
        db.sql(  # 400 changes parked behind it, one transaction
            f"DO $$ BEGIN FOR i IN 1..400 LOOP "
            f"UPDATE {s}.t SET note = 'p' || i WHERE id = 1; END LOOP; END $$"
        )
        run.wait_acked(db.wal_lsn())
        run.stop()
    config_file = write_config(tmp_path / "capture.toml", config)

    def live_change() -> None:
        db.sql(f"UPDATE {s}.t SET note = 'after' WHERE id = 1")

    def caught_up(process: subprocess.Popen[bytes], log: Path) -> None:
        wait_confirmed(db, db.wal_lsn(), process=process, log=log)

    source = Source("postgres", live_change, caught_up)
    kill_9_mid_redrive(
        db.endpoints,
        config.parked_topic_name,
        db.topic("t"),
        config_file,
        source,
        tmp_path / "capture.log",
        behind=400,
    )
