"""Whose parked keys a ``bizevents dlq`` command reads: the translators' (the worker's
topics) or a consumer-kit group's (``--consumer GROUP``), and their parked changes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any, TypeVar

import click

from bizevents.cli.kit import fails_cleanly
from bizevents.plumbing.errors import ConfigError, TerminalError
from bizevents.settings import Settings


class DlqError(TerminalError):
    """A request that cannot be made, or that failed or was refused."""


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


@dataclass(frozen=True)
class Who:
    """Whose parked keys, as the options gave it: ``--consumer GROUP`` and its topics, or
    nothing of them (the translators')."""

    consumer: str | None
    parked_topic: str | None
    dead_letter_topic: str | None

    def target(self, settings: Settings) -> Target:
        return target_of(settings, self.consumer, self.parked_topic, self.dead_letter_topic)


def consumer_options(func: F) -> F:
    """What every ``dlq`` command takes last: ``--consumer GROUP`` and its topics (the
    consumer kit's defaults), given to it as ``who``; the click context; its errors
    fail cleanly."""

    @wraps(func)
    def with_who(
        *args: Any,
        consumer: str | None,
        parked_topic: str | None,
        dead_letter_topic: str | None,
        **kwargs: Any,
    ) -> Any:
        return func(*args, who=Who(consumer, parked_topic, dead_letter_topic), **kwargs)

    command: Any = click.pass_context(fails_cleanly(with_who))
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
        command = option(command)
    result: F = command
    return result


def target_of(
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


def parked_of(settings: Settings, translator: str | None, target: Target) -> list[tuple[Any, Any]]:
    from bizevents.plumbing.parkingio import parked_keys

    keys, _ = parked_keys(settings.kafka.librdkafka(), target.parked_topic)
    name = translator.partition("@")[0] if translator else target.consumer
    return [
        (ref, state) for ref, state in sorted(keys.parked.items()) if name is None or ref[0] == name
    ]


def parked_rows(messages: list[Any], found: list[Any], target: Target) -> list[dict[str, Any]]:
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
