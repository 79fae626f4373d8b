"""``bizevents verify``: prove that the technical topics hold the tables (or show the gap)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import click

from bizevents.cli.kit import CAPTURE_FILE, at_least, capture_of, fails_cleanly, settings_of
from bizevents.cli.verify_report import print_reports
from bizevents.plumbing.errors import ConfigError


@click.command()
@CAPTURE_FILE
@click.option("--table", "tables", multiple=True, help="Only this table (repeatable).")
@at_least("--chunk-rows", low=1, default=5_000, help="Keys per compared chunk.")
@at_least(
    "--rechecks",
    low=0,
    default=2,
    help="Times a differing key is checked again once capture passed the database.",
)
@at_least(
    "--wait",
    "wait_s",
    low=0,
    default=30.0,
    help="Seconds to wait for capture to pass the database before saying it is behind.",
)
@click.option(
    "--repair", is_flag=True, help="Ask capture to snapshot again exactly the differing chunks."
)
@click.option("--json", "as_json", is_flag=True, help="The report as JSON.")
@click.option(
    "--spark",
    is_flag=True,
    help="Compare as a Spark job on the replay's executors (for tables larger than memory).",
)
@click.option("--master", default=None, help="With --spark: the Spark master (local[2], ...).")
@click.pass_context
@fails_cleanly
def verify(
    ctx: click.Context,
    capture_config: Path,
    tables: tuple[str, ...],
    chunk_rows: int,
    rechecks: int,
    wait_s: float,
    repair: bool,
    as_json: bool,
    spark: bool,
    master: str | None,
) -> None:
    """Compare each captured table with the latest state per key of its technical
    topic, chunk by chunk of primary keys (counts and a checksum of a canonical row
    encoding); print the missing, extra and differing keys. Exit 1 on any gap; exit 3
    when capture has not passed the database's position, so that a difference cannot be
    told from lag (nothing is repaired then).

    PostgreSQL and MySQL/MariaDB tables (the DSN says which).
    """
    from bizevents.capture.verifyrun import compare_here, verify_tables
    from bizevents.capture.verifyrun import repair as verify_repair
    from bizevents.plumbing.registry import registry_client, schema_lookup

    settings = settings_of(ctx)
    config, dsn = capture_of(ctx, capture_config, "verify")
    unknown = [t for t in tables if config.tables and t not in config.tables]
    if unknown:
        raise ConfigError(f"{', '.join(unknown)} is not captured by {capture_config}")
    kafka = settings.kafka.librdkafka()
    registry = settings.registry.client_config()
    if spark:
        from bizevents.capture.verifyrun import CapturedTable
        from bizevents.replay.verify import compare_on_spark

        side = partial(CapturedTable, registry, dsn, config)
        comparer = compare_on_spark(master, kafka, registry, side, chunk_rows)
    else:
        comparer = compare_here(kafka, chunk_rows)
    lookup = schema_lookup(registry_client(registry))
    reports, repairs = verify_tables(config, dsn, kafka, lookup, tables, comparer, rechecks, wait_s)
    sent = []
    if repair and repairs:
        signals = verify_repair(kafka, config, repairs)
        sent = [
            {
                "table": fix.table,
                "signal": signal,
                "condition": fix.condition,
                "tombstones": len(fix.tombstones),
                "topic": fix.topic,
            }
            for fix, signal in zip(repairs, signals, strict=True)
        ]
    print_reports(reports, sent, as_json, repair)
    if any(r.differences and r.behind is None for r in reports):
        ctx.exit(1)
    if any(not r.ok for r in reports):
        ctx.exit(3)
