"""``bizevents shadow report`` and ``bizevents promote``: what a shadow version's
comparison with the live one says, and putting it live when the comparison passes a gate
(docs/shadow.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from bizevents.cli.kit import at_least, console, fails_cleanly, print_json, settings_of, table
from bizevents.plumbing.errors import ConfigError
from bizevents.settings import Settings


def _comparison(settings: Settings, ref: str) -> Any:
    """The shadow's figures over every partition, from the shadows topic; a sentence
    when there are none."""
    from bizevents.plumbing.kafka import read_latest
    from bizevents.translators.shadow import ShadowBook

    t = settings.translate
    book = ShadowBook()
    for key, value in read_latest(
        settings.kafka.librdkafka(), t.shadows(), f"{t.group_id}-shadow-report"
    ).items():
        book.load(key, value)
    found = book.total(ref)
    if found is None:
        known = ", ".join(book.shadows()) or "none"
        raise ConfigError(
            f"{ref} is not shadowed: {t.shadows()} holds no comparison of it (shadowed: "
            f'{known}); run it with translate.shadow = ["{ref}"] or '
            f"`bizevents translate --shadow {ref}` first"
        )
    return found


@click.group()
def shadow() -> None:
    """A version running in the shadow of the live one (docs/shadow.md)."""


@shadow.command()
@click.argument("ref", metavar="NAME@VERSION")
@click.option("--json", "as_json", is_flag=True, help="The figures as JSON.")
@click.option(
    "--html",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the diff report (as `bizevents replay --diff` does) to this file.",
)
@click.pass_context
@fails_cleanly
def report(ctx: click.Context, ref: str, as_json: bool, html: Path | None) -> None:
    """How the shadow version's events compare with the live version's so far."""
    from bizevents.diffreport import render

    comparison = _comparison(settings_of(ctx), ref)
    if html is not None:
        html.write_text(
            render(comparison.as_diff(), comparison.live, comparison.shadow, f"shadow of {ref}")
        )
    if as_json:
        print_json(comparison.as_dict())
        return
    console.print(
        f"{comparison.shadow} in the shadow of {comparison.live}: {comparison.translated:,} "
        f"changes compared (translated by either version) of {comparison.changes:,} read; "
        f"failures: live {comparison.live_failures:,}, "
        f"shadow {comparison.shadow_failures:,}"
    )
    rows = [
        [
            contract,
            f"{f.identical:,}",
            f"{f.differing:,}",
            f"{f.only_live:,}",
            f"{f.only_shadow:,}",
            ", ".join(f"{name} ({n:,})" for name, n in sorted(f.fields.items())) or "-",
        ]
        for contract, f in sorted(comparison.contracts.items())
    ]
    console.print(
        table(
            "events",
            ["contract", "identical", "differing", "live only", "shadow only", "fields differing"],
            rows,
        )
    )
    if html is not None:
        console.print(f"report written to {html}")


@click.command()
@click.argument("ref", metavar="NAME@VERSION")
@click.option(
    "--max-differ",
    default="0",
    show_default=True,
    help="Share of events that may differ where not expected (0.5% or 0.005).",
)
@at_least("--min-changes", low=0, default=10_000)
@click.option(
    "--expect-field",
    "expect",
    multiple=True,
    help="A field expected to differ (repeatable): status, OrderPlaced.status, address.city.",
)
@click.pass_context
@fails_cleanly
def promote(
    ctx: click.Context, ref: str, max_differ: str, min_changes: int, expect: tuple[str, ...]
) -> None:
    """Put a shadowed version live when its comparison passes the gate; each worker hands
    each partition over at one offset. Naming the version that was live before the last
    promotion rolls back, without a gate."""
    from bizevents.plumbing.kafka import read_latest
    from bizevents.translators.promotion import Pins, Promotion, decode, write
    from bizevents.translators.registry import discover
    from bizevents.translators.shadow import PromotionGate, parse_fraction

    settings = settings_of(ctx)
    t = settings.translate
    try:
        gate = PromotionGate(parse_fraction(max_differ), min_changes, frozenset(expect))
    except ValueError as exc:
        raise ConfigError(f"--max-differ: {exc}") from exc
    target = discover(names=settings.translators).resolve(ref)  # installed, or a sentence
    if target.name not in settings.translators:
        raise ConfigError(f"{target.name} is not pinned ([translators] {target.name} = N)")
    pins = Pins(settings.translators)
    records = read_latest(settings.kafka.librdkafka(), t.promotions(), f"{t.group_id}-promote")
    for key, value in records.items():
        if value is not None:
            pins.apply(decode(value, f"{t.promotions()} key {key!r}"))
    live = pins.live(target.name)
    if live == target.version:
        raise ConfigError(f"{ref} is already live")
    last = pins.promotions.get(target.name)
    figures: dict[str, Any]
    if last is not None and last.previous == target.version:
        figures = {"rollback_of": f"{target.name}@{live}"}
    else:
        comparison = _comparison(settings, ref)
        if comparison.live != f"{target.name}@{live}":
            raise ConfigError(
                f"{ref} was compared with {comparison.live}, but {target.name}@{live} is live: "
                "shadow it beside the live version first"
            )
        failures = gate.failures(comparison)
        if failures:
            raise ConfigError(f"{ref} is not promoted: {'; '.join(failures)}")
        figures = {
            "changes": comparison.changes,
            "translated": comparison.translated,
            "events": comparison.events,
            "unexpected": comparison.unexpected(gate.expect_fields),
            "fields": {contract: dict(f.fields) for contract, f in comparison.contracts.items()},
            "gate": {
                "max_differ": gate.max_differ,
                "min_changes": gate.min_changes,
                "expect_fields": sorted(gate.expect_fields),
            },
        }
    at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    promotion = Promotion(target.name, target.version, live, at, figures)
    write(settings.kafka.librdkafka(), t.promotions(), promotion)
    console.print(
        f"{ref} promoted in place of {target.name}@{live} ({json.dumps(figures, sort_keys=True)});"
        " each worker hands each partition over at its next block (a transaction translator: each"
        " virtual partition, at its next batch)"
    )
