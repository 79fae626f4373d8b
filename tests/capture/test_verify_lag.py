"""Issue 42: ``bizevents verify`` knows lag from loss. Capture stopped with changes it
has not read: ``verify`` says capture is behind, by how much, reports no difference as
a gap and exits 3; ``verify --repair`` asks for nothing (no tombstone, no signal);
once capture ran again and caught up, verify passes (real PostgreSQL, MariaDB and
broker)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bizevents.capture.config import CaptureConfig
from bizevents.capture.verify import Difference, Report, TableChunk, TopicState, check_table
from bizevents.devstack import Endpoints
from bizevents.plumbing.parkingio import read_to_end
from tests.capture import capture_helpers as pgh
from tests.capture.sources import Source


class _Reader:
    def rows_for(self, keys: list[Any]) -> TableChunk:
        return TableChunk([], "LSN 0/2")


def _differing() -> Report:
    report = Report("s.t", "topic", chunks=1)
    report.differences = [Difference((("id", 1),), "missing", None, "LSN 0/1")]
    return report


def test_a_recheck_capture_cannot_pass_is_said_not_skipped() -> None:
    """Capture behind before the comparison: nothing compared; behind at a recheck:
    the differences stay, unconfirmed, with the sentence, and are not repairable."""
    lags: list[str | None] = ["capture is stopped"]
    compared: list[Report] = []

    def first() -> Report:
        compared.append(_differing())
        return compared[-1]

    def state_of(keys: list[Any]) -> TopicState:
        return TopicState()

    reader: Any = _Reader()  # the table side of a recheck: no rows

    def check(rechecks: int) -> Report:
        return check_table(
            "s.t",
            "topic",
            lambda: lags.pop(0),
            first,
            state_of,
            reader.rows_for,
            rechecks,
        )

    early = check(2)
    assert not early.compared and early.behind == "capture is stopped" and not compared
    assert not early.ok and not early.repairable
    lags[:] = [None, "capture is running but behind"]
    late = check(2)
    assert late.compared and late.behind == "capture is running but behind"
    assert len(late.differences) == 1 and not late.repairable and not late.ok
    lags[:] = [None, None]
    caught_up = check(2)  # the recheck finds the key on neither side: no difference
    assert caught_up.behind is None and caught_up.ok and not caught_up.repairable


def _verify(
    endpoints: Endpoints, config_file: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bizevents", "verify", str(config_file), *args],
        env=pgh.cli_env(endpoints),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=pgh.REPO,
    )


def _lag_is_not_loss(
    endpoints: Endpoints, config: CaptureConfig, config_file: Path, topic: str, behind: str
) -> None:
    """verify and verify --repair while capture is stopped with changes unread."""
    kafka = {"bootstrap.servers": endpoints.bootstrap_servers}
    records = len(read_to_end(kafka, topic))
    for args in ((), ("--repair",)):
        found = _verify(endpoints, config_file, "--wait", "2", *args)
        out = found.stdout
        assert found.returncode == 3, out + found.stderr
        assert behind in out and "not compared" in out, out
        assert "differences" not in out and "Traceback" not in found.stderr, out
        for kind in ("missing", "differs", "extra"):
            assert f"  {kind} " not in out, out
    assert "repair: nothing asked for" in out and "repair: signal" not in out, out
    assert read_to_end(kafka, config.signal_topic_name) == [], "a repair was asked for"
    assert len(read_to_end(kafka, topic)) == records, "a repair wrote to the topic"


@pytest.mark.integration
def test_verify_tells_a_stopped_capture_from_a_gap(source: Source, tmp_path: Path) -> None:
    t = source.table("t")
    source.sql(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)")
    source.sql(f"INSERT INTO {t} VALUES " + ", ".join(f"({i}, {i})" for i in range(1, 501)))
    config = source.config(["t"], partitions=2)
    config_file = pgh.write_config(tmp_path / "capture.toml", config)
    with source.in_process(config, tmp_path) as run:
        run.wait_snapshot()
        source.caught_up(run)
        run.stop()
    # Changes capture has not read (in PostgreSQL's slot, in MariaDB's binlog).
    source.sql(f"UPDATE {t} SET v = -v WHERE id % 50 = 0")
    source.sql(f"INSERT INTO {t} VALUES (1000, 1), (1001, 1)")
    source.sql(f"DELETE FROM {t} WHERE id IN (7, 8)")
    if source.mysql:
        behind = "capture is behind or stopped: its stored position "
    else:
        behind = f"capture is stopped: its slot {source.ledger_slot} confirmed "
    endpoints = source.db.endpoints
    _lag_is_not_loss(endpoints, config, config_file, source.topic("t"), behind)

    with source.in_process(config, tmp_path) as run:
        run.wait_snapshot()
        source.caught_up(run)
        passed = _verify(endpoints, config_file)
        run.stop()
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "500 rows in 1 chunks, 500 keys" in passed.stdout, passed.stdout
    assert "the topic holds the table" in passed.stdout
