"""``bizevents translate``: run the pinned translators live, as one member of a consumer group."""

from __future__ import annotations

import click
import structlog

from bizevents.cli.kit import fails_cleanly, settings_of


@click.command()
@click.option(
    "--transactions",
    is_flag=True,
    help="Run only the pinned transaction translators (whole transactions).",
)
@click.option(
    "--shadow",
    "shadows",
    multiple=True,
    metavar="NAME@VERSION",
    help="Run this version in the shadow of the live one (repeatable; docs/shadow.md).",
)
@click.pass_context
@fails_cleanly
def translate(ctx: click.Context, transactions: bool, shadows: tuple[str, ...]) -> None:
    """Translate technical topics into business events until stopped (SIGTERM, Ctrl-C).

    One worker for every pinned translator ([translators] orders = 2): the row
    translators in a Faust worker of the consumer group translate.group_id, the
    transaction translators (whole committed transactions, docs/transactions.md) in the
    same process, in the groups of transactions.group_id. Start several to share the
    work. Technical topics are <translate.topic_prefix>.<schema>.<table>. Offsets are
    committed only after the events produced from them are acknowledged.

    With --transactions it runs only the transaction translators. With --shadow
    orders@4 (or translate.shadow) that version reads the same changes as the live
    orders, its events are compared with the live ones and written to the shadow topics
    (`bizevents shadow report`, `bizevents promote`).
    """
    from bizevents.translators.metrics import WorkerStats, serve_metrics
    from bizevents.translators.worker import run

    settings = settings_of(ctx)
    if shadows:
        shadowed = settings.translate.model_copy(update={"shadow": shadows})
        settings = settings.model_copy(update={"translate": shadowed})
    t = settings.translate
    stats = WorkerStats(settings.transactions.group_id if transactions else t.group_id)
    if t.metrics_port is not None:
        _, port = serve_metrics(stats, t.metrics_host, t.metrics_port)
        structlog.get_logger("translate").info(
            "metrics endpoint", url=f"http://{t.metrics_host}:{port}/metrics"
        )
    run(settings.runtime(), stats, settings.transactions, only_transactions=transactions)
