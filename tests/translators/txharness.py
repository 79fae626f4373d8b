"""An in-memory transaction worker: the loop's rooms (ownership, rebuild, hand-over,
checkpoint) run as :class:`~bizevents.translators.txworker.TxWorker` runs them, with no
broker. The transactions are assembled already (:func:`tests.translators.test_routing._ready`);
the state topic is a dict of encoded checkpoints, the promotions topic a list."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bizevents.contracts.serde import BusinessSerializer
from bizevents.translators.assembly import (
    Assembler,
    AssemblyLimits,
    Checkpoint,
    Part,
    Ready,
    commit_position,
)
from bizevents.translators.metrics import WorkerStats
from bizevents.translators.promotion import Pins
from bizevents.translators.records import OutRecord, SourceRecord
from bizevents.translators.settings import RuntimeSettings
from bizevents.translators.transaction_api import TransactionTranslator
from bizevents.translators.txcheckpoint import TP, Point, Progress
from bizevents.translators.txcore import TransactionCore
from bizevents.translators.txplan import TxPlan
from bizevents.translators.txshare import Share
from bizevents.translators.txversions import TxVersions
from tests.translators.test_routing import _placing, _ready

TX_TOPIC = "shop.transaction"
EXCHANGE = "tx.exchange"
SOURCES: list[TP] = [("shop.store.orders", 0), ("shop.store.order_items", 0)]


def make_plan(
    translators: Sequence[TransactionTranslator],
    serializer: BusinessSerializer,
    n: int,
    *,
    pins: Pins | None = None,
    versions: Sequence[TransactionTranslator] = (),
    by_partition: bool = False,
) -> TxPlan:
    """A plan as start-up makes one, for ``n`` virtual partitions; ``versions``: the
    versions a promotion may put live besides ``translators``; ``by_partition``: members
    own the ``n`` partitions of each source (``transactions.by_partition``)."""
    core = TransactionCore(translators, serializer, dead_letter_topic="dlq")
    topics = {c.contract_topic() for t in [*translators, *versions] for c in t.emits}
    sources = [(t, p) for t, _ in SOURCES for p in range(n)] if by_partition else SOURCES
    return TxPlan(
        list(translators),
        sorted({t for t, _ in SOURCES}),
        list(sources),
        TX_TOPIC,
        "tx.state",
        "tx.assemble",
        n,
        {**dict.fromkeys(topics, 3), "dlq": 3},
        core,
        None,
        None,  # type: ignore[arg-type]  # nothing is decoded here: parts come assembled
        AssemblyLimits(),
        pins=pins,
        versions={(t.name, t.version): t for t in [*translators, *versions]},
        by_partition=by_partition,
        exchange_topic=EXCHANGE if by_partition else "",
    )


def orders(first: int, count: int, lsn: int) -> list[Ready]:
    """One transaction per order (two lines each), committed at LSN ``lsn``, ``lsn + 1``, ..."""
    return [_ready(f"9:{lsn + i}", _placing(first + i, 2)) for i in range(count)]


def ended(ready: Ready, end_offset: int) -> Ready:
    """``ready`` with its END at ``end_offset`` of the transaction topic."""
    end = Part(end_offset, SourceRecord(TX_TOPIC, 0, end_offset, None, b"END"))
    return Ready(ready.tx_id, ready.parts, end)


@dataclass
class Member:
    """One member: what it owns, where it has read, what it published."""

    plan: TxPlan
    versions: TxVersions
    share: Share
    progress: Progress = field(default_factory=lambda: Progress({}))
    assembler: Assembler | None = None
    published: list[OutRecord] = field(default_factory=list)

    @classmethod
    def of(cls, plan: TxPlan) -> Member:
        versions = TxVersions(RuntimeSettings(), "tx", plan, WorkerStats("tx"))
        return cls(plan, versions, Share(plan, versions))

    def rebuild(self, owned: frozenset[int], state: dict[int, bytes]) -> dict[TP, int]:
        """Own ``owned`` from the checkpoints in ``state``, as the loop's rebuild does;
        where the reader would be placed."""
        self.share.owned = owned
        mine = {v: Point.decode(state[v]) if v in state else Point() for v in owned}
        start = dict.fromkeys(self.plan.read, 0)
        self.assembler, offsets = self.share.start(mine, start)
        self.progress = Progress(offsets, self.progress.seq)
        return offsets

    def handle(self, ready: Sequence[Ready]) -> list[OutRecord]:
        """A batch: what this member publishes of the transactions ``ready``."""
        result, _ = self.share.translate(list(ready))
        self.published += result.records
        return list(result.records)

    def checkpoint(self, state: dict[int, bytes], released: Sequence[Ready]) -> None:
        """Record each owned partition's checkpoint in ``state``: the transactions
        ``released`` are behind it."""
        assert self.assembler is not None
        # what the assembler's checkpoint says once their END records were fed (the
        # assembler has its own tests)
        positions = [commit_position(r.tx_id or "") for r in released]
        position = max((p for p in positions if p is not None), default=None)
        others = tuple(r.tx_id or "" for r, p in zip(released, positions, strict=True) if p is None)
        offsets = self.progress.offsets(self.assembler.commit_offset(self.progress.seq + 1))
        # as TxWorker._checkpoints: never less than a partition's predecessor had
        for v, point in self.share.points_after(offsets, Checkpoint(position, others)).items():
            state[v] = point.encode()
