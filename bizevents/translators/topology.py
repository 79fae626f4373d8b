"""What a worker reads and writes: the technical topics of the pinned translators, and
their business contracts checked against the registry before the group is joined."""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from bizevents.contracts.business import (
    BusinessEvent,
)
from bizevents.contracts.technical.topics import table_topic
from bizevents.plumbing.errors import ConfigError, TransientError
from bizevents.plumbing.registry import RegistryUnavailableError
from bizevents.plumbing.settings import RegistrySettings
from bizevents.translators.api import Translator
from bizevents.translators.exceptions import PluginError
from bizevents.translators.settings import TranslateSettings

if TYPE_CHECKING:
    from bizevents.contracts.serde import BusinessSerializer

__all__ = ["business_serializer", "check_contracts", "list_topics", "readers", "technical_topics"]


def list_topics(admin: Any, bootstrap: str, wait_s: float) -> dict[str, Any]:
    """The cluster's topics (name -> metadata), waiting up to ``wait_s`` for a broker
    that does not answer: a worker restarted while the broker is paused or restarting
    starts once it is back, instead of exiting."""
    import structlog

    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            return dict(admin.list_topics(timeout=min(15.0, max(wait_s, 1.0))).topics)
        except Exception as exc:  # librdkafka raises KafkaException
            if time.monotonic() >= deadline:
                raise TransientError(f"cannot list the topics of {bootstrap}: {exc}") from exc
            if not told:
                structlog.get_logger("translate").warning(
                    "waiting for the broker", bootstrap=bootstrap, up_to_s=wait_s
                )
                told = True
            time.sleep(1.0)


def business_serializer(
    registry: RegistrySettings, t: TranslateSettings
) -> tuple[Any, BusinessSerializer]:
    """The registry client and the contracts' serializer, once the registry answers
    (waiting up to ``translate.registry_wait_s``): the row and the transaction worker
    start the same way."""
    import structlog

    from bizevents.contracts.serde import BusinessSerializer
    from bizevents.plumbing.registry import registry_client, wait_for_registry

    url, wait_s = registry.url, t.registry_wait_s
    wait_for_registry(
        registry,
        wait_s,
        lambda: structlog.get_logger("translate").info(
            "waiting for the registry", url=url, up_to_s=wait_s
        ),
    )
    client = registry_client(registry)
    return client, BusinessSerializer(client, t.subject_strategy, t.auto_register)


def technical_topics(
    translators: Sequence[Translator],
    settings: TranslateSettings,
    existing: Iterable[str] = (),
) -> list[str]:
    """The technical topics the translators read, sorted.

    ``translate.topics`` wins when set. Otherwise each source ``schema.table``
    becomes ``<topic_prefix>.<schema>.<table>``; a source with shell wildcards
    matches the ``existing`` topics (new tables need a restart).
    """
    if settings.topics:
        return sorted(set(settings.topics))
    if not settings.topic_prefix:
        raise ConfigError(
            "set translate.topic_prefix (the capture's server name, as in "
            "<server>.<schema>.<table>) or list translate.topics"
        )
    prefix = settings.topic_prefix
    existing = sorted(existing)
    topics: set[str] = set()
    for item in translators:
        for source in item.sources:
            if not any(c in source for c in "*?["):
                topics.add(table_topic(prefix, source))
                continue
            pattern = re.compile(re.escape(prefix + ".") + fnmatch.translate(source))
            found = [t for t in existing if pattern.fullmatch(t)]
            if not found:
                raise ConfigError(
                    f"translator {item.ref} reads {source!r}, but no topic "
                    f"{prefix}.{source} exists yet; start the capture first or list "
                    "translate.topics"
                )
            topics.update(found)
    return sorted(topics)


def readers(translators: Sequence[Translator], topics: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``topic -> translator refs`` reading it, by the topic's ``<schema>.<table>`` tail."""
    return {
        topic: tuple(
            item.ref for item in translators if item.reads(".".join(topic.split(".")[-2:]))
        )
        for topic in topics
    }


def check_contracts(
    translators: Sequence[Translator],
    client: Any,
    subject_of: Callable[[type[BusinessEvent]], str],
    auto_register: bool,
) -> dict[str, int]:
    """Register (or look up) every emitted contract; returns ``subject -> schema id``.

    A contract the registry refuses, or one that is missing with auto-registration
    off, fails with a :class:`PluginError` naming the translator and its plugin.
    """
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from bizevents.contracts.serde import _UNREACHABLE

    ids: dict[str, int] = {}
    for item in translators:
        for contract in item.emits:
            subject = subject_of(contract)
            schema = Schema(contract.contract_schema_text(), "AVRO")
            plugin = f"translator {item.ref} (plugin {item.origin or '?'})"
            try:
                if auto_register:
                    ids[subject] = int(client.register_schema(subject, schema))
                else:
                    ids[subject] = int(client.lookup_schema(subject, schema).schema_id)
            except SchemaRegistryError as exc:
                if exc.http_status_code == 409:
                    why = f"is incompatible with what {subject} holds: {exc.error_message}"
                elif exc.http_status_code == 404 and not auto_register:
                    why = (
                        f"is not registered under {subject} (auto_register is off: run "
                        "`bizevents contracts register` first)"
                    )
                else:
                    why = (
                        f"was refused by the registry ({exc.http_status_code}): {exc.error_message}"
                    )
                raise PluginError(
                    f"{plugin} emits {contract.contract_fullname()}, which {why}"
                ) from exc
            except _UNREACHABLE as exc:
                raise RegistryUnavailableError(
                    f"cannot reach the schema registry to check the contracts of {plugin}: {exc}"
                ) from exc
    return ids
