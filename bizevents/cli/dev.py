"""``bizevents dev``: start, inspect, stop and try out the embedded development stack."""

from __future__ import annotations

import click

from bizevents.cli.kit import console, fails_cleanly, print_json, settings_of, table
from bizevents.devstack import DevStack, Health
from bizevents.plumbing.logging import redact_text


def _stack(ctx: click.Context, **asked: object) -> DevStack:
    """The stack of the settings' state folder, with what the command line asked for."""
    settings = settings_of(ctx)
    update = {name: value for name, value in asked.items() if value}
    dev = settings.dev.model_copy(update=update) if update else settings.dev
    return DevStack(settings.state_dir, dev)


def _rows(healths: list[Health]) -> list[list[str]]:
    rows = []
    for health in healths:
        started = health.started
        endpoint = redact_text(started.extra.get("dsn", started.endpoint)) if started else "-"
        rows.append(
            [
                health.name,
                health.state,
                endpoint,
                str(started.pid) if started else "-",
                started.log if started else "-",
            ]
        )
    return rows


@click.group()
def dev() -> None:
    """The embedded stack: a broker (Tansu, or Apache Kafka with --broker kafka), schema
    registry, PostgreSQL (MariaDB with --mysql), all on loopback."""


@dev.command()
@click.option(
    "--mysql", is_flag=True, help="Also start a MariaDB server (binlog capture); dev.mysql too."
)
@click.option(
    "--broker",
    type=click.Choice(["tansu", "kafka"]),
    default=None,
    help="The broker: Tansu (memory, no Java) or Apache Kafka (on disk); dev.broker too.",
)
@click.option(
    "--brokers",
    type=click.IntRange(1, 5),
    default=None,
    help="Apache Kafka's nodes (3: replication factor 3, min.insync.replicas 2); implies "
    "--broker kafka.",
)
@click.pass_context
@fails_cleanly
def up(ctx: click.Context, mysql: bool, broker: str | None, brokers: int | None) -> None:
    """Start whatever of the stack is not running, wait until each answers."""
    if brokers is not None and broker is None:
        broker = "kafka"  # only Kafka runs as a cluster
    stack = _stack(ctx, mysql=mysql, broker=broker, brokers=brokers)
    healths = stack.up()
    console.print(table(f"bizevents dev stack ({stack.state_dir})", _COLUMNS, _rows(healths)))


@dev.command()
@click.option("--json", "as_json", is_flag=True, help="Print the endpoints as JSON for scripts.")
@click.pass_context
@fails_cleanly
def status(ctx: click.Context, as_json: bool) -> None:
    """Show each service's health; exit 1 when any is not up."""
    stack = _stack(ctx)
    healths = stack.status()
    if as_json:
        payload: dict[str, object] = {h.name: h.state for h in healths}
        if all(h.ok for h in healths):
            payload["endpoints"] = stack.endpoints().as_dict()
        print_json(payload)
    else:
        console.print(table(f"bizevents dev stack ({stack.state_dir})", _COLUMNS, _rows(healths)))
    if not all(h.ok for h in healths):
        ctx.exit(1)


@dev.command()
@click.option("--purge", is_flag=True, help="Also delete the stack's data (database, registry).")
@click.pass_context
@fails_cleanly
def down(ctx: click.Context, purge: bool) -> None:
    """Stop exactly the processes `up` started, by pid."""
    stack = _stack(ctx)
    stopped = stack.down(purge=purge)
    if not stopped:
        console.print("nothing of the stack was running")
    for name, was_running in stopped:
        console.print(f"{name}: {'stopped' if was_running else 'was not running'}")


@dev.command()
@click.option("--messages", default=10_000, show_default=True, help="How many to send.")
@click.pass_context
@fails_cleanly
def smoke(ctx: click.Context, messages: int) -> None:
    """Send messages through the broker, a schema through the registry, a query to PostgreSQL."""
    from bizevents.devstack.smoke import run_smoke

    stack = _stack(ctx)
    results = run_smoke(stack.endpoints(), messages)
    console.print(
        table("smoke test", ["check", "result"], [[name, text] for name, text in results])
    )


_COLUMNS = ["service", "state", "endpoint", "pid", "log"]
