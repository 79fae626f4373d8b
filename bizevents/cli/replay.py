"""``bizevents replay``: re-read technical topics through a pinned translator version (Spark)."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from bizevents.cli.kit import console, err_console, fails_cleanly, json_text, settings_of, table


class _TerminalProgress:
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


@click.command()
@click.option("--topics", required=True, help="Technical topics: names or globs, comma-separated.")
@click.option("--translator", "translator_ref", required=True, help="name@version to run.")
@click.option(
    "--to",
    "to",
    help="topic (the contracts' topics) | topic:NAME | replay (<contract topic>.replay) "
    "| path:DIR (files, see --format).",
)
@click.option(
    "--format",
    "file_format",
    type=click.Choice(["avro", "parquet"]),
    default=None,
    help="Files of --to path:DIR: avro (default; one container file per output topic and "
    "range) or parquet (a dataset written by Spark, one folder per range).",
)
@click.option("--compact", is_flag=True, help="Latest value per key; tombstones remove keys.")
@click.option("--from", "start", help="First offset (every partition), ts:MILLIS or ISO date.")
@click.option("--until", help="End offset (exclusive), ts:MILLIS or ISO date.")
@click.option("--master", help="Spark master URL (default: the submitted one, else local[*]).")
@click.option(
    "--diff", "diff_ref", help="Dry run: compare name@A with --translator; publishes nothing."
)
@click.option(
    "--diff-html",
    "diff_html",
    type=click.Path(dir_okay=False),
    help="With --diff: also write the report as one static HTML file (counts per contract, "
    "the first differing events side by side, field by field).",
)
@click.option("--run-id", help="Resume the run with this id, or name a new one.")
@click.option(
    "--slice-size", type=int, default=None, help="Offsets per Spark task (default 250000)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar (default: when stderr is a terminal, or TTY_COMPATIBLE=1).",
)
@click.pass_context
@fails_cleanly
def replay(
    ctx: click.Context,
    topics: str,
    translator_ref: str,
    to: str | None,
    file_format: str | None,
    compact: bool,
    start: str | None,
    until: str | None,
    master: str | None,
    diff_ref: str | None,
    diff_html: str | None,
    run_id: str | None,
    slice_size: int | None,
    as_json: bool,
    progress: bool | None,
) -> None:
    """Reprocess technical topics through a pinned translator version, in Spark.

    Plans each partition's offset range at start (a snapshot), reads the ranges in
    parallel in Spark tasks, runs the translator with the live worker's code, and
    writes corrected events with the same event ids. A rerun with the same --run-id
    skips the ranges that finished. See docs/replay.md.
    """
    from bizevents.replay.exceptions import ReplayConfigError
    from bizevents.replay.job import ReplayJob
    from bizevents.replay.spec import DEFAULT_SLICE_SIZE, Bound, Output, ReplaySpec

    settings = settings_of(ctx)
    _require_spark()
    if file_format is not None and to is None:
        raise ReplayConfigError(f"--format {file_format} needs --to path:DIR")
    if diff_html is not None and diff_ref is None:
        raise ReplayConfigError("--diff-html writes the report of a --diff run: add --diff name@A")
    spec = ReplaySpec(
        topics=topics,
        translator=translator_ref,
        output=None if to is None else Output.parse(to, file_format),
        compact=compact,
        start=None if start is None else Bound.parse(start, "--from"),
        until=None if until is None else Bound.parse(until, "--until"),
        diff_against=diff_ref,
        slice_size=slice_size or DEFAULT_SLICE_SIZE,
        run_id=run_id or "",
    )
    err_console.print(f"run id: {spec.run_id}", highlight=False)
    # on a terminal by default; rich's TTY_COMPATIBLE=1 / FORCE_COLOR=1 count as one
    listener = _TerminalProgress(err_console.is_terminal if progress is None else progress)
    if _is_transactional(translator_ref):
        _replay_transactions(spec, settings, master, as_json, listener, diff_html)
        return
    try:
        summary = ReplayJob(spec, settings.runtime(), master=master, listener=listener).run()
    finally:
        listener.stop()
    _write_diff_html(summary.diff, diff_html, spec)
    if as_json:
        click.echo(json.dumps(_summary_dict(summary), indent=2, default=json_text))
        return
    _print_summary(summary)


SPARK_MISSING = (
    "bizevents replay runs on Spark, and pyspark is not installed in this environment: "
    "install the spark extra (`pip install 'bizevents[spark]'`; in a source checkout, "
    "`scripts/setup --extra spark`)"
)


def _require_spark() -> None:
    """One sentence instead of a ModuleNotFoundError deep in the job."""
    from bizevents.replay.exceptions import ReplayConfigError

    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise ReplayConfigError(SPARK_MISSING) from None


def _is_transactional(ref: str) -> bool:
    from bizevents.translators.registry import discover
    from bizevents.translators.transaction_api import is_transactional

    registry = discover(names=[ref.partition("@")[0]])
    try:
        return is_transactional(registry.resolve(ref))
    except Exception:
        return False  # the replay job names the problem


def _write_diff_html(diff: Any, path: str | None, spec: Any) -> None:
    if path is None or diff is None:
        return
    from pathlib import Path

    from bizevents.diffreport import render

    page = render(diff.as_dict(), str(spec.diff_against), spec.translator)
    Path(path).write_text(page, encoding="utf-8")
    err_console.print(f"diff report: {path}", highlight=False)


def _replay_transactions(
    spec: Any,
    settings: Any,
    master: str | None,
    as_json: bool,
    listener: _TerminalProgress,
    diff_html: str | None,
) -> None:
    """A transaction translator: whole transactions assembled in Spark."""
    from bizevents.replay.transactions import TransactionReplay

    try:
        summary = TransactionReplay(
            spec, settings.runtime(), master=master, listener=listener
        ).run()
    finally:
        listener.stop()
    _write_diff_html(summary.diff, diff_html, spec)
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
        _print_diff(summary.diff)


def _summary_dict(summary: Any) -> dict[str, Any]:
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


def _print_summary(summary: Any) -> None:
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
        _print_diff(summary.diff)


def _print_diff(diff: Any) -> None:
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
