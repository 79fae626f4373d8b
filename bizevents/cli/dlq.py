"""``bizevents dlq``: the parked keys (docs/parking.md): list, show, re-drive, discard.

``list`` and ``show`` only read (the parked topic, the dead-letter topic). ``redrive``
and ``discard`` write a request to the parked topic and wait for its answer: the live
worker that owns the key's partition carries it out, in order with the key's live
changes. ``--consumer GROUP`` does the same for a consumer-kit group's parked keys (its
own parked and dead-letter topics); the member of the group that owns the key's
partition hands the parked events to its handler, the fixed one once it is deployed.
"""

from __future__ import annotations

import click

from bizevents.cli.dlq_requests import discard, redrive
from bizevents.cli.dlq_target import DlqError, Who, consumer_options, parked_of, parked_rows
from bizevents.cli.keys import KeyReader
from bizevents.cli.kit import console, print_json, settings_of, table


def _readable(key: bytes) -> str:
    try:
        text = key.decode()
    except UnicodeDecodeError:
        return "-"
    return text if text.isprintable() else "-"


@click.group()
def dlq() -> None:
    """Parked keys: a change that failed parked its source key for its translator, and
    the key's later changes wait behind it on the dead-letter topic (docs/parking.md)."""


@dlq.command(name="list")
@click.option("--translator", help="Only this translator's keys (name or name@version).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@consumer_options
def list_(
    ctx: click.Context,
    translator: str | None,
    as_json: bool,
    who: Who,
) -> None:
    """The parked keys, how many changes wait behind each, and the first reason."""
    settings = settings_of(ctx)
    target = who.target(settings)
    keys = KeyReader(settings.registry)
    rows = [
        {
            "translator": ref[0],
            "topic": ref[1],
            "partition": ref[2],
            "key": ref[3].hex(),
            "key_json": keys.show(ref[3]),
            "key_text": _readable(ref[3]),
            "parked": state.count,
            "first_offset": state.first,
            "last_offset": state.last,
            "stage": state.stage,
            "reason": state.reason,
            "latest_reason": state.latest_reason,
        }
        for ref, state in parked_of(settings, translator, target)
    ]
    if as_json:
        print_json(rows)
        return
    console.print(
        table(
            f"{len(rows)} parked keys",
            [
                "translator" if who.consumer is None else "consumer",
                "topic[partition]",
                "key",
                "parked",
                "since offset",
                "reason",
            ],
            [
                [
                    r["translator"],
                    f"{r['topic']}[{r['partition']}]",
                    r["key_json"],
                    str(r["parked"]),
                    str(r["first_offset"]),
                    str(r["reason"]),
                ]
                for r in rows
            ],
        )
    )


@dlq.command()
@click.argument("key")
@click.option("--translator", help="Only this translator's parked changes.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@consumer_options
def show(
    ctx: click.Context,
    key: str,
    translator: str | None,
    as_json: bool,
    who: Who,
) -> None:
    """One key's parked changes, in source order (KEY as `dlq list` prints it: its JSON,
    e.g. '{"id": 9}', or its hex)."""
    from bizevents.plumbing.parkingio import read_to_end

    settings = settings_of(ctx)
    target = who.target(settings)
    keys = KeyReader(settings.registry)
    found = [
        (ref, state)
        for ref, state in parked_of(settings, translator, target)
        if keys.matches(ref[3], key)
    ]
    if not found:
        raise DlqError(f"no key {key} is parked (bizevents dlq list shows the parked keys)")
    messages = read_to_end(settings.kafka.librdkafka(), target.dead_letter_topic)
    rows = parked_rows(messages, found, target)
    if as_json:
        print_json(rows)
        return
    console.print(
        table(
            f"key {key}: {len(rows)} parked changes",
            ["translator", "topic[partition]", "offset", "stage", "reason"],
            [
                [
                    str(r["translator"]),
                    f"{r['topic']}[{r['partition']}]",
                    str(r["offset"]),
                    str(r["stage"]),
                    str(r["reason"]),
                ]
                for r in rows
            ],
        )
    )


dlq.add_command(redrive)
dlq.add_command(discard)
