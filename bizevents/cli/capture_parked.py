"""``bizevents capture redrive | discard | parked``: the keys a capture parked
(``on_conversion_error = "park"``, docs/parking.md), shown, re-driven or discarded by
the running capture."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from bizevents.capture.exceptions import CaptureError
from bizevents.cli.kit import CAPTURE_FILE, console, fails_cleanly, print_json, settings_of, table
from bizevents.plumbing.errors import ConfigError

if TYPE_CHECKING:
    from bizevents.capture.config import CaptureConfig
    from bizevents.cli.keys import KeyReader
    from bizevents.plumbing.parking import ParkedKeys


def _ask_capture(
    ctx: click.Context,
    capture_config: Path,
    kind: Literal["redrive", "discard"],
    key: str | None,
    timeout: float,
    reason: str = "",
) -> tuple[list[Any], list[Any]]:
    """Ask the running capture to carry out ``kind`` for ``key`` (None: every parked
    key), print each answer; ``(answers, those not done)``."""
    from bizevents.capture.config import load_capture_config
    from bizevents.capture.core.quarantine import ask_capture, parked_keys
    from bizevents.cli.keys import KeyReader

    config = load_capture_config(capture_config)
    settings = settings_of(ctx)
    kafka = settings.kafka.librdkafka()
    keys = KeyReader(settings.registry)
    if key is not None:  # its JSON or its hex, to the hex the capture's requests name
        parked, _ = parked_keys(kafka, config.parked_topic_name)
        key = next((r[3].hex() for r in parked.parked if keys.matches(r[3], key)), key)
    answers = ask_capture(kafka, config.parked_topic_name, kind, key, timeout, reason)
    for a in answers:
        click.echo(f"{a.status}: {a.topic} key {keys.show(bytes.fromhex(a.key))}: {a.message}")
    return answers, [a for a in answers if a.status != "done"]


@click.command()
@CAPTURE_FILE
@click.option(
    "--key", "key", default=None, help="""The parked key: its JSON ('{"id": 9}') or its hex."""
)
@click.option("--all", "every", is_flag=True, help="Every key parked by this capture.")
@click.option("--timeout", type=float, default=120.0, show_default=True)
@click.pass_context
@fails_cleanly
def redrive(
    ctx: click.Context, capture_config: Path, key: str | None, every: bool, timeout: float
) -> None:
    """Re-decode a parked key's changes with the code the capture runs now (after the
    fix), write them in order to the technical topic, then unpark the key.

    The running capture (``on_conversion_error = "park"``) carries the request out
    between two transactions of its stream, so no live change of the key overtakes the
    re-driven ones. A change that still does not convert leaves the key parked, with
    the new reason. Exit 0 when every key was re-driven, else 1 with a sentence.
    """
    if (key is None) == (not every):
        raise ConfigError("name one parked key (--key HEX) or ask for --all, not both or neither")
    answers, bad = _ask_capture(ctx, capture_config, "redrive", key, timeout)
    if bad:
        raise CaptureError(
            f"{len(bad)} of {len(answers)} keys were not re-driven: {bad[0].message}"
        )


@click.command()
@CAPTURE_FILE
@click.option(
    "--key", "key", required=True, help="""The parked key: its JSON ('{"id": 9}') or its hex."""
)
@click.option("--reason", required=True, help="Why its parked changes are dropped (recorded).")
@click.option("--timeout", type=float, default=120.0, show_default=True)
@click.pass_context
@fails_cleanly
def discard(
    ctx: click.Context, capture_config: Path, key: str, reason: str, timeout: float
) -> None:
    """Drop a parked key's changes and unpark it, recording the reason: its parked
    changes never reach the technical topic (they stay on the dead-letter topic, for
    the record), its later changes flow again.

    The running capture (``on_conversion_error = "park"``) carries the request out
    between two transactions of its stream. Exit 0 when the key was discarded, else 1
    with a sentence.
    """
    if not reason.strip():
        raise ConfigError("say why the key's parked changes are dropped: --reason TEXT")
    _, bad = _ask_capture(ctx, capture_config, "discard", key, timeout, reason)
    if bad:
        raise CaptureError(f"key {key} was not discarded: {bad[0].message}")


@click.command()
@CAPTURE_FILE
@click.option(
    "--key",
    "key",
    default=None,
    help="""One parked key, as the list shows it (its JSON, '{"id": 9}', or its hex): its
    parked changes.""",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON array for scripts.")
@click.pass_context
@fails_cleanly
def parked(ctx: click.Context, capture_config: Path, key: str | None, as_json: bool) -> None:
    """The keys this capture parked (on_conversion_error = "park"): topic, key as JSON,
    first parked position and the latest reason; with --key, that key's parked changes
    in order (position, stage, reason), read from the capture's dead-letter topic.
    Changes nothing."""
    from bizevents.capture.config import load_capture_config
    from bizevents.capture.control import position_writer
    from bizevents.capture.core.quarantine import parked_keys
    from bizevents.cli.keys import KeyReader

    settings = settings_of(ctx)
    config = load_capture_config(capture_config)
    kafka = settings.kafka.librdkafka()
    keys, _ = parked_keys(kafka, config.parked_topic_name)
    reader = KeyReader(settings.registry)
    if key is not None:
        rows = _show_parked(kafka, config, keys, key, reader)
        if as_json:
            print_json(rows)
        else:
            console.print(
                table(
                    f"key {key}: {len(rows)} parked changes (on {config.dlq_topic})",
                    ["topic", "position", "stage", "reason"],
                    [[str(r[c]) for c in ("topic", "position", "stage", "reason")] for r in rows],
                )
            )
        return
    describe = position_writer(config)
    rows = [
        {
            "topic": topic,
            "key": k.hex(),
            "key_json": reader.show(k),
            "since": describe(state.first),
            "reason": state.latest_reason,
        }
        for (_, topic, _, k), state in sorted(keys.parked.items())
    ]
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo(f"no key is parked in {config.parked_topic_name}")
    for row in rows:
        click.echo(f"{row['topic']} key {row['key_json']} since {row['since']}: {row['reason']}")


def _show_parked(
    kafka: dict[str, Any], config: CaptureConfig, keys: ParkedKeys, key: str, reader: KeyReader
) -> list[dict[str, Any]]:
    """``capture parked --key``: the rows of one key's parked changes, as a re-drive would
    take them (from the park's first position on, each once, in order)."""
    from bizevents.capture.control import position_writer
    from bizevents.capture.core.quarantine import parked_changes
    from bizevents.plumbing.parkingio import read_to_end

    found = [
        (ref, state) for ref, state in sorted(keys.parked.items()) if reader.matches(ref[3], key)
    ]
    if not found:
        raise CaptureError(
            f"key {key} is not parked in {config.parked_topic_name} "
            "(bizevents capture parked CAPTURE_FILE lists the parked keys)"
        )
    describe = position_writer(config)
    messages = read_to_end(kafka, config.dlq_topic)
    rows = [
        {
            "topic": ref[1],
            "key": ref[3].hex(),
            "key_json": reader.show(ref[3]),
            "position": describe(change.position),
            "stage": change.stage,
            "reason": change.reason,
            "bytes": len(change.raw),
        }
        for ref, state in found
        for change in parked_changes(messages, ref, state.first)
    ]
    return rows
