"""bizevents.replay.session.follow without Spark: an action in a thread, the accumulator's
reports taken once each, the action's result or its error."""

from __future__ import annotations

import threading

import pytest

from bizevents.replay.session import Reports, follow
from bizevents.replay.task import TaskReport


class _Accumulator:
    """Spark's accumulator as the driver sees it: a value that grows as tasks succeed."""

    def __init__(self) -> None:
        self.value: list[TaskReport] = []
        self.param = Reports()

    def add(self, reports: list[TaskReport]) -> None:
        self.value = self.param.addInPlace(list(self.value), reports)


def test_each_report_is_taken_once_and_the_result_returned() -> None:
    finished = _Accumulator()
    released = threading.Event()

    def action() -> str:
        finished.add([TaskReport("t/0", read=1)])
        finished.add([TaskReport("t/0", read=1)])  # a speculated task reports again
        released.wait(5)
        finished.add([TaskReport("t/1", read=2)])
        return "done"

    taken: list[str] = []

    def take(report: TaskReport) -> None:
        taken.append(report.range_id)
        released.set()  # the first report reached the driver while the action ran

    assert follow(action, finished, take) == "done"
    assert taken == ["t/0", "t/1"]


def test_the_actions_error_is_raised_after_the_reports_before_it() -> None:
    finished = _Accumulator()

    def action() -> None:
        finished.add([TaskReport("t/0")])
        raise RuntimeError("range t/1 failed in its task")

    taken: list[str] = []
    with pytest.raises(RuntimeError, match="range t/1 failed"):
        follow(action, finished, lambda r: taken.append(r.range_id))
    assert taken == ["t/0"]
