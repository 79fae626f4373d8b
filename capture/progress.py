"""The snapshot's progress bar on a terminal."""

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["on_terminal", "print_progress_factory"]


def print_progress_factory(enabled: bool) -> tuple[Callable[[str, int, int], None] | None, Any]:
    """A rich progress bar for the snapshot when on a terminal (``(callback, progress)``)."""
    if not enabled:
        return None, None
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


def on_terminal() -> bool:
    """Whether stderr is a terminal (the progress bar's ``auto``)."""
    return sys.stderr.isatty()
