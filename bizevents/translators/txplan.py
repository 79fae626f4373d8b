"""What the transaction worker's start-up resolves: :class:`TxPlan`, made by
:func:`prepare_transactions` on the one start-up of both workers
(:mod:`bizevents.translators.startup`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bizevents.contracts.technical.transaction import TransactionDecoder, transaction_topic
from bizevents.plumbing.errors import ConfigError
from bizevents.plumbing.kafka import ensure_topics
from bizevents.plumbing.parking import ParkedKeys
from bizevents.translators.api import Translator
from bizevents.translators.assembly import AssemblyLimits, Part, Ready
from bizevents.translators.promoting import Versions
from bizevents.translators.promotion import Pins
from bizevents.translators.routing import owner, partitions_of
from bizevents.translators.settings import RuntimeSettings, TransactionSettings
from bizevents.translators.startup import Kind, resolve
from bizevents.translators.topology import technical_topics
from bizevents.translators.transaction_api import TransactionTranslator
from bizevents.translators.txcheckpoint import TP
from bizevents.translators.txcore import TransactionCore
from bizevents.translators.txparking import TxParking

__all__ = ["TxPlan", "prepare_transactions"]


@dataclass
class TxPlan:
    """What start-up resolved."""

    translators: list[TransactionTranslator]
    sources: list[str]
    #: Every partition of the sources (the assembler waits for all of them).
    source_partitions: list[tuple[str, int]]
    transaction_topic: str
    state_topic: str
    assembly_topic: str
    assembly_partitions: int
    #: Partitions of every topic the worker writes events or dead letters to.
    partitions: dict[str, int]
    core: TransactionCore
    decoder: Any
    tx_decoder: TransactionDecoder
    limits: AssemblyLimits
    #: Versions in the shadow of the live ones (docs/shadow.md), by name.
    shadows: dict[str, TransactionTranslator] = field(default_factory=dict)
    #: The versions per virtual partition and END offset (configured, promoted since;
    #: docs/shadow.md): None when nothing was read (a plan made by hand).
    pins: Pins | None = None
    #: Every version this worker may translate with: ``(name, version) -> translator``.
    versions: dict[tuple[str, int], TransactionTranslator] = field(default_factory=dict)
    #: Whether a failing transaction may park its keys (docs/parking.md): the parked
    #: topic is then restored at each rebuild and followed for re-drive requests.
    parks: bool = False
    #: Members own the technical partitions (``transactions.by_partition``): the
    #: virtual partitions are the technical ones, and slices of transactions across
    #: partitions go through ``exchange_topic`` (:mod:`~bizevents.translators.txexchange`).
    by_partition: bool = False
    exchange_topic: str = ""

    def versioned(self) -> bool:
        """Whether a transaction may be translated by other versions than ``core``'s,
        or beside a shadow: each is then translated per virtual partition's versions."""
        return bool(self.shadows) or (
            self.pins is not None
            and any(self.pins.referenced(t.name) - {t.version} for t in self.translators)
        )

    def make_core(self, versions: Versions) -> TransactionCore:
        """The core of a set of live versions, with the shadows of the others."""
        chosen = [self.versions[v] for v in versions]
        live = dict(versions)
        core = self.core
        return TransactionCore(
            chosen,
            core.serializer,
            dead_letter_topic=core.dead_letter_topic,
            shadows=[s for name, s in self.shadows.items() if live.get(name) != s.version],
            shadow_output=core.shadow_output,
            parking=core.parking,
        )

    @property
    def read(self) -> list[TP]:
        """Every partition a member reads: the sources', then the transaction topic."""
        return [*self.source_partitions, (self.transaction_topic, 0)]

    def read_of(self, owned: frozenset[int]) -> list[TP]:
        """What a member owning ``owned`` reads: by partition, its partitions of the
        sources, the transaction topic and its partitions of the exchange; else all."""
        if not self.by_partition:
            return self.read
        exchange = [(self.exchange_topic, v) for v in sorted(owned)]
        return [*self.sources_of(owned), (self.transaction_topic, 0), *exchange]

    def sources_of(self, owned: frozenset[int]) -> list[TP]:
        """The technical partitions a member owning ``owned`` reads."""
        if not self.by_partition:
            return self.source_partitions
        return [(t, p) for t, p in self.source_partitions if p in owned]

    def covers(self, v: int, tp: TP) -> bool:
        """Whether virtual partition ``v``'s checkpoint says where to read ``tp``: by
        partition only its own partitions' and the transaction topic's; else all."""
        return not self.by_partition or tp[0] == self.transaction_topic or tp[1] == v

    def owner_of(self, translator: TransactionTranslator, part: Part) -> int:
        """The virtual partition that publishes the events stemming from ``part``: by
        partition the technical partition it was written to (capture routed it by its
        business key), else its business key's hash."""
        if self.by_partition:
            return part.origin.partition
        return owner(translator, part, self.assembly_partitions)

    def partitions_of(self, ready: Ready) -> list[int]:
        """The virtual partitions ``ready`` belongs to (sorted; at least one)."""
        if not self.by_partition:
            return partitions_of(ready, self.translators, self.assembly_partitions)
        reads = self.core.reads  # remembered per table: asked of every part
        found = {
            part.origin.partition
            for part in ready.parts
            if part.change is not None and reads(part.change.source.qualified_table)
        }
        return sorted(found) or partitions_of(ready, self.translators, self.assembly_partitions)


def prepare_transactions(
    settings: RuntimeSettings,
    tx: TransactionSettings,
    pinned: Sequence[Translator] | None = None,
) -> TxPlan:
    """Resolve the pinned transaction translators (among ``pinned``, else discovered),
    their topics and contracts (:func:`~bizevents.translators.startup.resolve`), then the
    worker's own topics: the state and assembly topics."""
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.plumbing.registry import schema_lookup
    from bizevents.translators.provenance import lacking_transactions, newest_changes
    from bizevents.translators.routingcheck import check_routing, routing_topic_of

    t = settings.translate
    if tx.transaction_topic:
        tx_topic = tx.transaction_topic
    elif t.topic_prefix:
        tx_topic = transaction_topic(t.topic_prefix)
    else:
        raise ConfigError("set transactions.transaction_topic or translate.topic_prefix")
    kind = Kind(
        accepts=lambda item: isinstance(item, TransactionTranslator),
        none_pinned=(
            "no transaction translator is pinned ([translators] names only row translators); "
            "run `bizevents translate` for those"
        ),
        called="a transaction translator",
        places="virtual partitions",
        topic_word="topic",
        missing_advice=(
            "start the capture first (with transaction_metadata on) or check translate.topic_prefix"
        ),
        also_read=(tx_topic,),
    )
    found = resolve(settings, pinned, kind)
    translators, shadows, admin = found.translators, found.shadows, found.admin
    sources, metadata = found.sources, found.metadata
    outputs = [*found.outputs, *found.shadow_outputs]
    ensure_topics(admin, [tx.state()], 1, wait_s=t.broker_wait_s)
    source_partitions = [(t, p) for t in sources for p in sorted(metadata[t].partitions)]
    if tx.by_partition:
        counts = {name: len(metadata[name].partitions) for name in sources}
        assembly = _owned_partitions(admin, tx, counts, t.broker_wait_s)
    else:
        assembly = ensure_topics(
            admin, [tx.assembly()], tx.assembly_partitions, wait_s=t.broker_wait_s
        )[tx.assembly()]
    partitions = {name: found.partitions[name] for name in [*outputs, t.dead_letter_topic]}
    partitions[t.parked_topic] = 1
    guard = TxParking(
        ParkedKeys(t.max_parked_keys),
        tx.assembly(),
        assembly,
        t.parked_topic,
        t.dead_letter_topic,
        dict(t.on_error),
        by_partition=tx.by_partition,
    )
    lookup = schema_lookup(found.client)
    newest = newest_changes(
        settings.kafka.librdkafka(), sources, AutoDecoder(lookup), wait_s=t.broker_wait_s
    )
    for item in translators:
        mine = technical_topics([item], t, metadata)
        lacking = lacking_transactions(item.ref, {n: newest[n] for n in mine if n in newest})
        if lacking is not None:
            raise ConfigError(lacking)
    check_routing(
        settings.kafka.librdkafka(),
        routing_topic_of(tx_topic, t.topic_prefix),
        [item for item in translators if isinstance(item, TransactionTranslator)],
    )
    return TxPlan(
        translators,
        sources,
        source_partitions,
        tx_topic,
        tx.state(),
        tx.assembly(),
        assembly,
        partitions,
        TransactionCore(
            translators,
            found.serializer,
            dead_letter_topic=t.dead_letter_topic,
            shadows=shadows,
            shadow_output=t.shadow_output == "topic",
            parking=guard,
        ),
        AutoDecoder(lookup),
        TransactionDecoder(lookup),
        AssemblyLimits(tx.max_open, tx.max_changes, tx.max_wait, tx.remembered),
        {item.name: item for item in shadows},
        found.pins,
        found.versions,
        found.parks,
        tx.by_partition,
        tx.exchange() if tx.by_partition else "",
    )


def _owned_partitions(
    admin: Any, tx: TransactionSettings, counts: dict[str, int], wait_s: float
) -> int:
    """By partition: the technical topics' one partition count, which the assembly and
    exchange topics have too (made with it; one sentence when one of them differs)."""
    if len(set(counts.values())) != 1:
        listed = ", ".join(f"{t} has {n}" for t, n in sorted(counts.items()))
        raise ConfigError(
            "with transactions.by_partition the technical topics a member reads must have "
            f"one partition count (a member owns partition numbers): {listed}"
        )
    (n,) = set(counts.values())
    made = ensure_topics(admin, [tx.assembly(), tx.exchange()], n, wait_s=wait_s)
    for topic, count in sorted(made.items()):
        if count != n:
            raise ConfigError(
                f"with transactions.by_partition the topic {topic} must have as many "
                f"partitions as the technical topics ({n}), not {count}: delete it, or "
                "name another with transactions.group_id"
            )
    return n
