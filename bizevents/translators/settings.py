"""The translator worker's settings group (``[translate]``), and the groups its runtime reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from bizevents.plumbing.settings import KafkaSettings, LoopbackHost, RegistrySettings, SettingsGroup


class TranslateSettings(SettingsGroup):
    """The translator worker (``bizevents translate``): group, topics, batching, metrics.

    The group settings default to what the embedded broker needs (a 6 s session: it
    holds every JoinGroup for half the session, see docs/broker.md); on a Kafka
    cluster use its usual values (e.g. 45 s).
    """

    #: The consumer group every worker joins; also the Faust app id.
    group_id: str = "bizevents-translate"
    #: Technical topics are ``<topic_prefix>.<schema>.<table>``; the prefix is the
    #: capture's ``server`` (or its ``topic_prefix``).
    topic_prefix: str | None = None
    #: Explicit technical topics, instead of deriving them from the translators' sources.
    topics: tuple[str, ...] = ()
    dead_letter_topic: str = "bizevents.dead-letter"
    #: What a failing change does, by translator name (docs/parking.md): "park" (the
    #: default: its source key waits, with its later changes, for a re-drive),
    #: "dead-letter" (the change alone is set aside) or "fail" (the worker stops).
    on_error: dict[str, Literal["park", "dead-letter", "fail"]] = Field(default_factory=dict)
    #: The compacted topic of the parked keys and of re-drive requests.
    parked_topic: str = "bizevents.parked"
    #: Keys parked at once; one more stops the worker with a sentence.
    max_parked_keys: int = Field(default=10_000, ge=1)
    subject_strategy: Literal["topic", "record", "topic-record"] = "topic"
    auto_register: bool = True
    #: Partitions of business and dead-letter topics the worker creates when missing.
    output_partitions: int = Field(default=4, ge=1)
    processing_guarantee: Literal["at_least_once", "exactly_once"] = "at_least_once"
    #: With ``processing_guarantee = "exactly_once"``: how long the broker keeps a block's
    #: open transaction (Kafka's ``transaction.timeout.ms``; at most the broker's
    #: ``transaction.max.timeout.ms``, 15 min by default). A broker away longer than this
    #: while a block is open aborts it: the worker exits 1 and, restarted, translates the
    #: block again (nothing lost or doubled). A killed worker's partitions are taken over
    #: at once (their next producer fences it), whatever this is.
    transaction_timeout_s: float = Field(default=60.0, gt=0, le=900)
    #: Prometheus text endpoint on loopback; ``None`` turns it off, 0 picks a free port.
    metrics_host: LoopbackHost = "127.0.0.1"
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    #: Records per fetched block (one block of one partition is translated at once).
    max_poll_records: int = Field(default=5000, ge=1)
    max_fetch_bytes: int = Field(default=4 << 20, ge=1024)
    #: How long the broker may hold an empty fetch. Faust's own 1,500 ms adds up to that
    #: much latency on the embedded broker, where records that arrive meanwhile often wait
    #: for the held fetch to end (docs/broker.md); polling an idle broker 10 times a
    #: second costs little.
    fetch_max_wait_ms: int = Field(default=100, ge=0, le=60_000)
    #: How long start-up waits for a schema registry that does not answer yet (one
    #: starting beside the worker) before it fails.
    registry_wait_s: float = Field(default=30.0, ge=0)
    #: How long start-up waits for a broker that does not answer (paused, restarting)
    #: before it fails: a restarted worker rides out a broker outage.
    broker_wait_s: float = Field(default=45.0, ge=0)
    #: Blocks whose produce acknowledgements may be outstanding at once.
    max_inflight_blocks: int = Field(default=3, ge=1)
    linger_ms: float = Field(default=5.0, ge=0)
    max_batch_bytes: int = Field(default=1 << 20, ge=1024)
    commit_interval_s: float = Field(default=1.0, gt=0)
    session_timeout_s: float = Field(default=6.0, gt=0)
    heartbeat_interval_s: float = Field(default=1.0, gt=0)
    rebalance_timeout_s: float = Field(default=5.0, gt=0)
    #: Versions run in the shadow of the live ones, ``["orders@4"]`` (docs/shadow.md):
    #: same input, compared event by event, never seen by consumers.
    shadow: tuple[str, ...] = ()
    #: ``count``: a shadow's events are only compared (and checked against their
    #: contracts); ``topic``: they also go to ``<contract topic>.shadow``.
    shadow_output: Literal["topic", "count"] = "count"
    #: The comparisons per shadow and partition, compacted (default ``<group_id>.shadows``).
    shadows_topic: str | None = None
    #: The promotions and their hand-overs, compacted (default ``<group_id>.promotions``).
    promotions_topic: str | None = None

    def shadows(self) -> str:
        return self.shadows_topic or f"{self.group_id}.shadows"

    def promotions(self) -> str:
        return self.promotions_topic or f"{self.group_id}.promotions"

    @model_validator(mode="after")
    def _coherent(self) -> TranslateSettings:
        if self.heartbeat_interval_s * 3 > self.session_timeout_s:
            raise ValueError(
                f"translate.heartbeat_interval_s={self.heartbeat_interval_s} must be at most a "
                f"third of translate.session_timeout_s={self.session_timeout_s}"
            )
        return self


@dataclass(frozen=True, slots=True)
class RuntimeSettings:
    """The groups the translation runtime reads: the live worker and the replay alike.

    The shell builds it from the application's settings (``Settings.runtime()``); a
    test or an embedding program builds it by hand.
    """

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    registry: RegistrySettings = field(default_factory=RegistrySettings)
    translate: TranslateSettings = field(default_factory=TranslateSettings)
    #: Which version of each translator runs live, e.g. ``{"orders": 2}``.
    translators: Mapping[str, int] = field(default_factory=dict)
    state_dir: Path = Path(".bizevents")


class TransactionSettings(SettingsGroup):
    """The transaction worker (``bizevents translate --transactions``, docs/transactions.md).

    Every member reads every partition of the technical topics the pinned transaction
    translators read, and the transaction topic, and assembles every transaction; the
    consumer group ``<group_id>.assemble`` over the ``assembly_topic`` (its partitions
    are the virtual partitions business keys hash to) says which member translates and
    publishes which keys' events. Checkpoints go to the ``state_topic``; a virtual
    partition never checkpointed starts at the offsets committed for the group
    ``<group_id>.start``, else at each partition's start.
    """

    group_id: str = "bizevents-transactions"
    #: Debezium's transaction topic (default ``<translate.topic_prefix>.transaction``).
    transaction_topic: str | None = None
    #: Where the members record their checkpoints (default ``<group_id>.state``).
    state_topic: str | None = None
    #: The topic whose partitions are the virtual partitions (default
    #: ``<group_id>.assembly``; it holds no records): up to this many members publish.
    assembly_topic: str | None = None
    assembly_partitions: int = Field(default=4, ge=1)
    #: Members own the technical partitions (capture routes by business key and END
    #: counts changes per partition): each reads only its own partitions, the
    #: transaction topic and its partitions of ``<group_id>.exchange``, and a
    #: transaction across partitions is exchanged; the virtual partitions are then the
    #: technical ones (``assembly_partitions`` is not used).
    by_partition: bool = False
    #: Transactions open at once. From half of it a worker catching up reads only the
    #: partitions not past the oldest open transaction (``txpacing``); beyond it (ids
    #: without a commit position cannot be held back) the oldest is dead-lettered.
    max_open: int = Field(default=10_000, ge=1)
    #: Changes of one transaction; beyond it the transaction is dead-lettered.
    max_changes: int = Field(default=100_000, ge=1)
    #: Later transactions that may end while one waits for its END or its changes.
    max_wait: int = Field(default=1_000, ge=1)
    #: Released transaction ids remembered besides the commit position (non-PostgreSQL ids).
    remembered: int = Field(default=10_000, ge=1)
    #: Records read per batch (all partitions together).
    max_records: int = Field(default=2_000, ge=1)
    #: How long the broker may take to acknowledge a send (an output or a checkpoint):
    #: past it the member drops what it holds and reads again from its checkpoints, as
    #: after a rebalance (what was sent meanwhile may come again, with the same ids).
    request_timeout_s: float = Field(default=40.0, gt=0)
    #: With ``translate.processing_guarantee = "exactly_once"``: how long the broker keeps
    #: a killed member's open transaction before it aborts it (read_committed readers of
    #: its outputs wait that long).
    transaction_timeout_s: float = Field(default=10.0, gt=0, le=900)
    #: How long a stopping member (SIGTERM) may take to end its turn, record its last
    #: checkpoint and close its clients; past it, it exits anyway (the next owner reads
    #: again from the last checkpoint recorded).
    stop_timeout_s: float = Field(default=20.0, gt=0)

    def state(self) -> str:
        return self.state_topic or f"{self.group_id}.state"

    def assembly(self) -> str:
        return self.assembly_topic or f"{self.group_id}.assembly"

    def exchange(self) -> str:
        """Where members forward the slices of transactions across partitions."""
        return f"{self.group_id}.exchange"

    def start_group(self) -> str:
        """The group whose committed offsets say where a new group begins."""
        return f"{self.group_id}.start"
