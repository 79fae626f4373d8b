"""What ``bizevents replay`` shows: its progress on stderr while it runs, then its summary
(text or JSON) and the comparison with the live events (text, or an HTML page)."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from bizevents.cli.kit import console, err_console, json_text, table


class TerminalProgress:
    """Ranges done and events/s on stderr (rich), while a run goes."""

    def __init__(self, show: bool) -> None:
        self.show = show
        self.progress: Any = None
        self.task: Any = None
        self.started = time.monotonic()
        self.read = 0
        self.events = 0

    def planned(self, total: int, skipped: int, offsets: int) -> None:
        err_console.print(
            f"{total} ranges planned over {offsets:,} offsets; "
            f"{skipped} done by an earlier attempt",
            highlight=False,
        )
        if not self.show or total == skipped:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("ranges  {task.fields[rate]}"),
            console=err_console,
            transient=False,
        )
        self.task = self.progress.add_task("replay", total=total, completed=skipped, rate="")
        self.progress.start()
        self.started = time.monotonic()

    def phase(self, name: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, description=name)
        else:
            err_console.print(f"phase: {name}", highlight=False)

    def finished(self, report: Any) -> None:
        self.read += report.read
        self.events += report.emitted
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = f"{self.read / elapsed:,.0f} records/s  {self.events / elapsed:,.0f} events/s"
        if self.progress is not None:
            self.progress.update(self.task, advance=1, rate=rate)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def write_diff_html(diff: Any, path: str | None, spec: Any) -> None:
    if path is None or diff is None:
        return
    from pathlib import Path

    from bizevents.diffreport import render

    page = render(diff.as_dict(), str(spec.diff_against), spec.translator)
    Path(path).write_text(page, encoding="utf-8")
    err_console.print(f"diff report: {path}", highlight=False)


def summary_dict(summary: Any) -> dict[str, Any]:
    return {
        "run_id": summary.run_id,
        "state": str(summary.state_path),
        "ranges": summary.ranges,
        "skipped": summary.skipped,
        "seconds": round(summary.seconds, 3),
        "read": summary.total("read"),
        "kept": summary.total("kept"),
        "events": summary.events,
        "dropped": summary.total("dropped"),
        "dead_letters": summary.total("dead_letters"),
        "undecodable": summary.total("undecodable"),
        "tombstones": summary.total("tombstones"),
        "records_per_s": round(summary.records_per_s),
        "events_per_s": round(summary.events_per_s),
        "diff": None if summary.diff is None else summary.diff.as_dict(),
    }


def print_summary(summary: Any) -> None:
    rows = [
        ["ranges", f"{summary.ranges} ({summary.skipped} done before this attempt)"],
        ["records read", f"{summary.total('read'):,}"],
        ["records translated", f"{summary.total('kept'):,}"],
        ["dropped (no event)", f"{summary.total('dropped'):,}"],
        ["dead letters", f"{summary.total('dead_letters'):,}"],
        ["seconds", f"{summary.seconds:.1f}"],
        ["records/s", f"{summary.records_per_s:,.0f}"],
        ["events/s", f"{summary.events_per_s:,.0f}"],
    ]
    rows += [[f"events → {topic}", f"{n:,}"] for topic, n in sorted(summary.events.items())]
    console.print(table(f"replay {summary.run_id}", ["", ""], rows))
    if summary.diff is not None:
        print_diff(summary.diff)


def print_diff(diff: Any) -> None:
    console.print(
        table(
            "diff (A = --diff, B = --translator)",
            ["contract", "equal", "changed", "only in A", "only in B"],
            [
                [c, *(f"{n[k]:,}" for k in ("equal", "changed", "only_a", "only_b"))]
                for c, n in sorted(diff.counts.items())
            ],
        )
    )
    for contract, by_kind in sorted(diff.samples.items()):
        for kind, samples in sorted(by_kind.items()):
            for sample in samples:
                text = json.dumps(sample, default=json_text)
                console.print(f"[bold]{contract}[/] {kind}: {text}")


def print_transaction_summary(summary: Any, as_json: bool) -> None:
    """A transaction replay's summary: whole transactions assembled in Spark."""
    data = {
        "run_id": summary.run_id,
        "state": None if summary.state_path is None else str(summary.state_path),
        "ranges": len(summary.ranges),
        "read": summary.read,
        "transactions": summary.transactions,
        "emitted": summary.emitted,
        "dead_lettered": summary.dead_lettered,
        "left_out": summary.left_out,
        "output_partitions_written": summary.units,
        "output_partitions_skipped": summary.skipped,
        "events": summary.events,
        "seconds": round(summary.seconds, 3),
    }
    if as_json:
        click.echo(
            json.dumps(
                {**data, "diff": None if summary.diff is None else summary.diff.as_dict()},
                indent=2,
            )
        )
        return
    console.print(
        table(
            f"replay of whole transactions {summary.run_id}",
            ["what", "count"],
            [[k, str(v)] for k, v in data.items() if k != "run_id"],
        )
    )
    if summary.diff is not None:
        print_diff(summary.diff)
