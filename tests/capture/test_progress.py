"""The snapshot's progress without a terminal: log lines, not a bar drawn into a file."""

from __future__ import annotations

from typing import Any

from bizevents.capture.progress import log_progress, print_progress_factory


class _Log:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append({"event": event, **fields})


def test_without_a_terminal_progress_goes_to_the_log() -> None:
    update, bar = print_progress_factory(True, terminal=False)
    assert update is not None and bar is None


def test_the_log_gets_a_tables_first_update_then_one_every_interval() -> None:
    log, now = _Log(), [0.0]
    update = log_progress(log, every_s=10.0, clock=lambda: now[0])
    for second, rows in ((0, 10), (3, 20), (9, 30), (10, 40), (12, 50)):
        now[0] = float(second)
        update("s.t", rows, rows)
    update("s.u", 5, 100)
    assert [(line["table"], line["rows"]) for line in log.lines] == [
        ("s.t", 10),
        ("s.t", 40),
        ("s.u", 5),
    ]
