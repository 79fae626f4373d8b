"""``bizevents dlq``: the parked keys (docs/parking.md): list, show, re-drive, discard.

``list`` and ``show`` only read (the parked topic, the dead-letter topic). ``redrive``
and ``discard`` write a request to the parked topic and wait for its answer: the live
worker that owns the key's partition carries it out, in order with the key's live
changes. ``--consumer GROUP`` does the same for a consumer-kit group's parked keys (its
own parked and dead-letter topics); the member of the group that owns the key's
partition hands the parked events to its handler, the fixed one once it is deployed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from bizevents.cli.keys import KeyReader
from bizevents.cli.kit import console, fails_cleanly, print_json, settings_of, table
from bizevents.plumbing.errors import ConfigError, TerminalError
from bizevents.settings import Settings


class DlqError(TerminalError):
    """A request that cannot be made, or that failed or was refused."""


def _readable(key: bytes) -> str:
    try:
        text = key.decode()
    except UnicodeDecodeError:
        return "-"
    return text if text.isprintable() else "-"


@dataclass(frozen=True)
class Target:
    """Whose parked keys: the translators' (the worker's topics), or a consumer group's."""

    parked_topic: str
    dead_letter_topic: str
    consumer: str | None = None

    @property
    def who(self) -> str:
        return (
            "a `bizevents translate` worker running that reads the key's topic"
            if self.consumer is None
            else f"a consumer of group {self.consumer} running"
        )


F = TypeVar("F", bound=Callable[..., Any])


def _consumer_options(func: F) -> F:
    """``--consumer GROUP`` and its topics (the consumer kit's defaults)."""
    for option in reversed(
        [
            click.option(
                "--consumer", help="A consumer-kit group's parked keys, not a translator's."
            ),
            click.option("--parked-topic", help="With --consumer: default <GROUP>.parked."),
            click.option(
                "--dead-letter-topic", help="With --consumer: default <GROUP>.dead-letter."
            ),
        ]
    ):
        func = option(func)
    return func


def _target(
    settings: Settings, consumer: str | None, parked_topic: str | None, dead_letters: str | None
) -> Target:
    if consumer is None:
        if parked_topic or dead_letters:
            raise ConfigError("--parked-topic and --dead-letter-topic go with --consumer GROUP")
        t = settings.translate
        return Target(t.parked_topic, t.dead_letter_topic)
    return Target(
        parked_topic or f"{consumer}.parked",
        dead_letters or f"{consumer}.dead-letter",
        consumer,
    )


def _parked(settings: Settings, translator: str | None, target: Target) -> list[tuple[Any, Any]]:
    from bizevents.plumbing.parkingio import parked_keys

    keys, _ = parked_keys(settings.kafka.librdkafka(), target.parked_topic)
    name = translator.partition("@")[0] if translator else target.consumer
    return [
        (ref, state) for ref, state in sorted(keys.parked.items()) if name is None or ref[0] == name
    ]


@click.group()
def dlq() -> None:
    """Parked keys: a change that failed parked its source key for its translator, and
    the key's later changes wait behind it on the dead-letter topic (docs/parking.md)."""


@dlq.command(name="list")
@click.option("--translator", help="Only this translator's keys (name or name@version).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_consumer_options
@click.pass_context
@fails_cleanly
def list_(
    ctx: click.Context,
    translator: str | None,
    as_json: bool,
    consumer: str | None,
    parked_topic: str | None,
    dead_letter_topic: str | None,
) -> None:
    """The parked keys, how many changes wait behind each, and the first reason."""
    settings = settings_of(ctx)
    target = _target(settings, consumer, parked_topic, dead_letter_topic)
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
        for ref, state in _parked(settings, translator, target)
    ]
    if as_json:
        print_json(rows)
        return
    console.print(
        table(
            f"{len(rows)} parked keys",
            [
                "translator" if consumer is None else "consumer",
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
@_consumer_options
@click.pass_context
@fails_cleanly
def show(
    ctx: click.Context,
    key: str,
    translator: str | None,
    as_json: bool,
    consumer: str | None,
    parked_topic: str | None,
    dead_letter_topic: str | None,
) -> None:
    """One key's parked changes, in source order (KEY as `dlq list` prints it: its JSON,
    e.g. '{"id": 9}', or its hex)."""
    from bizevents.plumbing.parkingio import read_to_end

    settings = settings_of(ctx)
    target = _target(settings, consumer, parked_topic, dead_letter_topic)
    keys = KeyReader(settings.registry)
    found = [
        (ref, state)
        for ref, state in _parked(settings, translator, target)
        if keys.matches(ref[3], key)
    ]
    if not found:
        raise DlqError(f"no key {key} is parked (bizevents dlq list shows the parked keys)")
    messages = read_to_end(settings.kafka.librdkafka(), target.dead_letter_topic)
    rows = _show_rows(messages, found, target)
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


def _show_rows(messages: list[Any], found: list[Any], target: Target) -> list[dict[str, Any]]:
    """The rows `show` prints: a translator's parked changes or a group's parked events."""
    from bizevents.consumers.parking import parked_events
    from bizevents.translators.parkingio import parked_records
    from bizevents.translators.txparking import parked_transactions

    if target.consumer is not None:
        return [
            {
                "translator": target.consumer,
                "topic": parked.topic,
                "partition": parked.partition,
                "offset": parked.offset,
                "stage": parked.stage,
                "reason": parked.reason,
                "bytes": len(parked.value or b""),
            }
            for ref, state in found
            for parked in parked_events(messages, ref, state.first - 1)
        ]
    return [
        {
            "translator": parked.translator,
            "topic": parked.source.topic,
            "partition": parked.source.partition,
            "offset": parked.source.offset,
            "stage": parked.stage,
            "reason": parked.reason,
            "bytes": len(parked.source.value or b""),
        }
        for ref, state in found
        for parked in parked_records(messages, ref, state.first - 1)
    ] + [
        {
            "translator": part.translator,
            "topic": part.source.topic,
            "partition": part.source.partition,
            "offset": part.source.offset,
            "stage": part.stage,
            "reason": part.reason,
            "bytes": len(part.source.value or b""),
            "transaction": tx_id,
        }
        for ref, state in found
        for _, tx_id, parts in parked_transactions(messages, ref, state.first - 1)
        for part in parts
    ]


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


@dlq.command()
@click.option("--translator", "ref", help="The fixed version: name@version.")
@click.option(
    "--key", help="""The key to re-drive, as `dlq list` prints it: its JSON ('{"id": 9}') or hex."""
)
@click.option("--all", "every", is_flag=True, help="Every key parked for that translator.")
@click.option("--timeout", type=float, default=120.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the answers as JSON.")
@_consumer_options
@click.pass_context
@fails_cleanly
def redrive(
    ctx: click.Context,
    ref: str | None,
    key: str | None,
    every: bool,
    timeout: float,
    as_json: bool,
    consumer: str | None,
    parked_topic: str | None,
    dead_letter_topic: str | None,
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

    if (ref is None) == (consumer is None):
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
    target = _target(settings, consumer, parked_topic, dead_letter_topic)
    owner = name if ref is not None else str(consumer)
    keys = KeyReader(settings.registry)
    # a name may have row and transaction versions (orders@2, orders@3): a row version
    # re-drives the keys the row worker parked, a transaction version the business keys
    # the transaction worker parked (on its assembly topic)
    assembly = settings.transactions.assembly()
    targets = [
        (r, s)
        for r, s in _parked(settings, owner, target)
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


@dlq.command()
@click.argument("key")
@click.option("--translator", help="The translator the key is parked for.")
@click.option("--reason", required=True, help="Why its parked changes are dropped.")
@click.option("--timeout", type=float, default=60.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@_consumer_options
@click.pass_context
@fails_cleanly
def discard(
    ctx: click.Context,
    key: str,
    translator: str | None,
    reason: str,
    timeout: float,
    as_json: bool,
    consumer: str | None,
    parked_topic: str | None,
    dead_letter_topic: str | None,
) -> None:
    """Drop a key's parked changes (they stay on the dead-letter topic, for the record)
    and unpark it, recording the reason."""
    from bizevents.plumbing.parking import Request

    if (translator is None) == (consumer is None):
        raise ConfigError("give either --translator NAME or --consumer GROUP")
    settings = settings_of(ctx)
    target = _target(settings, consumer, parked_topic, dead_letter_topic)
    name = translator.partition("@")[0] if translator is not None else str(consumer)
    keys = KeyReader(settings.registry)
    targets = [r for r, _ in _parked(settings, name, target) if keys.matches(r[3], key)]
    if not targets:
        raise DlqError(f"no key {key} is parked for {name}")
    requests = [
        Request(uuid.uuid4().hex, "discard", name, r[1], r[2], r[3].hex(), reason=reason)
        for r in targets
    ]
    _report(_ask(settings, target, requests, timeout), as_json, keys)
