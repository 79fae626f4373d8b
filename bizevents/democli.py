"""``bizevents demo``: the main job, the whole flow on the embedded stack."""

from __future__ import annotations

import click

from bizevents.clikit import console, fails_cleanly, settings_of, table


@click.command()
@click.option(
    "--duration", type=float, default=None, help="Stop after this many seconds (default: Ctrl-C)."
)
@click.option(
    "--rate", type=float, default=50.0, show_default=True, help="Store actions per second."
)
@click.option(
    "--source",
    type=click.Choice(["postgres", "mysql"]),
    default="postgres",
    show_default=True,
    help="The store's database: PostgreSQL, or the embedded MariaDB (binlog capture).",
)
@click.pass_context
@fails_cleanly
def demo(ctx: click.Context, duration: float | None, rate: float, source: str) -> None:
    """Capture a live store database and translate its changes into business events.

    Starts the embedded stack if needed, the store's tables, capture, a translator
    worker (customers@1, products@1), a transaction worker (orders@3: each order placed
    with its items and its true total, from the transaction that placed it) and a load
    generator, and shows the business events and what each translator emitted, dropped
    and dead-lettered.
    """
    from bizevents.demo import run_demo

    summary = run_demo(settings_of(ctx), duration, rate, source)
    console.print(
        table(
            "demo summary",
            ["what", "count"],
            [["store actions", str(summary["store_actions"])]]
            + [[topic, str(n)] for topic, n in sorted(summary["events_per_topic"].items())]
            + [
                [f"events of {ref}", str(n)]
                for ref, n in sorted(summary["events_per_translator"].items())
            ]
            + [
                [
                    "OrderPlaced with a true total (not 0.00)",
                    f"{summary['orders_placed_with_total']} of {summary['orders_placed']}",
                ]
            ],
        )
    )
