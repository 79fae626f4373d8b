"""The transaction worker's versions per virtual partition (docs/shadow.md): which
versions translate a transaction for each of its virtual partitions, the hand-over of
a virtual partition to a promoted version, and the promotions and shadows' figures read
again at a rebuild."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from bizevents.plumbing.kafka import read_latest
from bizevents.translators.assembly import Outcome, Part, Ready
from bizevents.translators.metrics import WorkerStats
from bizevents.translators.promoting import (
    PromotionFollower,
    Versions,
    due_versions,
    fold_promotions,
    hand_over,
    merge_results,
)
from bizevents.translators.records import Result
from bizevents.translators.settings import RuntimeSettings
from bizevents.translators.transaction_api import TransactionTranslator
from bizevents.translators.txcore import TransactionCore
from bizevents.translators.txplan import TxPlan

__all__ = ["TxVersions"]

#: An offset past every END: a partition's current versions.
_LAST: Final = 1 << 62


class TxVersions:
    """The versions of a transaction worker's plan, per virtual partition and END."""

    def __init__(
        self, settings: RuntimeSettings, group_id: str, plan: TxPlan, stats: WorkerStats
    ) -> None:
        self.settings = settings
        self.group_id = group_id
        self.plan = plan
        self.stats = stats
        #: The core of each set of versions (promotions, shadows: docs/shadow.md), the
        #: translator each name is routed by (the configured one: every version of a
        #: name routes by the same keys), and the end of the transaction topic read.
        self._cores: dict[Versions, TransactionCore] = {}
        self._route = {t.name: t for t in plan.translators}
        self.tx_end = 0
        self._refused: set[tuple[str, int]] = set()

    def translate(self, mine: Sequence[Outcome], shares: dict[int, frozenset[int]]) -> Result:
        """The records of ``mine`` (with ``shares``, per transaction by identity, the
        virtual partitions it is translated for) when versions vary: each transaction is translated,
        for each set of its virtual partitions on the same versions, by those versions
        (with their shadows), publishing the events of those partitions' keys; the
        shadows' comparison of it is counted to the first of them."""
        plan = self.plan
        route = self._route
        result = Result()
        for outcome in mine:
            if not isinstance(outcome, Ready):
                merge_results(result, plan.core.process([outcome]))
                continue
            end = outcome.end.origin.offset if outcome.end is not None else None
            groups: dict[Versions, set[int]] = {}
            for v in shares[id(outcome)]:
                groups.setdefault(self.versions_at(v, end), set()).add(v)
            for versions, share in groups.items():
                chosen = frozenset(share)

                def owns(
                    t: TransactionTranslator, p: Part, chosen: frozenset[int] = chosen
                ) -> bool:
                    return plan.owner_of(route[t.name], p) in chosen

                part = Result()
                part.records += self.core(versions).translate(outcome, part, owns)
                if part.shadows:
                    self.stats.compared(plan.assembly_topic, min(chosen), part.shadows)
                    part.shadows = {}
                merge_results(result, part)
        return result

    def versions_at(self, v: int, end: int | None) -> Versions:
        """The versions that translate, for virtual partition ``v``, the transaction
        whose END is at ``end`` in the transaction topic (a snapshot read, which has no
        END: the partition's current versions)."""
        pins = self.plan.pins
        topic = self.plan.assembly_topic
        at = _LAST if end is None else end
        return tuple(
            sorted(
                (t.name, t.version if pins is None else pins.version(t.name, topic, v, at))
                for t in self.plan.translators
            )
        )

    def core(self, versions: Versions) -> TransactionCore:
        found = self._cores.get(versions)
        if found is None:
            configured = tuple(sorted((t.name, t.version) for t in self.plan.translators))
            found = self._cores[versions] = (
                self.plan.core if versions == configured else self.plan.make_core(versions)
            )
        return found

    async def hand_over(
        self,
        send: Callable[[bytes, bytes], Awaitable[None]],
        owned: frozenset[int],
        highwater: Callable[[], int | None],
    ) -> None:
        """Hand each owned virtual partition whose translator was promoted over to the
        new version, before this batch is translated (docs/shadow.md, "The hand-over of
        a virtual partition"): every transaction whose END lies before the transaction
        topic's end as this member knows it (read, or the fetches' ``highwater``) is
        the old version's, every later one the new version's, recorded in the
        promotions topic (``send``) and acknowledged before any of them is translated."""
        plan = self.plan
        pins = plan.pins
        assert pins is not None
        topic = plan.assembly_topic
        names = [t.name for t in plan.translators]

        def available(name: str, version: int) -> Any:
            return plan.versions.get((name, version))

        due = {
            v: found
            for v in sorted(owned)
            if (found := due_versions(pins, names, topic, v, available, self._refused))
        }
        if not due:
            return
        offset = max(self.tx_end, highwater() or 0)
        for v, versions in due.items():
            await hand_over(send, pins, versions, topic, v, offset, "virtual partition")

    async def follow(self) -> None:
        """Follow the promotions topic into the plan's pins, for ever."""
        plan = self.plan
        assert plan.pins is not None
        follower = PromotionFollower(
            None,
            self.settings.kafka.aiokafka(),
            self.settings.translate.promotions(),
            plan.pins,
            {plan.assembly_topic: tuple(t.name for t in plan.translators)},
            lambda name, version: plan.versions.get((name, version)),
        )
        await follower.follow()

    async def read(self, owned: frozenset[int]) -> None:
        """Before translating for newly owned partitions: the promotions topic read to its
        end (a previous owner's hand-overs, which the follower may not have read yet),
        and the shadows' figures of those partitions."""
        plan = self.plan
        t = self.settings.translate
        conf = self.settings.kafka.librdkafka()
        if plan.pins is not None:
            await asyncio.to_thread(
                fold_promotions,
                plan.pins,
                conf,
                t.promotions(),
                f"{self.group_id}-promotions",
                strict=False,  # not ours: the follower logs it
            )
        if plan.shadows:
            records = await asyncio.to_thread(
                read_latest, conf, t.shadows(), f"{self.group_id}-shadows"
            )
            held = [(plan.assembly_topic, v) for v in owned]
            with self.stats._lock:
                self.stats.shadows.restore(records, held, {plan.assembly_topic})
