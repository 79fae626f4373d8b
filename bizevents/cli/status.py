"""``bizevents status``: the pipeline's figures from the running services' metrics."""

from __future__ import annotations

import json

import click

from bizevents.cli.kit import console, err_console, fails_cleanly, settings_of, table

_CAPTURE_PARKING = ("parked", "parked_keys", "redriven", "discarded_keys")


def _count(value: float | None) -> str:
    """A count (keys, changes) as a whole number."""
    return "-" if value is None else f"{value:,.0f}"


def _n(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}{unit}" if abs(value) >= 10 or value == 0 else f"{value:,.2f}{unit}"


@click.command()
@click.option(
    "--url",
    "urls",
    multiple=True,
    help="A service's metrics address (http://host:port/metrics); repeatable. "
    "Default: the services the demo runs.",
)
@click.option(
    "--interval",
    type=float,
    default=1.0,
    show_default=True,
    help="Seconds between the two scrapes.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.pass_context
@fails_cleanly
def status(ctx: click.Context, urls: tuple[str, ...], interval: float, as_json: bool) -> None:
    """What the Grafana dashboard shows, on the terminal: per translator@version the
    changes consumed, events emitted, dropped, dead-lettered and parked (totals and
    per second), the keys parked now, consumer lag and latency; capture's changes per
    second and slot lag, and per table its parked changes, keys parked now, re-driven
    changes and discarded keys; per consumer-kit group (given its members' endpoints,
    BusinessConsumer's metrics_port) the events delivered, dead-lettered, parked and
    re-driven and the keys parked now; the shadows' comparisons and the last promotion
    of each translator.

    Capture refreshes its per-table counts and slot lag at each heartbeat
    (heartbeat_interval_s, 10 s by default; the demo's capture 1 s): give an --interval
    longer than that for its rates."""
    from bizevents.plumbing.errors import TransientError
    from bizevents.status import endpoints_of, promotions
    from bizevents.status import status as read_status

    settings = settings_of(ctx)
    figures = read_status(endpoints_of(settings.state_dir.resolve(), urls), interval)
    t = settings.translate
    try:
        figures["promotions"] = promotions(
            settings.kafka.librdkafka(), t.promotions(), f"{t.group_id}-status"
        )
    except TransientError as exc:  # the figures above stand without them
        figures["promotions"] = []
        err_console.print(f"promotions not read: {exc}", highlight=False)
    if as_json:
        click.echo(json.dumps(figures, indent=2))
        return
    keys = ("consumed", "emitted", "dropped", "dead_lettered", "parked", "parked_keys")
    console.print(
        table(
            "translators",
            ["translator", *(k.replace("_", "-") for k in keys), "events/s", "lag"],
            [
                [
                    ref,
                    *(_n(row.get(k)) for k in keys),
                    _n(row.get("emitted_per_s")),
                    _n(row.get("lag")),
                ]
                for ref, row in sorted(figures["translators"].items())
            ],
        )
    )
    console.print(
        f"latency commit → business event: p50 ≤ {_n(figures['latency_p50_s'], ' s')}, "
        f"p99 ≤ {_n(figures['latency_p99_s'], ' s')}",
        highlight=False,
    )
    capture = figures["capture"]
    rows = sorted(capture["tables"].items())
    # the parking columns only when a capture parks (on_conversion_error = "park")
    parking = [k for k in _CAPTURE_PARKING if any(k in row for _, row in rows)]
    console.print(
        table(
            "capture",
            ["table", "changes", "changes/s", *(k.replace("_", "-") for k in parking)],
            [
                [
                    name,
                    _n(row["changes"]),
                    _n(row["changes_per_s"]),
                    *(_count(row.get(k)) for k in parking),
                ]
                for name, row in rows
            ],
        )
    )
    for slot, lag in sorted(capture["slot_lag_bytes"].items()):
        console.print(f"slot {slot}: {_n(lag)} bytes behind the WAL", highlight=False)
    if figures["consumers"]:
        counts = ("delivered", "dead_lettered", "parked", "parked_keys", "redriven")
        console.print(
            table(
                "consumer groups",
                ["group", *(k.replace("_", "-") for k in counts), "events/s"],
                [
                    [group, *(_count(row.get(k)) for k in counts), _n(row.get("delivered_per_s"))]
                    for group, row in sorted(figures["consumers"].items())
                ],
            )
        )
    if figures["shadows"]:
        verdicts = ("identical", "differing", "only_live", "only_shadow")
        console.print(
            table(
                "shadows",
                ["shadow", "changes", *(v.replace("_", " ") for v in verdicts)],
                [
                    [shadow, _n(row.get("changes")), *(_n(row.get(v)) for v in verdicts)]
                    for shadow, row in sorted(figures["shadows"].items())
                ],
            )
        )
    if figures["promotions"]:
        console.print(
            table(
                "promotions",
                ["live", "previous", "at", "changes compared"],
                [
                    [row["live"], row["previous"], row["at"], _n(row["figures"].get("changes"))]
                    for row in figures["promotions"]
                ],
            )
        )
