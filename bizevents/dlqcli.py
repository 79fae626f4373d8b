"""``bizevents dlq``: the parked keys (docs/parking.md): list, show, re-drive, discard.

``list`` and ``show`` only read (the parked topic, the dead-letter topic). ``redrive``
and ``discard`` write a request to the parked topic and wait for its answer: the live
worker that owns the key's partition carries it out, in order with the key's live
changes.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import click

from bizevents.clikit import console, fails_cleanly, print_json, settings_of, table
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


def _states(settings: Settings) -> tuple[dict[Any, Any], int]:
    """Every key's latest state (parked or unparked) and the parked topic's end."""
    from bizevents.plumbing.parking import decode_state, ref_of
    from bizevents.plumbing.parkingio import read_to_end

    t = settings.translate
    messages = read_to_end(settings.kafka.librdkafka(), t.parked_topic, [0])
    states: dict[Any, Any] = {}
    for msg in messages:
        ref = ref_of(msg.key() or b"")
        if ref is None or msg.value() is None:
            continue
        try:
            states[ref] = decode_state(msg.value())
        except (ValueError, TypeError):
            continue
    end = messages[-1].offset() + 1 if messages else 0
    return states, end


def _parked(settings: Settings, translator: str | None) -> list[tuple[Any, Any]]:
    from bizevents.plumbing.parking import Parked

    states, _ = _states(settings)
    name = translator.partition("@")[0] if translator else None
    return [
        (ref, state)
        for ref, state in sorted(states.items())
        if isinstance(state, Parked) and (name is None or ref[0] == name)
    ]


@click.group()
def dlq() -> None:
    """Parked keys: a change that failed parked its source key for its translator, and
    the key's later changes wait behind it on the dead-letter topic (docs/parking.md)."""


@dlq.command(name="list")
@click.option("--translator", help="Only this translator's keys (name or name@version).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@fails_cleanly
def list_(ctx: click.Context, translator: str | None, as_json: bool) -> None:
    """The parked keys, how many changes wait behind each, and the first reason."""
    settings = settings_of(ctx)
    rows = [
        {
            "translator": ref[0],
            "topic": ref[1],
            "partition": ref[2],
            "key": ref[3].hex(),
            "key_text": _readable(ref[3]),
            "parked": state.count,
            "first_offset": state.first,
            "last_offset": state.last,
            "stage": state.stage,
            "reason": state.reason,
            "latest_reason": state.latest_reason,
        }
        for ref, state in _parked(settings, translator)
    ]
    if as_json:
        print_json(rows)
        return
    console.print(
        table(
            f"{len(rows)} parked keys",
            ["translator", "topic[partition]", "key", "parked", "since offset", "reason"],
            [
                [
                    r["translator"],
                    f"{r['topic']}[{r['partition']}]",
                    r["key"] if r["key_text"] == "-" else f"{r['key']} ({r['key_text']})",
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
@click.pass_context
@fails_cleanly
def show(ctx: click.Context, key: str, translator: str | None, as_json: bool) -> None:
    """One key's parked changes, in source order (KEY as `dlq list` prints it, in hex)."""
    from bizevents.plumbing.parkingio import read_to_end
    from bizevents.translators.parkingio import parked_records

    settings = settings_of(ctx)
    found = [(ref, state) for ref, state in _parked(settings, translator) if ref[3].hex() == key]
    if not found:
        raise DlqError(f"no key {key} is parked (bizevents dlq list shows the parked keys)")
    messages = read_to_end(settings.kafka.librdkafka(), settings.translate.dead_letter_topic)
    rows = [
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
    ]
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


def _ask(settings: Settings, requests: list[Any], timeout: float) -> list[Any]:
    """Write ``requests`` to the parked topic and wait for their answers."""
    from confluent_kafka import Producer

    from bizevents.plumbing.parkingio import read_requests, read_to_end

    conf = settings.kafka.librdkafka()
    topic = settings.translate.parked_topic
    _, position = _states(settings)
    producer = Producer(conf)
    for request in requests:
        producer.produce(topic, key=request.record_key(), value=request.record(), partition=0)
    if producer.flush(30):
        raise DlqError(f"the request could not be written to {topic} within 30 s")
    answers: dict[str, Any] = {}
    wanted = {r.id for r in requests}
    deadline = time.monotonic() + timeout
    while True:
        messages = read_to_end(conf, topic, [0], {0: position})
        if messages:
            position = messages[-1].offset() + 1
        read_requests(messages, answers)
        done = [answers[i] for i in wanted if i in answers and answers[i].status != "pending"]
        if len(done) == len(wanted):
            return done
        if time.monotonic() > deadline:
            raise DlqError(
                f"no worker answered within {timeout:.0f} s: is a `bizevents translate` "
                f"worker running that reads the key's topic? The request stays in {topic} "
                "and the worker that owns the key's partition carries it out when it runs"
            )
        time.sleep(0.3)


def _report(answers: list[Any], as_json: bool) -> None:
    if as_json:
        print_json([json.loads(a.record()) for a in answers])
    else:
        for a in answers:
            where = f"{a.translator} {a.topic}[{a.partition}] key {a.key}"
            click.echo(f"{a.status}: {where}: {a.message}")
    bad = [a for a in answers if a.status != "done"]
    if bad:
        raise DlqError(f"{len(bad)} of {len(answers)} requests were not done: {bad[0].message}")


@dlq.command()
@click.option("--translator", "ref", required=True, help="The fixed version: name@version.")
@click.option("--key", help="The key to re-drive (hex, as `dlq list` prints it).")
@click.option("--all", "every", is_flag=True, help="Every key parked for that translator.")
@click.option("--timeout", type=float, default=120.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the answers as JSON.")
@click.pass_context
@fails_cleanly
def redrive(
    ctx: click.Context, ref: str, key: str | None, every: bool, timeout: float, as_json: bool
) -> None:
    """Re-run a key's parked changes, in order, through the given (fixed) version, with
    the same event ids; the key is unparked when its queue is empty. A change that fails
    again leaves the key parked with the new reason."""
    from bizevents.plumbing.parking import Request
    from bizevents.translators.exceptions import PluginError
    from bizevents.translators.registry import discover

    name, _, version_text = ref.partition("@")
    if not version_text.isdigit():
        raise ConfigError(f"--translator {ref}: give name@version, e.g. orders@4")
    try:
        discover(names=[name]).get(name, int(version_text))
    except PluginError as exc:
        raise DlqError(f"cannot re-drive through {ref}: {exc}") from None
    if (key is None) == (not every):
        raise ConfigError("give either --key KEY or --all")
    settings = settings_of(ctx)
    targets = [(r, s) for r, s in _parked(settings, name) if every or r[3].hex() == key]
    if not targets:
        raise DlqError(f"no key {key or ''} is parked for translator {name}".replace("  ", " "))
    requests = [
        Request(uuid.uuid4().hex, "redrive", name, r[1], r[2], r[3].hex(), int(version_text))
        for r, _ in targets
    ]
    _report(_ask(settings, requests, timeout), as_json)


@dlq.command()
@click.argument("key")
@click.option("--translator", required=True, help="The translator the key is parked for.")
@click.option("--reason", required=True, help="Why its parked changes are dropped.")
@click.option("--timeout", type=float, default=60.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@click.pass_context
@fails_cleanly
def discard(
    ctx: click.Context, key: str, translator: str, reason: str, timeout: float, as_json: bool
) -> None:
    """Drop a key's parked changes (they stay on the dead-letter topic, for the record)
    and unpark it, recording the reason."""
    from bizevents.plumbing.parking import Request

    settings = settings_of(ctx)
    name = translator.partition("@")[0]
    targets = [r for r, _ in _parked(settings, name) if r[3].hex() == key]
    if not targets:
        raise DlqError(f"no key {key} is parked for translator {name}")
    requests = [
        Request(uuid.uuid4().hex, "discard", name, r[1], r[2], r[3].hex(), reason=reason)
        for r in targets
    ]
    _report(_ask(settings, requests, timeout), as_json)
