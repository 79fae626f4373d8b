"""``bizevents verify`` on a technical topic Apache Kafka really compacted: the table and
the topic are equal, and a row removed from the table behind capture's back is found
and repaired (its tombstone, compacted away in turn, leaves them equal)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import (
    Db,
    capture_endpoints,
    database,
    drop_slots,
    in_process,
    write_config,
)
from tests.capture.test_verify import table_of_rows, verify
from tests.compaction import Kept, compact, compact_quickly, missing_offsets

pytestmark = pytest.mark.integration


@pytest.fixture
def db(bizevents_stack_on: Callable[[Any], Endpoints]) -> Iterator[Db]:
    with database(bizevents_stack_on("kafka")) as made:  # Tansu does not compact
        yield made


def cleaned(kept: list[Kept]) -> bool:
    """Older versions gone (offsets missing), no tombstone left, each key once but the
    rolls' row (the last record: the active segment holds its latest version, the
    segment before may still hold the one before)."""
    others = [r.key for r in kept if r.key != kept[-1].key]
    return (
        missing_offsets(kept) > 0
        and len(set(others)) == len(others)
        and all(r.value is not None for r in kept)
    )


def test_verify_on_a_compacted_topic_finds_it_equal_and_repairs_a_removed_row(
    db: Db, tmp_path: Path
) -> None:
    s = db.schema
    config, config_file = table_of_rows(db, tmp_path, 300, partitions=1)
    topic = db.topic("t")
    bootstrap = db.endpoints.bootstrap_servers

    def roll() -> None:
        db.sql(f"UPDATE {s}.t SET v = v + 1 WHERE id = 1")

    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        db.sql(f"UPDATE {s}.t SET v = v + 1")
        db.sql(f"UPDATE {s}.t SET note = 'again ' || id WHERE id % 3 = 0")
        db.sql(f"DELETE FROM {s}.t WHERE id % 50 = 0")
        run.wait_acked(db.wal_lsn())
        compact_quickly(bootstrap, topic)
        kept = compact(bootstrap, topic, roll, cleaned)
        assert len({r.key for r in kept}) == 294  # the rows; nothing of the 6 deleted
        run.wait_acked(db.wal_lsn())

        equal = verify(config_file, db, "--chunk-rows", "100")
        assert equal.returncode == 0, equal.stdout + equal.stderr
        assert "294 rows in 3 chunks, 294 keys" in equal.stdout, equal.stdout
        assert "the topic holds the table" in equal.stdout
        run.stop()

    # Removed behind capture's back: deleted while no slot kept the WAL for it.
    with db.conn.cursor() as cur:  # once capture's walsender has exited
        drop_slots(cur, db.slot)
    db.sql(f"DELETE FROM {s}.t WHERE id IN (7, 8)")
    again = db.config(["t"], partitions=1, snapshot="never")
    config_file = write_config(tmp_path / "capture.toml", again)
    with in_process(again, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        roll()
        run.wait_acked(db.wal_lsn())
        found = verify(config_file, db, "--chunk-rows", "100", "--rechecks", "1")
        assert found.returncode == 1, found.stdout + found.stderr
        lines = [line.strip() for line in found.stdout.splitlines()]
        for key in (7, 8):
            assert any(line.startswith(f"extra id={key}:") for line in lines), found.stdout
        assert "2 differences" in found.stdout, found.stdout

        repaired = verify(config_file, db, "--chunk-rows", "100", "--repair")
        assert f"repair: 2 tombstones written to {topic}" in repaired.stdout, repaired.stdout
        after = verify(config_file, db, "--chunk-rows", "100")
        assert after.returncode == 0, after.stdout + after.stderr
        assert "292 rows in 3 chunks, 292 keys" in after.stdout, after.stdout

        # The repair's tombstones compacted away in turn: still equal.
        kept = compact(bootstrap, topic, roll, cleaned)
        assert len({r.key for r in kept}) == 292
        run.wait_acked(db.wal_lsn())
        compacted = verify(config_file, db, "--chunk-rows", "100")
        assert compacted.returncode == 0, compacted.stdout + compacted.stderr
        assert "292 rows in 3 chunks, 292 keys" in compacted.stdout, compacted.stdout
        run.stop()
