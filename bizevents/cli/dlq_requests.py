"""``bizevents dlq redrive | discard``: a request written to the parked topic, carried
out by the live worker (or the consumer group's member) that owns the key's partition,
in order with the key's live changes; its answer printed."""

from __future__ import annotations

import json
import uuid
from typing import Any

import click

from bizevents.cli.dlq_target import DlqError, Target, Who, consumer_options, parked_of
from bizevents.cli.keys import KeyReader
from bizevents.cli.kit import print_json, settings_of
from bizevents.plumbing.errors import ConfigError
from bizevents.settings import Settings


def _ask(settings: Settings, target: Target, requests: list[Any], timeout: float) -> list[Any]:
    """Write ``requests`` to the parked topic and wait for their answers."""
    from bizevents.plumbing.parkingio import ask, parked_keys

    conf = settings.kafka.librdkafka()
    _, position = parked_keys(conf, target.parked_topic)
    answers = ask(conf, target.parked_topic, requests, position, timeout)
    if answers is None:
        raise DlqError(
            f"no answer within {timeout:.0f} s: is {target.who}? The request stays in "
            f"{target.parked_topic}, and the one that owns the key's partition carries it out "
            "when it runs"
        )
    return answers


def _report(answers: list[Any], as_json: bool, keys: KeyReader) -> None:
    if as_json:
        print_json([json.loads(a.record()) for a in answers])
    else:
        for a in answers:
            where = f"{a.translator} {a.topic}[{a.partition}] key {keys.show(bytes.fromhex(a.key))}"
            click.echo(f"{a.status}: {where}: {a.message}")
    bad = [a for a in answers if a.status != "done"]
    if bad:
        raise DlqError(f"{len(bad)} of {len(answers)} requests were not done: {bad[0].message}")


@click.command()
@click.option("--translator", "ref", help="The fixed version: name@version.")
@click.option(
    "--key", help="""The key to re-drive, as `dlq list` prints it: its JSON ('{"id": 9}') or hex."""
)
@click.option("--all", "every", is_flag=True, help="Every key parked for that translator.")
@click.option("--timeout", type=float, default=120.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the answers as JSON.")
@consumer_options
def redrive(
    ctx: click.Context,
    ref: str | None,
    key: str | None,
    every: bool,
    timeout: float,
    as_json: bool,
    who: Who,
) -> None:
    """Re-run a key's parked changes, in order, through the given (fixed) version, with
    the same event ids; the key is unparked when its queue is empty. A change that fails
    again leaves the key parked with the new reason. With --consumer GROUP instead of
    --translator: the group's member that owns the key hands its parked events, in order,
    to its handler (deploy the fixed handler first)."""
    from bizevents.plumbing.parking import Request
    from bizevents.translators.exceptions import PluginError
    from bizevents.translators.registry import discover
    from bizevents.translators.transaction_api import TransactionTranslator

    if (ref is None) == (who.consumer is None):
        raise ConfigError("give either --translator NAME@VERSION or --consumer GROUP")
    if (key is None) == (not every):
        raise ConfigError("give either --key KEY or --all")
    version: int | None = None
    whole: bool | None = None  # a transaction translator's (None: a consumer group's)
    if ref is not None:
        name, _, version_text = ref.partition("@")
        if not version_text.isdigit():
            raise ConfigError(f"--translator {ref}: give name@version, e.g. orders@4")
        try:
            found = discover(names=[name]).get(name, int(version_text))
        except PluginError as exc:
            raise DlqError(f"cannot re-drive through {ref}: {exc}") from None
        version = int(version_text)
        whole = isinstance(found, TransactionTranslator)
    settings = settings_of(ctx)
    target = who.target(settings)
    owner = name if ref is not None else str(who.consumer)
    keys = KeyReader(settings.registry)
    # a name may have row and transaction versions (orders@2, orders@3): a row version
    # re-drives the keys the row worker parked, a transaction version the business keys
    # the transaction worker parked (on its assembly topic)
    assembly = settings.transactions.assembly()
    targets = [
        (r, s)
        for r, s in parked_of(settings, owner, target)
        if (every or keys.matches(r[3], str(key)))
        and (whole is None or (r[1] == assembly) == whole)
    ]
    if not targets:
        what = f"translator {owner}" if ref is not None else f"consumer group {owner}"
        raise DlqError(f"no key {key or ''} is parked for {what}".replace("  ", " "))
    requests = [
        Request(uuid.uuid4().hex, "redrive", owner, r[1], r[2], r[3].hex(), version)
        for r, _ in targets
    ]
    _report(_ask(settings, target, requests, timeout), as_json, keys)


@click.command()
@click.argument("key")
@click.option("--translator", help="The translator the key is parked for.")
@click.option("--reason", required=True, help="Why its parked changes are dropped.")
@click.option("--timeout", type=float, default=60.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@consumer_options
def discard(
    ctx: click.Context,
    key: str,
    translator: str | None,
    reason: str,
    timeout: float,
    as_json: bool,
    who: Who,
) -> None:
    """Drop a key's parked changes (they stay on the dead-letter topic, for the record)
    and unpark it, recording the reason."""
    from bizevents.plumbing.parking import Request

    if (translator is None) == (who.consumer is None):
        raise ConfigError("give either --translator NAME or --consumer GROUP")
    settings = settings_of(ctx)
    target = who.target(settings)
    name = translator.partition("@")[0] if translator is not None else str(who.consumer)
    keys = KeyReader(settings.registry)
    targets = [r for r, _ in parked_of(settings, name, target) if keys.matches(r[3], key)]
    if not targets:
        raise DlqError(f"no key {key} is parked for {name}")
    requests = [
        Request(uuid.uuid4().hex, "discard", name, r[1], r[2], r[3].hex(), reason=reason)
        for r in targets
    ]
    _report(_ask(settings, target, requests, timeout), as_json, keys)
