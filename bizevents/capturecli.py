"""``bizevents capture``: capture database changes into technical topics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import structlog

from bizevents.clikit import err_console, fails_cleanly, settings_of
from bizevents.plumbing.errors import ConfigError


@click.group()
def capture() -> None:
    """Capture committed row changes into per-table technical topics."""


@capture.command()
@click.option(
    "--config",
    "capture_config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    required=True,
    help="The capture's TOML file (server, tables or publication, slot, partitions, ...).",
)
@click.pass_context
@fails_cleanly
def postgres(ctx: click.Context, capture_config: Path) -> None:
    """Snapshot, then stream, a PostgreSQL database's changes until stopped.

    Kafka and the schema registry come from the global settings; SIGTERM or Ctrl-C
    stop it once Kafka has acknowledged everything read and the slot is confirmed.
    """
    from bizevents.capture.config import load_capture_config
    from bizevents.capture.runner import CaptureEndpoints, PostgresCapture

    settings = settings_of(ctx)
    config = load_capture_config(capture_config)
    dsn = config.dsn or settings.database.postgres_dsn
    if dsn is None:
        raise ConfigError(
            f"no database to capture: set dsn in {capture_config} or database.postgres_dsn "
            "in the settings (BIZEVENTS_DATABASE__POSTGRES_DSN)"
        )
    endpoints = CaptureEndpoints(
        dsn=dsn.get_secret_value(),
        kafka=settings.kafka.librdkafka(),
        registry=settings.registry.client_config(),
        state_dir=config.state_dir or settings.state_dir / "capture",
    )
    _run(ctx, PostgresCapture, config, endpoints, config.slot_name)


@capture.command()
@click.option(
    "--config",
    "capture_config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    required=True,
    help='The capture\'s TOML file (server, dsn, tables = ["db.table"], partitions, ...).',
)
@click.pass_context
@fails_cleanly
def mysql(ctx: click.Context, capture_config: Path) -> None:
    """Snapshot, then stream, a MySQL/MariaDB server's binlog until stopped.

    The binlog position is stored in a compacted Kafka topic once Kafka acknowledged
    every event up to it; a restart resumes there. SIGTERM or Ctrl-C stop it once
    Kafka has acknowledged everything read and the position is stored.
    """
    from bizevents.capture.config import load_capture_config
    from bizevents.capture.mysqlcapture import MysqlCapture
    from bizevents.capture.runner import CaptureEndpoints

    settings = settings_of(ctx)
    config = load_capture_config(capture_config)
    if not config.tables:
        raise ConfigError(f'name the tables to capture in {capture_config}: tables = ["db.table"]')
    if config.dsn is None:
        raise ConfigError(
            f'no server to capture: set dsn = "mysql://user:password@host:port/db" in '
            f"{capture_config}"
        )
    endpoints = CaptureEndpoints(
        dsn=config.dsn.get_secret_value(),
        kafka=settings.kafka.librdkafka(),
        registry=settings.registry.client_config(),
        state_dir=config.state_dir or settings.state_dir / "capture",
    )
    _run(ctx, MysqlCapture, config, endpoints, "binlog")


def _run(ctx: click.Context, runner_class: Any, config: Any, endpoints: Any, stream: str) -> None:
    """What both sources do around their runner: metrics, progress, signals, the exit."""
    from bizevents.capture.metrics import CaptureStats, serve_metrics
    from bizevents.capture.progress import on_terminal, print_progress_factory

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
