"""``bizevents verify`` against the real PostgreSQL and broker: 0 differences on a
captured table, every key of a planted gap found, ``--repair`` closes what a snapshot
can close."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from bizevents.capture.config import CaptureConfig
from bizevents.capture.postgres.messages import parse_lsn
from bizevents.contracts.binary import zigzag
from tests.capture.capture_helpers import (
    REPO,
    Db,
    capture_endpoints,
    cli_env,
    drop_slots,
    in_process,
    write_config,
)

pytestmark = pytest.mark.integration


def table_of_rows(
    db: Db, tmp_path: Path, rows: int, partitions: int = 2
) -> tuple[CaptureConfig, Path]:
    """Table ``t`` (id, v, note) with rows 1 to ``rows`` (``v`` twice the id, note
    'row <id>'), and a capture of it: its config and that config's file."""
    db.sql(f"CREATE TABLE {db.schema}.t (id int PRIMARY KEY, v int, note text)")
    db.sql(
        f"INSERT INTO {db.schema}.t SELECT g, g * 2, 'row ' || g FROM generate_series(1, {rows}) g"
    )
    config = db.config(["t"], partitions=partitions)
    return config, write_config(tmp_path / "capture.toml", config)


def verify(
    config_file: Path, db: Any, *args: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``bizevents verify`` of ``config_file`` on ``db``'s stack (a Db or a MyDb)."""
    return subprocess.run(
        [sys.executable, "-m", "bizevents", "verify", str(config_file), *args],
        env=cli_env(db.endpoints),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def found_differences(
    found: subprocess.CompletedProcess[str],
    inserted: list[int],
    updated: list[int],
    deleted: list[int],
) -> list[str]:
    """Verify exited 1 naming each key of the gap; its output's lines."""
    expected = (
        [f"missing id={i}:" for i in inserted]
        + [f"differs id={i}:" for i in updated]
        + [f"extra id={i}:" for i in deleted]
    )
    return found_lines(found, expected)


def found_lines(found: subprocess.CompletedProcess[str], starts: list[str]) -> list[str]:
    """Verify exited 1 with a line of each of ``starts`` and that many differences; its
    output's lines."""
    assert found.returncode == 1, found.stdout + found.stderr
    assert "Traceback" not in found.stderr
    lines = [line.strip() for line in found.stdout.splitlines()]
    for start in starts:
        assert any(line.startswith(start) for line in lines), (start, found.stdout)
    assert f"{len(starts)} differences" in found.stdout, found.stdout
    return lines


def changed_between(line: str) -> tuple[int | None, int]:
    """From a difference's line: the LSN of the topic's last record of the key (``None``
    when that record has none) and the database's LSN of the comparison."""
    got = re.search(r"changed between (.*) and the database at LSN ([0-9A-F]+/[0-9A-F]+)$", line)
    assert got is not None, line
    topic = re.search(r"at LSN ([0-9A-F]+/[0-9A-F]+)\)$", got.group(1))
    return (parse_lsn(topic.group(1)) if topic else None), parse_lsn(got.group(2))


def records_by_id(db: Db, topic: str) -> dict[bytes, tuple[bytes, bytes]]:
    """key bytes -> (key, value) of the last record of each key (from the topic)."""
    consumer = Consumer(
        {
            "bootstrap.servers": db.endpoints.bootstrap_servers,
            "group.id": "t",
            "enable.partition.eof": True,
        }
    )
    out: dict[bytes, tuple[bytes, bytes]] = {}
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    ends = 0
    while ends < len(meta.partitions):
        m = consumer.poll(5)
        assert m is not None
        if m.error() is not None:
            ends += 1
            continue
        if m.value() is not None:
            out[m.key()] = (m.key(), m.value())
    consumer.close()
    return out


def plant_gap(db: Db, topic: str) -> tuple[Producer, bytes]:
    """A tombstone for live row 42, row 7 overwritten with row 8's values, and a key the
    table does not have (row 8's values under id 999999): the producer and that key."""
    by_id = {k[5:]: v for k, v in records_by_id(db, topic).items()}
    key42, _ = by_id[zigzag(42)]
    key7, _ = by_id[zigzag(7)]
    _, value8 = by_id[zigzag(8)]
    extra_key = key42[:5] + zigzag(999_999)
    producer = Producer(
        {"bootstrap.servers": db.endpoints.bootstrap_servers, "partitioner": "murmur2_random"}
    )
    producer.produce(topic, None, key42)
    producer.produce(topic, value8, key7)
    producer.produce(topic, value8, extra_key)
    producer.flush(10)
    return producer, extra_key


def test_verify_finds_every_key_of_a_planted_gap_and_repair_closes_it(
    db: Db, tmp_path: Path
) -> None:
    s = db.schema
    config, config_file = table_of_rows(db, tmp_path, 3000)
    topic = db.topic("t")
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        db.sql(f"UPDATE {s}.t SET v = -1 WHERE id % 100 = 0")
        db.sql(f"DELETE FROM {s}.t WHERE id = 3000")
        run.wait_acked(db.wal_lsn())
        clean = verify(config_file, db, "--chunk-rows", "500")
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert "2999 rows in 6 chunks, 2999 keys" in clean.stdout
        assert "the topic holds the table" in clean.stdout

        producer, extra_key = plant_gap(db, topic)
        found = verify(config_file, db, "--chunk-rows", "500", "--rechecks", "1")
        assert found.returncode == 1, found.stdout + found.stderr
        lines = found.stdout.splitlines()
        assert any(line.strip().startswith("missing id=42:") for line in lines), found.stdout
        line42 = next(line for line in lines if line.strip().startswith("missing id=42:"))
        assert re.search(r"last record of it \(partition \d+ offset \d+: tombstone\)", line42)
        assert changed_between(line42)[0] is None
        assert any(line.strip().startswith("differs id=7:") for line in lines), found.stdout
        assert any(line.strip().startswith("extra id=999999:") for line in lines), found.stdout
        assert "3 differences" in found.stdout
        assert "Traceback" not in found.stderr

        # A snapshot cannot delete: the extra key is removed by hand; repair does the rest.
        producer.produce(topic, None, extra_key)
        producer.flush(10)
        before = snapshots_run(run)
        repaired = verify(config_file, db, "--chunk-rows", "500", "--repair")
        assert repaired.returncode == 1 and "repair: signal" in repaired.stdout, repaired.stdout
        # The repair's condition, as a signal carries it (bizevents.capture.core.filters).
        assert "id >= '1' AND id <= '500'" in repaired.stdout
        clean_after_repair(run, before, config_file, db, lambda: run.wait_acked(db.wal_lsn()))
        run.stop()


def snapshots_run(run: Any) -> set[tuple[str, str]]:
    """The incremental snapshots that closed a window since capture started, as
    ``(table, signal id)``: taken before a repair is asked, what :func:`wait_repaired`
    waits to grow."""
    incremental = run.runner.incremental
    return set() if incremental is None else set(incremental.run_rows)


def wait_repaired(run: Any, before: set[tuple[str, str]], timeout: float = 60) -> None:
    """Until a snapshot not among ``before`` (:func:`snapshots_run` before the repair was
    asked) ran and none is under way. A snapshot of a few rows runs out before this is
    called: waiting to see one under way first waited the whole timeout, and then passed
    whether or not one had run."""
    ledger = run.runner.ledger
    deadline = time.monotonic() + timeout
    while not (snapshots_run(run) - before and not ledger.queue):
        assert time.monotonic() < deadline, f"the repair's snapshot did not run: {ledger.queue}"
        time.sleep(0.1)


def clean_after_repair(
    run: Any,
    before: set[tuple[str, str]],
    config_file: Path,
    db: Any,
    caught_up: Callable[[], object],
    rows: str = "",
) -> None:
    """Once the repair's snapshot ran (none of ``before``) and capture caught up again
    (``caught_up``), verify finds no difference (and says ``rows`` of the table)."""
    wait_repaired(run, before)
    caught_up()
    after = verify(config_file, db, "--chunk-rows", "500")
    assert after.returncode == 0, after.stdout + after.stderr
    assert rows in after.stdout, after.stdout


def test_verify_finds_the_rows_changed_while_capture_was_stopped_and_its_slot_dropped(
    db: Db, tmp_path: Path
) -> None:
    """Capture runs and stops; its slot is dropped; rows are inserted, updated and
    deleted; capture starts again on a new slot without a snapshot. Verify names every
    one of those keys and exits 1; ``--repair`` tombstones the extra keys (the deletes
    the topic lacks) and snapshots the differing chunks and those keys again, which
    brings the inserts and updates back; then verify reports 0."""
    s = db.schema
    first, _ = table_of_rows(db, tmp_path, 2000)
    with in_process(first, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        db.sql(f"UPDATE {s}.t SET v = -1 WHERE id % 250 = 0")
        run.wait_acked(db.wal_lsn())
        run.stop()
    with db.conn.cursor() as cur:  # once capture's walsender has exited
        drop_slots(cur, db.slot)

    # The gap: written while no slot kept the WAL for capture.
    inserted = list(range(2001, 2006))
    updated = [5, 600, 1500]
    deleted = [10, 1100]
    db.sql(f"INSERT INTO {s}.t SELECT g, g, 'late' FROM generate_series(2001, 2005) g")
    db.sql(f"UPDATE {s}.t SET note = 'changed' WHERE id IN (5, 600, 1500)")
    db.sql(f"DELETE FROM {s}.t WHERE id IN (10, 1100)")

    again = db.config(["t"], partitions=2, snapshot="never")
    config_file = write_config(tmp_path / "capture.toml", again)
    topic = db.topic("t")
    with in_process(again, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        db.sql(f"INSERT INTO {s}.t VALUES (3000, 3000, 'after the restart')")
        run.wait_acked(db.wal_lsn())
        assert db.confirmed() > 0, "capture did not create its new slot"

        found = verify(config_file, db, "--chunk-rows", "500", "--rechecks", "1")
        lines = found_differences(found, inserted, updated, deleted)
        assert "2004 rows in 5 chunks" in found.stdout, found.stdout
        # Each key with the positions between which it changed: the topic's last record
        # of it (the snapshot's, before the slot was dropped) and the database's read.
        stopped_at = db.wal_insert_lsn()
        for i in updated + deleted:
            line = next(
                x
                for x in lines
                if x.startswith(f"{'differs' if i in updated else 'extra'} id={i}:")
            )
            topic_lsn, db_lsn = changed_between(line)
            assert topic_lsn is not None and topic_lsn < db_lsn <= stopped_at, line
        for i in inserted:
            line = next(x for x in lines if x.startswith(f"missing id={i}:"))
            assert "it holds no record of this key" in line, line
            assert changed_between(line)[1] <= stopped_at, line

        before = snapshots_run(run)
        repaired = verify(config_file, db, "--chunk-rows", "500", "--repair")
        assert repaired.returncode == 1 and "repair: signal" in repaired.stdout, repaired.stdout
        assert f"repair: {len(deleted)} tombstones written to {topic}" in repaired.stdout
        expect = "2004 rows in 5 chunks, 2004 keys"
        clean_after_repair(
            run, before, config_file, db, lambda: run.wait_acked(db.wal_lsn()), expect
        )
        run.stop()


def test_verify_as_a_spark_job_finds_the_same_gap(db: Db, tmp_path: Path) -> None:
    """``verify --spark --master local[2]``: the topic read by the replay's range
    readers on Spark's executors, the table's chunks on them too; 0 differences on a
    captured table, then every key of a planted gap (a tombstone for a live row, a row
    overwritten with another's values, a key the table does not have) found key by key,
    exit 1."""
    s = db.schema
    config, config_file = table_of_rows(db, tmp_path, 1200)
    topic = db.topic("t")
    spark = ("--spark", "--master", "local[2]", "--chunk-rows", "500")
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        db.sql(f"UPDATE {s}.t SET v = -1 WHERE id % 100 = 0")
        db.sql(f"DELETE FROM {s}.t WHERE id = 1200")
        run.wait_acked(db.wal_lsn())
        clean = verify(config_file, db, *spark)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert "1199 rows in 3 chunks, 1199 keys" in clean.stdout, clean.stdout
        assert "the topic holds the table" in clean.stdout

        plant_gap(db, topic)
        found = verify(config_file, db, *spark)
        lines = found_lines(found, ["missing id=42:", "differs id=7:", "extra id=999999:"])
        assert "1199 rows in 3 chunks" in found.stdout, found.stdout
        line42 = next(line for line in lines if line.startswith("missing id=42:"))
        assert "tombstone" in line42, line42
        run.stop()
