"""``bizevents translators``: what plugins are installed and which versions are pinned."""

from __future__ import annotations

import click

from bizevents.clikit import console, fails_cleanly, print_json, settings_of, table


@click.group()
def translators() -> None:
    """Translator plugins found through the `bizevents.translators` entry points."""


@translators.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON for scripts.")
@click.pass_context
@fails_cleanly
def list_(ctx: click.Context, as_json: bool) -> None:
    """Every discovered translator: version, sources, contracts, and which one is pinned."""
    from translators.registry import discover

    pins = settings_of(ctx).translators
    registry = discover()
    rows = [
        {
            "translator": item.ref,
            "sources": list(item.sources),
            "emits": [c.contract_fullname() for c in item.emits],
            "snapshots": item.snapshots,
            "deletes": item.deletes,
            "pinned": pins.get(item.name) == item.version,
            "origin": item.origin,
        }
        for item in registry
    ]
    if as_json:
        print_json({"translators": rows, "pins": pins})
    else:
        console.print(
            table(
                "translators",
                ["translator", "sources", "emits", "snapshots", "deletes", "live"],
                [
                    [
                        r["translator"],
                        ", ".join(r["sources"]),
                        ", ".join(r["emits"]),
                        r["snapshots"],
                        r["deletes"],
                        "pinned" if r["pinned"] else "",
                    ]
                    for r in rows
                ],
            )
        )
        if not rows:
            console.print(
                "no translator plugin is installed (entry-point group bizevents.translators)"
            )
    if pins:
        registry.pinned(pins)  # a pin naming a version that is not installed fails here
