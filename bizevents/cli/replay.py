"""``bizevents replay``: re-read technical topics through a pinned translator version (Spark)."""

from __future__ import annotations

import json
from typing import Any

import click

from bizevents.cli.kit import err_console, fails_cleanly, json_text, settings_of
from bizevents.cli.replay_output import (
    TerminalProgress,
    print_summary,
    print_transaction_summary,
    summary_dict,
    write_diff_html,
)


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
    listener = TerminalProgress(err_console.is_terminal if progress is None else progress)
    if _is_transactional(translator_ref):
        _replay_transactions(spec, settings, master, as_json, listener, diff_html)
        return
    try:
        summary = ReplayJob(spec, settings.runtime(), master=master, listener=listener).run()
    finally:
        listener.stop()
    write_diff_html(summary.diff, diff_html, spec)
    if as_json:
        click.echo(json.dumps(summary_dict(summary), indent=2, default=json_text))
        return
    print_summary(summary)


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


def _replay_transactions(
    spec: Any,
    settings: Any,
    master: str | None,
    as_json: bool,
    listener: TerminalProgress,
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
    write_diff_html(summary.diff, diff_html, spec)
    print_transaction_summary(summary, as_json)
