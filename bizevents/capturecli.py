"""``bizevents capture``: capture database changes into technical topics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click
import structlog

from bizevents.clikit import console, err_console, fails_cleanly, settings_of
from bizevents.plumbing.errors import ConfigError

if TYPE_CHECKING:
    from bizevents.capture.config import CaptureConfig
    from bizevents.plumbing.parking import ParkedKeys


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
    from bizevents.capture.postgres.runner import CaptureEndpoints, PostgresCapture

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
    from bizevents.capture.mariadb.capture import MysqlCapture
    from bizevents.capture.postgres.runner import CaptureEndpoints

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


@capture.command()
@click.option(
    "--config",
    "capture_config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    required=True,
    help="The TOML file of the running capture to signal.",
)
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
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from bizevents.capture.config import load_capture_config
    from bizevents.capture.core.filters import FilterError
    from bizevents.capture.core.signals import SignalTopic, new_signal, shown
    from bizevents.plumbing.kafka import ensure_topics

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
    kafka = settings.kafka.librdkafka()
    topic = SignalTopic(kafka, config.signal_topic_name, config.server)
    ensure_topics(AdminClient(kafka), [topic.topic], 1, timeout_s=15)
    producer = Producer(kafka)
    outcome: list[Any] = []
    topic.send(producer, signal, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(30)
    if not outcome or outcome[0] is not None:
        raise ConfigError(f"Kafka did not take the signal on {topic.topic}: {outcome or 'timeout'}")
    what = " ".join(tables) or "every snapshot under way"
    console.print(f"signal {signal.id} ({kind} {what}) sent to {topic.topic}")


def _ask_capture(
    ctx: click.Context,
    capture_config: Path,
    kind: Literal["redrive", "discard"],
    key: str | None,
    timeout: float,
    reason: str = "",
) -> tuple[list[Any], list[Any]]:
    """Ask the running capture to carry out ``kind`` for ``key`` (None: every parked
    key), print each answer; ``(answers, those not done)``."""
    from bizevents.capture.config import load_capture_config
    from bizevents.capture.core.quarantine import ask_capture

    config = load_capture_config(capture_config)
    kafka = settings_of(ctx).kafka.librdkafka()
    answers = ask_capture(kafka, config.parked_topic_name, kind, key, timeout, reason)
    for a in answers:
        click.echo(f"{a.status}: {a.topic} key {a.key}: {a.message}")
    return answers, [a for a in answers if a.status != "done"]


@capture.command()
@click.option(
    "--config",
    "capture_config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    required=True,
    help="The TOML file of the running capture whose parked keys to re-drive.",
)
@click.option("--key", "key", default=None, help="The parked key, in hex (as its topic names it).")
@click.option("--all", "every", is_flag=True, help="Every key parked by this capture.")
@click.option("--timeout", type=float, default=120.0, show_default=True)
@click.pass_context
@fails_cleanly
def redrive(
    ctx: click.Context, capture_config: Path, key: str | None, every: bool, timeout: float
) -> None:
    """Re-decode a parked key's changes with the code the capture runs now (after the
    fix), write them in order to the technical topic, then unpark the key.

    The running capture (``on_conversion_error = "park"``) carries the request out
    between two transactions of its stream, so no live change of the key overtakes the
    re-driven ones. A change that still does not convert leaves the key parked, with
    the new reason. Exit 0 when every key was re-driven, else 1 with a sentence.
    """
    from bizevents.capture.exceptions import CaptureError

    if (key is None) == (not every):
        raise ConfigError("name one parked key (--key HEX) or ask for --all, not both or neither")
    answers, bad = _ask_capture(ctx, capture_config, "redrive", key, timeout)
    if bad:
        raise CaptureError(
            f"{len(bad)} of {len(answers)} keys were not re-driven: {bad[0].message}"
        )


@capture.command()
@click.option(
    "--config",
    "capture_config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    required=True,
    help="The TOML file of the running capture whose parked key to discard.",
)
@click.option("--key", "key", required=True, help="The parked key, in hex (as its topic names it).")
@click.option("--reason", required=True, help="Why its parked changes are dropped (recorded).")
@click.option("--timeout", type=float, default=120.0, show_default=True)
@click.pass_context
@fails_cleanly
def discard(
    ctx: click.Context, capture_config: Path, key: str, reason: str, timeout: float
) -> None:
    """Drop a parked key's changes and unpark it, recording the reason: its parked
    changes never reach the technical topic (they stay on the dead-letter topic, for
    the record), its later changes flow again.

    The running capture (``on_conversion_error = "park"``) carries the request out
    between two transactions of its stream. Exit 0 when the key was discarded, else 1
    with a sentence.
    """
    from bizevents.capture.exceptions import CaptureError

    if not reason.strip():
        raise ConfigError("say why the key's parked changes are dropped: --reason TEXT")
    _, bad = _ask_capture(ctx, capture_config, "discard", key, timeout, reason)
    if bad:
        raise CaptureError(f"key {key} was not discarded: {bad[0].message}")


@capture.command()
@click.option(
    "--config",
    "capture_config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    required=True,
    help="The TOML file of the capture whose parked keys to list.",
)
@click.option(
    "--key",
    "key",
    default=None,
    help="One parked key, in hex (as the list names it): its parked changes.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON array for scripts.")
@click.pass_context
@fails_cleanly
def parked(ctx: click.Context, capture_config: Path, key: str | None, as_json: bool) -> None:
    """The keys this capture parked (on_conversion_error = "park"): topic, key in hex,
    first parked position and the latest reason; with --key, that key's parked changes
    in order (position, stage, reason), read from the capture's dead-letter topic.
    Changes nothing."""
    from bizevents.capture.config import load_capture_config
    from bizevents.capture.core.quarantine import parked_keys
    from bizevents.clikit import print_json

    settings = settings_of(ctx)
    config = load_capture_config(capture_config)
    kafka = settings.kafka.librdkafka()
    keys, _ = parked_keys(kafka, config.parked_topic_name)
    if key is not None:
        _show_parked(kafka, config, keys, key.lower(), as_json)
        return
    describe = _describer(config)
    rows = [
        {
            "topic": topic,
            "key": k.hex(),
            "since": describe(state.first),
            "reason": state.latest_reason,
        }
        for (_, topic, _, k), state in sorted(keys.parked.items())
    ]
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo(f"no key is parked in {config.parked_topic_name}")
    for row in rows:
        click.echo(f"{row['topic']} key {row['key']} since {row['since']}: {row['reason']}")


def _describer(config: CaptureConfig) -> Callable[[int], str]:
    """How the capture's source writes a position: a binlog place, or an LSN."""
    from bizevents.capture.mariadb.quarantine import describe_position
    from bizevents.capture.postgres.pgoutput import format_lsn

    dsn = config.dsn.get_secret_value() if config.dsn is not None else ""
    return describe_position if dsn.startswith(("mysql", "mariadb")) else format_lsn


def _show_parked(
    kafka: dict[str, Any], config: CaptureConfig, keys: ParkedKeys, key: str, as_json: bool
) -> None:
    """``capture parked --key``: one key's parked changes, as a re-drive would take them
    (from the park's first position on, each once, in order)."""
    from bizevents.capture.core.quarantine import parked_changes
    from bizevents.capture.exceptions import CaptureError
    from bizevents.clikit import print_json, table
    from bizevents.plumbing.parkingio import read_to_end

    found = [(ref, state) for ref, state in sorted(keys.parked.items()) if ref[3].hex() == key]
    if not found:
        raise CaptureError(
            f"key {key} is not parked in {config.parked_topic_name} "
            "(bizevents capture parked --config FILE lists the parked keys)"
        )
    describe = _describer(config)
    messages = read_to_end(kafka, config.dlq_topic)
    rows = [
        {
            "topic": ref[1],
            "key": key,
            "position": describe(change.position),
            "stage": change.stage,
            "reason": change.reason,
            "bytes": len(change.raw),
        }
        for ref, state in found
        for change in parked_changes(messages, ref, state.first)
    ]
    if as_json:
        print_json(rows)
        return
    console.print(
        table(
            f"key {key}: {len(rows)} parked changes (on {config.dlq_topic})",
            ["topic", "position", "stage", "reason"],
            [[str(r[c]) for c in ("topic", "position", "stage", "reason")] for r in rows],
        )
    )


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
