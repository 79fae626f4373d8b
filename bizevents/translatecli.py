"""``bizevents translate``: run the pinned translators live, as one member of a consumer group."""

from __future__ import annotations

import click
import structlog

from bizevents.clikit import fails_cleanly, settings_of


@click.command()
@click.option(
    "--transactions",
    is_flag=True,
    help="Run the pinned transaction translators (whole transactions) instead of the row ones.",
)
@click.pass_context
@fails_cleanly
def translate(ctx: click.Context, transactions: bool) -> None:
    """Translate technical topics into business events until stopped (SIGTERM, Ctrl-C).

    Runs a Faust worker in the consumer group translate.group_id: start several to
    share the partitions. Which translator versions run is pinned in the settings
    ([translators] orders = 2); technical topics are <translate.topic_prefix>.<schema>.<table>.
    Offsets are committed only after the events produced from them are acknowledged.

    With --transactions it runs the transaction translators instead: the worker assembles
    whole committed transactions from the transaction topic and the technical topics
    (docs/transactions.md); run it beside the row worker.
    """
    if transactions:
        from bizevents.translators.txworker import run_transactions

        settings = settings_of(ctx)
        run_transactions(settings.runtime(), settings.transactions)
        return
    from bizevents.translators.metrics import WorkerStats, serve_metrics
    from bizevents.translators.worker import run

    settings = settings_of(ctx)
    t = settings.translate
    stats = WorkerStats(t.group_id)
    if t.metrics_port is not None:
        _, port = serve_metrics(stats, t.metrics_host, t.metrics_port)
        structlog.get_logger("translate").info(
            "metrics endpoint", url=f"http://{t.metrics_host}:{port}/metrics"
        )
    run(settings.runtime(), stats)
