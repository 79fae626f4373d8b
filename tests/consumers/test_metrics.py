"""The consumer kit's metrics: its counters, and the parked keys of the partitions it owns."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from bizevents.consumers.delivery import ConsumerStats
from bizevents.consumers.metrics import COUNTERS, serve_metrics
from bizevents.plumbing.parking import Parked, ParkedKeys
from tests.metrics import scrape


@dataclass
class Member:
    group_id: str = "billing"
    stats: ConsumerStats = field(default_factory=ConsumerStats)
    parking: ParkedKeys = field(default_factory=ParkedKeys)
    owned: frozenset[tuple[str, int]] = frozenset({("orders", 0), ("orders", 1)})


def test_each_counter_and_the_keys_parked_on_owned_partitions() -> None:
    member = Member(stats=ConsumerStats(delivered=5, duplicates=2, parked=3, commits=7))
    for partition, key in ((0, b"a"), (1, b"b"), (2, b"c")):  # partition 2 is another's
        member.parking.parked[("billing", "orders", partition, key)] = Parked(
            0, 0, 1, "handle", "x", "x"
        )
    samples = scrape(functools.partial(serve_metrics, member))
    group = (("group", "billing"),)
    assert samples[("bizevents_consumer_delivered_total", group)] == 5
    assert samples[("bizevents_consumer_duplicates_total", group)] == 2
    assert samples[("bizevents_consumer_parked_total", group)] == 3
    assert samples[("bizevents_consumer_commits_total", group)] == 7
    assert samples[("bizevents_consumer_stale_total", group)] == 0
    assert {name for name, _ in COUNTERS} <= {
        n.removeprefix("bizevents_consumer_").removesuffix("_total") for n, _ in samples
    }
    assert samples[("bizevents_consumer_parked_keys", group)] == 2
