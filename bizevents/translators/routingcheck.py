"""The transaction worker's start-up check of capture's routing against its translators'
declared business keys.

A capture that routes tables by business key declares it on ``<topic prefix>.routing``
(:mod:`bizevents.contracts.technical.routing`). A translator that keys a table
otherwise (``keys=`` of
:func:`~bizevents.translators.transaction_api.transaction_translator`) would find one
business key's changes on several partitions, so the worker refuses to start, with one
sentence naming the translator, the table and both keys. A capture that routes nothing
declares nothing, and nothing is checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from bizevents.contracts.technical.routing import TableRouting, decode_routing, routing_topic
from bizevents.plumbing.errors import ConfigError
from bizevents.plumbing.kafka import read_latest
from bizevents.translators.transaction_api import TransactionTranslator

__all__ = ["check_routing", "disagreement", "read_routing", "routing_topic_of"]

#: The reader of the routing topic (nothing is committed).
_GROUP: Final = "bizevents-translate-routing"
_TRANSACTION_SUFFIX: Final = ".transaction"


def routing_topic_of(transaction_topic: str, topic_prefix: str | None) -> str:
    """The routing topic beside the transaction topic ``<prefix>.transaction``."""
    if transaction_topic.endswith(_TRANSACTION_SUFFIX) or not topic_prefix:
        return routing_topic(transaction_topic.removesuffix(_TRANSACTION_SUFFIX))
    return routing_topic(topic_prefix)


def read_routing(kafka: Mapping[str, Any], topic: str) -> dict[str, TableRouting]:
    """The routing declared on ``topic``, per table (empty when nothing is declared)."""
    found: dict[str, TableRouting] = {}
    for key, value in read_latest(kafka, topic, _GROUP).items():
        try:
            routing = decode_routing(key, value)
        except ValueError as exc:
            raise ConfigError(f"the routing topic {topic} holds a bad record: {exc}") from None
        if routing is not None:
            found[routing.table] = routing
    return found


def disagreement(
    routings: Mapping[str, TableRouting],
    translators: Sequence[TransactionTranslator],
    topic: str,
) -> str | None:
    """The sentence saying where a translator's declared keys and the declared routing
    differ (``None`` when they agree, or when capture routes nothing). A table without
    ``keys=`` is not checked."""
    if not routings:
        return None
    for translator in translators:
        for table, routing in sorted(routings.items()):
            keyed = translator.key_columns(table) if translator.reads(table) else ()
            if keyed and keyed != routing.columns:
                return _sentence(translator, table, routing.describe(), topic)
        for table, _columns in translator.keys:
            literal = not any(c in table for c in "*?[")
            if literal and table not in routings and translator.reads(table):
                return _sentence(translator, table, "by its Kafka key", topic)
    return None


def _sentence(translator: TransactionTranslator, table: str, routed: str, topic: str) -> str:
    keyed = ", ".join(translator.key_columns(table))
    return (
        f"translator {translator.ref} keys {table} by {keyed}, but capture routes it {routed} "
        f"(declared on {topic}): declare the same keys, or route capture anew (a new topic "
        "generation, docs/transactions.md)"
    )


def check_routing(
    kafka: Mapping[str, Any], topic: str, translators: Sequence[TransactionTranslator]
) -> dict[str, TableRouting]:
    """The declared routing, checked against ``translators``' keys (a
    :class:`ConfigError` of one sentence when they disagree)."""
    routings = read_routing(kafka, topic)
    said = disagreement(routings, translators, topic)
    if said is not None:
        raise ConfigError(said)
    return routings
