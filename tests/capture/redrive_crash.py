"""``python -m tests.capture.redrive_crash ARGS``: ``bizevents ARGS`` with the quarantine
test's numeric fix registered (NaN converts, as 0), and, with
``BIZEVENTS_TEST_KILL_MID_REDRIVE=1``, a kill -9 of the process in the middle of a
re-drive: once Kafka acknowledged the first half of the re-driven records, before the
rest and before the key's unpark. The fault is planted where no timing can place it."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from decimal import Decimal

from bizevents.capture.pgtypes import register_converter
from bizevents.capture.quarantinecore import QuarantineCore, Record
from bizevents.cli import main


def _fixed(text: str) -> Decimal:
    return Decimal(0) if text == "NaN" else Decimal(text)


def _plant_kill() -> None:
    write = QuarantineCore._write_acknowledged

    def half_then_kill(self: QuarantineCore, records: Sequence[Record]) -> None:
        own = (self.config.parked_topic_name, self.config.dlq_topic)
        if len(records) > 1 and all(topic not in own for topic, _, _ in records):
            write(self, records[: len(records) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        write(self, records)

    QuarantineCore._write_acknowledged = half_then_kill  # type: ignore[method-assign]


if __name__ == "__main__":
    register_converter("numeric", _fixed)
    if os.environ.get("BIZEVENTS_TEST_KILL_MID_REDRIVE") == "1":
        _plant_kill()
    main(prog_name="bizevents")
