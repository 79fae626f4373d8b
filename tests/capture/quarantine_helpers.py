"""What the capture quarantine tests of both sources share (PostgreSQL,
tests/capture/postgres/test_quarantine.py; MariaDB, tests/capture/mariadb/test_quarantine.py):
the "code fixes" they switch on, a key's change events read back, and the kill -9
in the middle of a re-drive."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from bizevents.capture.core.quarantine import ask_capture, parked_keys
from bizevents.contracts.envelope import ChangeEvent
from bizevents.devstack import Endpoints
from bizevents.plumbing.parking import Ref
from bizevents.plumbing.parkingio import read_to_end
from tests.capture.capture_helpers import REPO, cli_env, read_topic, terminate

#: The key the scenario parks: the row ``id = 1`` of a table with a ``note`` column.
PARKED_ID = 1


def numeric_fixed(text: str) -> Decimal:
    """PostgreSQL's fix: a numeric converter that takes NaN (as 0)."""
    return Decimal(0) if text == "NaN" else Decimal(text)


def enum_fixed(value: Any) -> Any:
    """MariaDB's fix: the empty error value of an ENUM (what a label it does not know
    becomes outside strict mode) written as NULL."""
    return value or None


def events_by_id(endpoints: Endpoints, topic: str) -> dict[int, list[ChangeEvent]]:
    """The technical topic's change events per row id, in topic order."""
    out: dict[int, list[ChangeEvent]] = {}
    for r in sorted(read_topic(endpoints, topic), key=lambda r: r.offset):
        if isinstance(r.decoded, ChangeEvent) and r.decoded.after is not None:
            out.setdefault(r.decoded.after["id"], []).append(r.decoded)
    return out


@dataclass
class Source:
    """What the kill -9 scenario needs of a source."""

    #: the capture command (``postgres``, ``mysql``)
    command: str
    #: one more change of the parked row: ``note = 'after'``
    live_change: Callable[[], None]
    #: until the running capture (a process, its log) has everything written so far
    #: in Kafka, its position stored
    caught_up: Callable[[subprocess.Popen[bytes], Path], None]


def kill_9_mid_redrive(
    endpoints: Endpoints,
    parked_topic: str,
    topic: str,
    config_file: Path,
    source: Source,
    log: Path,
    behind: int,
) -> None:
    """Capture, a process with the test's fix, is killed -9 once Kafka acknowledged half
    of the parked key's re-driven changes (the fault planted by
    tests/capture/redrive_crash.py), before the rest and the unpark; the restarted
    capture carries the pending request out again. Checks that every change of the key
    is in ``topic`` once in source order after the first run's half (the repeated half
    byte for byte identical), then a live change, and that the key is unparked.

    Before: row :data:`PARKED_ID` was written with note ``a``, then parked by a change
    with note ``p0`` and ``behind`` changes parked behind it (``p1`` ...)."""
    kafka = {"bootstrap.servers": endpoints.bootstrap_servers}
    (ref,) = parked_keys(kafka, parked_topic)[0].parked
    argv = [sys.executable, "-m", "tests.capture.redrive_crash", "capture", source.command]

    def start(kill: bool) -> subprocess.Popen[bytes]:
        env = {**cli_env(endpoints), "BIZEVENTS_TEST_KILL_MID_REDRIVE": "1" if kill else ""}
        with open(log, "ab") as out:
            return subprocess.Popen(
                [*argv, str(config_file)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )

    def notes() -> list[str]:
        return [e.after["note"] for e in events_by_id(endpoints, topic)[PARKED_ID]]

    answers: list[Any] = []
    asking = threading.Thread(
        target=lambda: answers.extend(
            ask_capture(kafka, parked_topic, "redrive", ref[3].hex(), 120)
        ),
        daemon=True,
    )
    first = start(kill=True)
    second: subprocess.Popen[bytes] | None = None
    try:
        asking.start()
        assert first.wait(90) == -signal.SIGKILL, log.read_text()[-2000:]
        at_kill = notes()
        assert 1 < len(at_kill) < behind + 2, "the kill did not land mid-re-drive"
        assert ref in parked_keys(kafka, parked_topic)[0].parked

        second = start(kill=False)
        asking.join(120)
        assert [a.status for a in answers] == ["done"], [a.message for a in answers]
        source.live_change()
        source.caught_up(second, log)
        assert terminate(second) == 0
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()

    expected = ["a"] + [f"p{i}" for i in range(behind + 1)] + ["after"]
    # The first run's half, then the whole re-drive again, then the live change.
    half = len(at_kill) - 1
    written = notes()
    assert written == ["a", *expected[1 : 1 + half], *expected[1:]]
    _duplicates_identical(kafka, topic, ref, len(written), half)
    assert not parked_keys(kafka, parked_topic)[0].parked


def _duplicates_identical(
    kafka: dict[str, Any], topic: str, ref: Ref, count: int, half: int
) -> None:
    """The key's records: ``count`` in all, the repeated ``half`` byte for byte the same."""
    raw = sorted(
        (m for m in read_to_end(kafka, topic) if m.key() == ref[3]), key=lambda m: m.offset()
    )
    assert len(raw) == count
    values = [m.value() for m in raw]
    assert values[1 : 1 + half] == values[1 + half : 1 + 2 * half]
