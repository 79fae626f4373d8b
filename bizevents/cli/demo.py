"""``bizevents demo``: the main job, the whole story on the embedded stack."""

from __future__ import annotations

import json
import signal
from typing import Any

import click

from bizevents.cli.kit import console, fails_cleanly, json_text, settings_of, table


@click.command()
@click.option(
    "--duration", type=float, default=None, help="Stop after this many seconds (default: Ctrl-C)."
)
@click.option(
    "--rate", type=float, default=50.0, show_default=True, help="Store actions per second."
)
@click.option(
    "--live-only",
    is_flag=True,
    help="Only the live flow with the fixed pins, until Ctrl-C or --duration (no bug, no replay).",
)
@click.option(
    "--fixed",
    "fixed",
    type=int,
    default=3,
    show_default=True,
    help="The orders translator version pinned as the fix, and replayed: 3 reads whole "
    "transactions (true totals), 2 fixes the statuses row by row.",
)
@click.option(
    "--step-seconds",
    type=float,
    default=15.0,
    show_default=True,
    help="How long the story's live steps (the bug, then the fix) last.",
)
@click.option(
    "--source",
    type=click.Choice(["postgres", "mysql"]),
    default="postgres",
    show_default=True,
    help="The store's database: PostgreSQL, or the embedded MariaDB (binlog capture; "
    "with --live-only).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the final figures as JSON.")
@click.option("--svg", type=click.Path(dir_okay=False), help="Also save the final screen as SVG.")
@click.pass_context
@fails_cleanly
def demo(
    ctx: click.Context,
    duration: float | None,
    rate: float,
    live_only: bool,
    fixed: int,
    step_seconds: float,
    source: str,
    as_json: bool,
    svg: str | None,
) -> None:
    """Tell bizevents' story on a live store database, in about a minute.

    Starts the embedded stack if needed, the store's tables, capture, a translator
    worker and a load generator. (1) orders@1, buggy, runs live and a panel shows the
    business events disagreeing with the database (and every OrderPlaced saying total
    0.00); (2) the fix, orders@3, is pinned and the transaction worker takes the orders
    over from the next transaction; (3) `bizevents replay` re-reads the orders and order
    items topics through orders@3 on Spark, whole transactions, and its corrected events
    supersede the wrong ones by event id; (4) a summary. `--fixed 2` fixes with orders@2
    instead (the statuses only, row by row).
    """
    from bizevents.demo import StoryPlan, run_demo

    story = None if live_only else StoryPlan(fixed=fixed, step_seconds=step_seconds)
    # Ctrl-C stops the demo as it stops the children the demo starts, which take SIGINT
    # as a stop whatever they inherited: a demo started with SIGINT ignored (a background
    # job of a non-interactive shell, as some CI runners start it) would otherwise go on
    # while they stop, and report them failed.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        summary = run_demo(settings_of(ctx), duration, rate, story, console, source)
    except KeyboardInterrupt:  # before the live view (the stack starting): already cleaned up
        console.print("stopped before the demo began", highlight=False)
        raise SystemExit(130) from None
    last_view = summary.pop("view")
    if as_json:
        console.line()  # the live view's last frame ends without one
        click.echo(json.dumps(summary, default=json_text))
        return
    rows = [["store actions", str(summary["store_actions"])]]
    rows += [[topic, str(n)] for topic, n in sorted(summary["events_per_topic"].items())]
    rows += [
        [f"events of {ref}", str(n)] for ref, n in sorted(summary["events_per_translator"].items())
    ]
    rows.append(
        [
            "OrderPlaced with a true total (not 0.00)",
            f"{summary['orders_placed_with_total']} of {summary['orders_placed']}",
        ]
    )
    screen: list[Any] = [table("demo summary: business events this run", ["what", "count"], rows)]
    counts = summary["translators"]
    screen.append(
        table(
            "per translator (this run)",
            ["translator", "consumed", "emitted", "dropped", "dead-lettered"],
            [
                [
                    ref,
                    *(
                        f"{v.get(k, 0):.0f}"
                        for k in ("consumed", "emitted", "dropped", "dead_lettered")
                    ),
                ]
                for ref, v in sorted(counts.items())
            ],
        )
    )
    if story is not None:
        agreement = summary["agreement"]
        story_rows = [
            ["emitted", f"{sum(v.get('emitted', 0) for v in counts.values()):.0f}"],
            ["dropped", f"{sum(v.get('dropped', 0) for v in counts.values()):.0f}"],
            ["dead-lettered", f"{sum(v.get('dead_lettered', 0) for v in counts.values()):.0f}"],
            ["events the replay re-emitted", str(summary["replayed"])],
            ["corrected (same event id, new content)", str(summary["corrected"])],
            ["agreement before the replay", f"{summary['before_replay'] or 0:.1f} %"],
            [
                "agreement at the end",
                f"{agreement['percent']:.1f} % of {_orders(agreement)} orders",
            ],
            [
                "latest OrderPlaced with the database's total",
                f"{summary['totals']['percent']:.1f} % of {_orders(summary['totals'])} orders",
            ],
        ]
        story_rows += [[f"step {name}", f"{s:.1f} s"] for name, s in summary["steps"].items()]
        if summary["first_event_s"] is not None:
            story_rows.append(
                [
                    "first business event after the stack was ready",
                    f"{summary['first_event_s']:.1f} s",
                ]
            )
        story_rows.append(["whole run", f"{summary['seconds']:.1f} s"])
        screen.append(table("the story in figures", ["", ""], story_rows))
    for renderable in screen:
        console.print(renderable)
    if svg is not None:
        _save_svg(svg, [last_view, *screen])


def _orders(agreement: dict[str, float]) -> int:
    return int(agreement["agree"] + agreement["disagree"] + agreement["unseen"])


def _save_svg(path: str, screen: list[Any]) -> None:
    """The final screen (the live view's last frame, then the summary) as an SVG."""
    import io

    from rich.console import Console

    recorder = Console(record=True, width=110, file=io.StringIO(), force_terminal=True)
    for renderable in screen:
        recorder.print(renderable)
    recorder.save_svg(path, title="bizevents demo")
