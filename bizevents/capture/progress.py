"""The snapshot's progress: a bar on a terminal, log lines otherwise."""

import sys
import time
from collections.abc import Callable
from typing import Any

import structlog

__all__ = ["log_progress", "on_terminal", "print_progress_factory"]

#: Seconds between two progress lines of one table in the log.
LOG_EVERY_S = 10.0


def print_progress_factory(
    enabled: bool, terminal: bool | None = None
) -> tuple[Callable[[str, int, int], None] | None, Any]:
    """The snapshot's progress (``(callback, progress)``): a rich progress bar on a
    terminal (``progress`` has its ``stop``), log lines when stderr is not one
    (``progress`` None): a bar drawn into a file shows nothing until it stops."""
    if not enabled:
        return None, None
    if not (on_terminal() if terminal is None else terminal):
        return log_progress(structlog.get_logger("bizevents.capture")), None
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn("[bold]snapshot[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=False,
        console=Console(stderr=True),
    )
    tasks: dict[str, Any] = {}

    def update(table: str, done: int, total: int) -> None:
        if not progress.live.is_started:
            progress.start()
        task = tasks.get(table)
        if task is None:
            task = tasks[table] = progress.add_task(table, total=total)
        progress.update(task, completed=done, total=total)

    return update, progress


def log_progress(
    log: Any, every_s: float = LOG_EVERY_S, clock: Callable[[], float] = time.monotonic
) -> Callable[[str, int, int], None]:
    """``update(table, done, total)`` that logs ``snapshot progress`` for a table at its
    first update and then at most every ``every_s`` seconds (an incremental snapshot
    updates after every chunk, and does not know its total: ``done`` then)."""
    last: dict[str, float] = {}

    def update(table: str, done: int, total: int) -> None:
        now = clock()
        then = last.get(table)
        if then is not None and now - then < every_s:
            return
        last[table] = now
        log.info("snapshot progress", table=table, rows=done, total=total)

    return update


def on_terminal() -> bool:
    """Whether stderr is a terminal (the progress bar's ``auto``)."""
    return sys.stderr.isatty()
