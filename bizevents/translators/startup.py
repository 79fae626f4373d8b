"""The one start-up of both workers: what row and transaction translators resolve alike
before a member joins its group, each step failing with a sentence.

:func:`resolve` takes the pinned translators of one kind, their shadows, the technical
topics they read (refused when missing: capture creates them), the versions the
promotions topic may put live, their contracts against the registry and the topics
they write; :func:`~bizevents.translators.worker.prepare` (row translators) and
:func:`~bizevents.translators.txplan.prepare_transactions` (transaction translators)
add what is their own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bizevents.plumbing.errors import ConfigError
from bizevents.plumbing.kafka import ensure_topics
from bizevents.translators.api import Translator
from bizevents.translators.exceptions import PluginError
from bizevents.translators.promoting import read_pins
from bizevents.translators.promotion import Pins
from bizevents.translators.records import SHADOW_SUFFIX
from bizevents.translators.settings import RuntimeSettings
from bizevents.translators.shadow import check_shadows
from bizevents.translators.topology import (
    business_serializer,
    check_contracts,
    list_topics,
    technical_topics,
)

__all__ = ["Kind", "Resolved", "missing_topics", "resolve"]


@dataclass(frozen=True)
class Kind:
    """What tells one worker's translators from the other's, and how its sentences say it."""

    #: Whether a translator is of this kind.
    accepts: Callable[[Translator], bool]
    #: The sentence when none of this kind is pinned.
    none_pinned: str
    #: What the kind is called: "a row translator", "a transaction translator".
    called: str
    #: What a promotion places a version on: "partitions", "virtual partitions".
    places: str
    #: What a missing topic is called: "technical topic", "topic".
    topic_word: str
    #: The sentence's end when a topic read is missing (what to check).
    missing_advice: str
    #: The topics besides the technical ones that must exist (the transaction topic).
    also_read: tuple[str, ...] = ()


@dataclass
class Resolved:
    """What the shared start-up found."""

    registry: Any
    translators: list[Any]
    shadows: list[Any]
    admin: Any
    #: The broker's topics when start-up began (``list_topics``).
    metadata: dict[str, Any]
    #: The technical topics the translators read.
    sources: list[str]
    #: The topics read besides the sources (:attr:`Kind.also_read`).
    also_read: list[str]
    pins: Pins
    #: Every version this worker may translate with: ``(name, version) -> translator``.
    versions: dict[tuple[str, int], Any]
    client: Any
    serializer: Any
    schema_ids: dict[str, int]
    #: The business topics the versions write.
    outputs: list[str]
    #: Their shadows' business topics, when the shadows write them.
    shadow_outputs: list[str]
    #: Whether a failing translator parks its keys (the parked topic exists then).
    parks: bool
    #: ``topic -> partition count`` of the outputs, their shadows' and the dead-letter
    #: topic, as ensure_topics read them: a node other than the one that created a
    #: topic may not know it yet (a transaction worker exited on a KeyError).
    partitions: dict[str, int]


def missing_topics(word: str, missing: Sequence[str], servers: str, advice: str) -> ConfigError:
    """The sentence for topics read that do not exist."""
    many = len(missing) > 1
    return ConfigError(
        f"the {word}{'s' if many else ''} {', '.join(missing)} "
        f"{'do' if many else 'does'} not exist on {servers}: {advice}"
    )


def resolve(settings: RuntimeSettings, pinned: Sequence[Translator] | None, kind: Kind) -> Resolved:
    """Resolve and check what both workers need before joining (see the module doc): the
    translators of ``kind`` among ``pinned`` (else discovered)."""
    from confluent_kafka.admin import AdminClient

    from bizevents.translators.registry import discover

    t = settings.translate
    registry = discover(names=settings.translators)
    if pinned is None:
        pinned = registry.pinned(settings.translators)
    translators = [item for item in pinned if kind.accepts(item)]
    if not translators:
        raise ConfigError(kind.none_pinned)
    # each worker runs the shadows of its own kind
    shadows = [s for s in map(registry.resolve, t.shadow) if kind.accepts(s)]
    check_shadows(shadows, pinned)
    admin = AdminClient({**settings.kafka.librdkafka(), "log.connection.close": False})
    metadata = list_topics(admin, settings.kafka.bootstrap_servers, t.broker_wait_s)
    sources = technical_topics(translators, t, set(metadata))
    also = list(kind.also_read)
    missing = [topic for topic in [*sources, *also] if topic not in metadata]
    if missing:
        # Reading them would auto-create them empty on many brokers and wait there
        # silently: a mistyped prefix must be loud. Capture creates technical topics.
        raise missing_topics(
            kind.topic_word, missing, settings.kafka.bootstrap_servers, kind.missing_advice
        )
    # a restarting cluster is waited for, as for its metadata above
    wait = t.broker_wait_s
    ensure_topics(admin, [t.promotions()], 1, config={"cleanup.policy": "compact"}, wait_s=wait)
    pins = read_pins(settings, {item.name: item.version for item in translators})
    versions = {(item.name, item.version): item for item in [*translators, *shadows]}
    for item in translators:
        for version in sorted(pins.referenced(item.name) - {item.version}):
            if (item.name, version) not in versions:
                versions[(item.name, version)] = _promoted(registry, item, version, kind, t)
    prepared = list(versions.values())
    client, serializer = business_serializer(settings.registry, t)
    ids = check_contracts(prepared, client, serializer.subject, t.auto_register)
    outputs = sorted({c.contract_topic() for item in prepared for c in item.emits})
    shadowed: list[str] = []
    if shadows and t.shadow_output == "topic":
        shadowed = sorted(
            {c.contract_topic() + SHADOW_SUFFIX for item in shadows for c in item.emits}
        )
    partitions = ensure_topics(
        admin, [*outputs, *shadowed, t.dead_letter_topic], t.output_partitions, wait_s=wait
    )
    if shadows:
        ensure_topics(admin, [t.shadows()], 1, config={"cleanup.policy": "compact"}, wait_s=wait)
    parks = any(t.on_error.get(item.name, "park") == "park" for item in translators)
    if parks:
        # one partition: every worker reads it whole, and its order is the fold's order
        ensure_topics(admin, [t.parked_topic], 1, config={"cleanup.policy": "compact"}, wait_s=wait)
    return Resolved(
        registry,
        translators,
        shadows,
        admin,
        metadata,
        sources,
        also,
        pins,
        versions,
        client,
        serializer,
        ids,
        outputs,
        shadowed,
        parks,
        partitions,
    )


def _promoted(registry: Any, item: Translator, version: int, kind: Kind, t: Any) -> Any:
    """Version ``version`` of ``item``'s name, live somewhere by promotion."""
    try:
        found = registry.get(item.name, version)
    except PluginError as exc:
        raise ConfigError(
            f"{item.name}@{version} is live on some {kind.places} by promotion "
            f"({t.promotions()}), but this worker cannot load it: {exc}"
        ) from exc
    if not kind.accepts(found):
        raise ConfigError(
            f"{found.ref} is live on some {kind.places} by promotion "
            f"({t.promotions()}) but is not {kind.called}"
        )
    return found
