"""``bizevents topics``: the topics of a deployment, what each carries and how far it goes.

Technical topics are told by their registered value schema (Debezium's ``Envelope``),
the transaction topic by Debezium's ``TransactionMetadataValue``, business topics by
the pinned translators' contracts (or, failing that, by a registered record schema that
is not an envelope), dead-letter topics by their names. End offsets are the replay
planner's: ListOffsets where the broker answers it exactly (Apache Kafka), else the high
watermarks of Fetch responses: ListOffsets(latest) is wrong on the embedded broker
(docs/broker.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import click

from bizevents.cli.kit import console, fails_cleanly, print_json, settings_of, table

Kind = Literal["technical", "transaction", "business", "dead-letter", "other"]
_ENVELOPE = "Envelope"
_TRANSACTION = "io.debezium.connector.common.TransactionMetadataValue"


@dataclass(frozen=True)
class Pinned:
    """What one pinned translator reads and writes (from its declaration)."""

    ref: str
    reads: tuple[str, ...]  # technical topics it reads
    writes: Mapping[str, tuple[str, ...]]  # business topic -> contract full names
    #: A transaction translator: it also reads the transaction topic.
    transactional: bool = False


@dataclass
class TopicInfo:
    topic: str
    kind: Kind
    partitions: int
    end_offsets: list[int]
    contracts: list[str] = field(default_factory=list)
    translators: list[str] = field(default_factory=list)
    table: str | None = None

    @property
    def events(self) -> int:
        return sum(self.end_offsets)


def _fullname(schema: Mapping[str, Any]) -> str:
    name = str(schema.get("name", ""))
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def describe(
    topics: Mapping[str, int],
    schemas: Mapping[str, Mapping[str, Any] | None],
    pinned: Sequence[Pinned],
    dead_letter_topics: Sequence[str],
    ends: Mapping[tuple[str, int], int],
) -> list[TopicInfo]:
    """Each topic's kind, contract, translators and end offsets (pure)."""
    out = []
    for topic in sorted(topics):
        n = topics[topic]
        info = TopicInfo(topic, "other", n, [ends.get((topic, p), 0) for p in range(n)])
        schema = schemas.get(topic)
        writers = [p for p in pinned if topic in p.writes]
        if schema is not None and schema.get("name") == _ENVELOPE:
            info.kind = "technical"
            namespace = str(schema.get("namespace", ""))
            info.table = ".".join(namespace.split(".")[-2:]) or None
            info.translators = [p.ref for p in pinned if topic in p.reads]
        elif schema is not None and _fullname(schema) == _TRANSACTION:
            info.kind = "transaction"
            prefix = topic.removesuffix(".transaction") + "."
            info.translators = [
                p.ref
                for p in pinned
                if p.transactional and any(r.startswith(prefix) for r in p.reads)
            ]
        elif writers:
            info.kind = "business"
            info.translators = [p.ref for p in writers]
            info.contracts = sorted({c for p in writers for c in p.writes[topic]})
        elif topic in dead_letter_topics or topic.endswith((".capture.dlq", ".dead-letter")):
            info.kind = "dead-letter"
        elif schema is not None and schema.get("type") == "record":
            info.kind = "business"
            info.contracts = [_fullname(schema)]
        out.append(info)
    return out


def _pinned(pins: Mapping[str, int], prefix: str | None, names: Sequence[str]) -> list[Pinned]:
    from bizevents.translators.registry import discover
    from bizevents.translators.transaction_api import is_transactional

    found = []
    for t in discover():
        if pins.get(t.name) != t.version:
            continue
        reads = tuple(
            name
            for name in names
            if (prefix is None or name.startswith(prefix + "."))
            and t.reads(".".join(name.split(".")[-2:]))
        )
        writes: dict[str, set[str]] = {}
        for contract in t.emits:
            writes.setdefault(contract.contract_topic(), set()).add(contract.contract_fullname())
        contracts = {k: tuple(sorted(v)) for k, v in writes.items()}
        found.append(Pinned(t.ref, reads, contracts, is_transactional(t)))
    return found


def _schemas(client: Any, names: Sequence[str]) -> dict[str, dict[str, Any] | None]:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    out: dict[str, dict[str, Any] | None] = {}
    for name in names:
        try:
            latest = client.get_latest_version(f"{name}-value")
            parsed = json.loads(latest.schema.schema_str or "null")
            out[name] = parsed if isinstance(parsed, dict) else None
        except SchemaRegistryError:
            out[name] = None
    return out


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print as JSON for scripts.")
@click.pass_context
@fails_cleanly
def topics(ctx: click.Context, as_json: bool) -> None:
    """Technical and business topics: partitions, end offsets, contract and translator.

    End offsets come from ListOffsets on Kafka, from Fetch responses on the embedded
    broker (its ListOffsets is wrong).
    """
    from confluent_kafka.admin import AdminClient

    from bizevents.plumbing.errors import TransientError
    from bizevents.plumbing.registry import registry_client
    from bizevents.replay.plan import Planner

    settings = settings_of(ctx)
    librdkafka = settings.kafka.librdkafka()
    admin = AdminClient({**librdkafka, "log.connection.close": False})
    try:
        metadata = admin.list_topics(timeout=15)
    except Exception as exc:
        raise TransientError(
            f"cannot list the topics of {settings.kafka.bootstrap_servers}: {exc}"
        ) from exc
    counts = {
        name: len(t.partitions)
        for name, t in metadata.topics.items()
        if not name.startswith("_") and t.partitions
    }
    names = sorted(counts)
    translate = settings.translate
    pinned = _pinned(settings.translators, translate.topic_prefix, names)
    schemas = _schemas(registry_client(settings.registry), names)
    ends = {
        key: high
        for key, (_low, high) in Planner(librdkafka)
        .watermarks([(t, p) for t in names for p in range(counts[t])])
        .items()
    }
    infos = describe(counts, schemas, pinned, [translate.dead_letter_topic], ends)
    if as_json:
        print_json([{**asdict(i), "events": i.events} for i in infos])
        return
    rows = [
        [
            i.topic,
            i.kind,
            str(i.partitions),
            f"{i.events:,}",
            ", ".join(i.contracts) or (i.table or ""),
            ", ".join(i.translators),
        ]
        for i in infos
    ]
    console.print(
        table(
            "topics",
            ["topic", "kind", "partitions", "end offsets (sum)", "contract / table", "translators"],
            rows,
        )
    )
