"""``bizevents capture``: capture database changes into technical topics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import structlog

from bizevents.cli.capture_parked import discard, parked, redrive
from bizevents.cli.kit import (
    CAPTURE_FILE,
    capture_of,
    console,
    err_console,
    fails_cleanly,
    settings_of,
)
from bizevents.plumbing.errors import ConfigError


@click.group()
def capture() -> None:
    """Capture committed row changes into per-table technical topics.

    Each command takes the capture's TOML file, CAPTURE_FILE (server, tables, slot, ...);
    Kafka and the registry come from bizevents' own settings (bizevents --config FILE)."""


@capture.command()
@CAPTURE_FILE
@click.pass_context
@fails_cleanly
def postgres(ctx: click.Context, capture_config: Path) -> None:
    """Snapshot, then stream, a PostgreSQL database's changes until stopped.

    Kafka and the schema registry come from the global settings; SIGTERM or Ctrl-C
    stop it once Kafka has acknowledged everything read and the slot is confirmed.
    """
    from bizevents.capture.postgres.runner import PostgresCapture

    config, dsn = capture_of(ctx, capture_config, "capture")
    _run(ctx, PostgresCapture, config, dsn, config.slot_name)


@capture.command()
@CAPTURE_FILE
@click.pass_context
@fails_cleanly
def mysql(ctx: click.Context, capture_config: Path) -> None:
    """Snapshot, then stream, a MySQL/MariaDB server's binlog until stopped.

    The binlog position is stored in a compacted Kafka topic once Kafka acknowledged
    every event up to it; a restart resumes there. SIGTERM or Ctrl-C stop it once
    Kafka has acknowledged everything read and the position is stored.
    """
    from bizevents.capture.config import load_capture_config
    from bizevents.capture.mariadb.capture import MysqlCapture

    config = load_capture_config(capture_config)
    if not config.tables:
        raise ConfigError(f'name the tables to capture in {capture_config}: tables = ["db.table"]')
    if config.dsn is None:
        raise ConfigError(
            f'no server to capture: set dsn = "mysql://user:password@host:port/db" in '
            f"{capture_config}"
        )
    _run(ctx, MysqlCapture, config, config.dsn.get_secret_value(), "binlog")


@capture.command()
@CAPTURE_FILE
@click.option(
    "--where",
    default=None,
    help="Only the rows meeting this condition: columns compared with values, "
    "AND/OR/NOT, IN, BETWEEN, LIKE, IS NULL (no SQL beyond that).",
)
@click.option("--pause", "action", flag_value="pause-snapshot", help="Pause snapshots under way.")
@click.option("--resume", "action", flag_value="resume-snapshot", help="Resume paused snapshots.")
@click.option("--stop", "action", flag_value="stop-snapshot", help="Stop snapshots under way.")
@click.argument("tables", nargs=-1)
@click.pass_context
@fails_cleanly
def snapshot(
    ctx: click.Context,
    capture_config: Path,
    where: str | None,
    action: str | None,
    tables: tuple[str, ...],
) -> None:
    """Ask a running capture for an incremental snapshot of TABLES (schema.table), or
    pause, resume or stop the snapshots under way (of TABLES, or all).

    Writes a signal to the capture's Kafka signal topic; the capture carries it out
    between two transactions of its stream, and refuses a bad one with a sentence in
    its log.
    """
    from bizevents.capture.config import load_capture_config
    from bizevents.capture.control import send_signals
    from bizevents.capture.core.filters import FilterError
    from bizevents.capture.core.signals import new_signal, shown

    settings = settings_of(ctx)
    config = load_capture_config(capture_config)
    kind = action or "execute-snapshot"
    if kind == "execute-snapshot" and not tables:
        raise ConfigError(
            "name the tables to snapshot: bizevents capture snapshot ... schema.table"
        )
    if where is not None and kind != "execute-snapshot":
        raise ConfigError("--where goes with a snapshot, not with --pause, --resume or --stop")
    try:
        signal = new_signal(kind, tables, where)
    except FilterError as exc:
        raise ConfigError(
            f"--where {shown(where)} is not a condition a snapshot takes: {exc}"
        ) from None
    for table in tables:
        if config.tables and table not in config.tables:
            raise ConfigError(
                f"{table} is not captured by {capture_config} (tables: {', '.join(config.tables)})"
            )
    topic = send_signals(settings.kafka.librdkafka(), config, [signal])
    what = " ".join(tables) or "every snapshot under way"
    console.print(f"signal {signal.id} ({kind} {what}) sent to {topic}")


def _run(ctx: click.Context, runner_class: Any, config: Any, dsn: str, stream: str) -> None:
    """What both sources do around their runner: metrics, progress, signals, the exit."""
    from bizevents.capture.metrics import CaptureStats, serve_metrics
    from bizevents.capture.postgres.runner import CaptureEndpoints
    from bizevents.capture.progress import on_terminal, print_progress_factory

    settings = settings_of(ctx)
    endpoints = CaptureEndpoints(
        dsn=dsn,
        kafka=settings.kafka.librdkafka(),
        registry=settings.registry.client_config(),
        state_dir=config.state_dir or settings.state_dir / "capture",
    )
    log = structlog.get_logger("capture").bind(server=config.server, slot=stream)
    stats = CaptureStats(config.server, stream)
    if config.metrics_port is not None:
        _, port = serve_metrics(stats, config.metrics_host, config.metrics_port)
        log.info("metrics endpoint", url=f"http://{config.metrics_host}:{port}/metrics")
    show = config.progress == "always" or (config.progress == "auto" and on_terminal())
    update, progress = print_progress_factory(show)
    runner = runner_class(
        config,
        endpoints,
        stats=stats,
        progress=update,
        snapshot_finished=None if progress is None else progress.stop,
    )
    try:
        with runner.signals():
            runner.run()
    finally:
        if progress is not None:
            progress.stop()
    if runner.aborting:
        err_console.print("stopped without waiting for Kafka's acknowledgements")
        ctx.exit(1)


capture.add_command(redrive)
capture.add_command(discard)
capture.add_command(parked)
