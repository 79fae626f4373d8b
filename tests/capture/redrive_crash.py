"""``python -m tests.capture.redrive_crash ARGS``: ``bizevents ARGS`` with the quarantine
tests' fixes registered (PostgreSQL: a numeric NaN converts, as 0; MySQL/MariaDB: an
ENUM's empty error value is written as NULL; tests/capture/quarantine_helpers.py), and,
with ``BIZEVENTS_TEST_KILL_MID_REDRIVE=1``, a kill -9 of the process in the middle of a
re-drive: once Kafka acknowledged the first half of the re-driven records, before the
rest and before the key's unpark. The fault is planted where no timing can place it."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence

from bizevents.capture.core.quarantine import Quarantine, Record
from bizevents.capture.mariadb import types as mysqltypes
from bizevents.capture.postgres import types as pgtypes
from bizevents.cli import main
from tests.capture.quarantine_helpers import enum_fixed, numeric_fixed


def _plant_kill() -> None:
    write = Quarantine._write_acknowledged

    def half_then_kill(self: Quarantine, records: Sequence[Record]) -> None:
        own = (self.capture.config.parked_topic_name, self.capture.config.dlq_topic)
        if len(records) > 1 and all(topic not in own for topic, _, _ in records):
            write(self, records[: len(records) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        write(self, records)

    Quarantine._write_acknowledged = half_then_kill  # type: ignore[method-assign]


if __name__ == "__main__":
    pgtypes.register_converter("numeric", numeric_fixed)
    mysqltypes.register_converter("enum", enum_fixed)
    if os.environ.get("BIZEVENTS_TEST_KILL_MID_REDRIVE") == "1":
        _plant_kill()
    main(prog_name="bizevents")
