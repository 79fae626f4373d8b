"""``bizevents translators``: what plugins are installed and which versions are pinned."""

from __future__ import annotations

import click

from bizevents.cli.kit import console, fails_cleanly, print_json, settings_of, table


@click.group()
def translators() -> None:
    """Translator plugins found through the `bizevents.translators` entry points."""


@translators.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON for scripts.")
@click.pass_context
@fails_cleanly
def list_(ctx: click.Context, as_json: bool) -> None:
    """Every discovered translator: version, sources, contracts, and which one is pinned.

    A plugin that fails to load is listed with its error. The exit code is that of the
    worker's start-up: 1 when a pinned translator cannot be loaded (its own plugin is
    broken, or no plugin holds it), 0 otherwise, even if an unpinned plugin is broken.
    """
    from bizevents.translators.registry import discover

    pins = settings_of(ctx).translators
    registry = discover()
    if as_json:
        print_json(
            {
                "pins": pins,
                "translators": [
                    {
                        "translator": t.ref,
                        "sources": list(t.sources),
                        "emits": [c.contract_fullname() for c in t.emits],
                        "snapshots": t.snapshots,
                        "deletes": t.deletes,
                        "pinned": pins.get(t.name) == t.version,
                        "origin": t.origin,
                    }
                    for t in registry
                ],
                "broken": [
                    {"entry_point": f.name, "value": f.value, "dist": f.dist, "error": f.error}
                    for f in registry.broken
                ],
            }
        )
    else:
        rows = [
            [
                t.ref,
                ", ".join(t.sources),
                ", ".join(c.contract_name() for c in t.emits),
                t.snapshots,
                t.deletes,
                "pinned" if pins.get(t.name) == t.version else "",
            ]
            for t in registry
        ]
        columns = ["translator", "sources", "emits", "snapshots", "deletes", "live"]
        console.print(table("translators", columns, rows))
        if registry.broken:
            broken = [[f.name, f.value, f.dist, f.error] for f in registry.broken]
            columns = ["entry point", "value", "distribution", "error"]
            console.print(table("broken plugins", columns, broken))
        elif not rows:
            console.print("no plugin is installed in the entry-point group bizevents.translators")
    if pins:
        # what the worker does at start-up: a pinned name whose plugin is broken, or a
        # version that is not installed, fails here with the sentence that names it
        discover(names=pins).pinned(pins)
