"""Subject naming strategies, the same three Confluent's serializers know.

A subject is the registry's unit of evolution: the versions under one subject are
checked against each other. For business events (Kafka record values):

- ``topic`` (TopicNameStrategy, the default): ``<topic>-value``; one contract per topic.
- ``record`` (RecordNameStrategy): ``<fullname>``; a contract evolves the same way
  whichever topics carry it.
- ``topic-record`` (TopicRecordNameStrategy): ``<topic>-<fullname>``; several
  contracts share one topic, each evolving on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol, get_args

from confluent_kafka.serialization import MessageField, SerializationContext

from bizevents.plumbing.errors import ConfigError

__all__ = [
    "STRATEGIES",
    "StrategyName",
    "SubjectStrategy",
    "confluent_strategy",
    "record_name_strategy",
    "subject_strategy",
    "topic_name_strategy",
    "topic_record_name_strategy",
]

StrategyName = Literal["topic", "record", "topic-record"]
Field = Literal["key", "value"]


class SubjectStrategy(Protocol):
    """``(topic, record fullname, field) -> subject``."""

    def __call__(self, topic: str, fullname: str, field: Field = "value") -> str: ...


def topic_name_strategy(topic: str, fullname: str, field: Field = "value") -> str:
    """Confluent's TopicNameStrategy: ``<topic>-value`` (or ``-key``)."""
    return f"{topic}-{field}"


def record_name_strategy(topic: str, fullname: str, field: Field = "value") -> str:
    """Confluent's RecordNameStrategy: the record's full name."""
    return fullname


def topic_record_name_strategy(topic: str, fullname: str, field: Field = "value") -> str:
    """Confluent's TopicRecordNameStrategy: ``<topic>-<fullname>``."""
    return f"{topic}-{fullname}"


STRATEGIES: dict[str, SubjectStrategy] = {
    "topic": topic_name_strategy,
    "record": record_name_strategy,
    "topic-record": topic_record_name_strategy,
}
assert set(STRATEGIES) == set(get_args(StrategyName))


def subject_strategy(name: str | SubjectStrategy) -> SubjectStrategy:
    """A strategy by name (``topic``, ``record``, ``topic-record``) or the callable itself."""
    if callable(name):
        return name
    key = name.strip().lower().replace("_", "-")
    key = {"topic-name": "topic", "record-name": "record", "topic-record-name": "topic-record"}.get(
        key, key
    )
    try:
        return STRATEGIES[key]
    except KeyError:
        raise ConfigError(
            f"unknown subject naming strategy {name!r}; use one of {', '.join(STRATEGIES)}"
        ) from None


def confluent_strategy(
    strategy: SubjectStrategy,
) -> Callable[[SerializationContext | None, str | None], str | None]:
    """The strategy as confluent-kafka's ``subject.name.strategy`` callable."""

    def subject(ctx: SerializationContext | None, record_name: str | None) -> str | None:
        if ctx is None or ctx.topic is None:
            return None
        field: Field = "key" if ctx.field == MessageField.KEY else "value"
        return strategy(ctx.topic, record_name or "", field)

    return subject
