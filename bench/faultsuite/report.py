"""What the suite counts, and the check of business events against the expected ids."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.faultsuite.consumer import Applied
from bench.faultsuite.topics import Rec, committed, content_of, read_topics
from bench.faultsuite.truth import order_breaks


@dataclass
class Report:
    """The counts of one run; :meth:`ok` is its verdict, :meth:`line` its first line."""

    tech_missing: int = 0
    tech_duplicates: int = 0
    tech_unknown: int = 0
    events_expected: int = 0
    events_missing: int = 0
    #: orders@3's events, from the transaction workers
    tx_expected: int = 0
    tx_missing: int = 0
    #: a long transaction's order placed by orders@3 without all its items or its total
    tx_wrong: int = 0
    events_unexpected: int = 0
    replay_expected: int = 0
    replay_missing: int = 0
    duplicated_ids: int = 0
    identical_duplicates: int = 0  # byte for byte
    same_content_duplicates: int = 0  # the lineage (source offset) differs: a re-sent change
    differing_duplicates: int = 0
    reordered: int = 0
    dead_letters: int = 0
    unexpected_exits: int = 0
    #: capture never confirmed the source's last position
    unconfirmed: int = 0
    #: what the consumer-kit consumer applied (its missing count in ``lost``)
    consumer: Applied = field(default_factory=Applied)
    details: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return (
            self.tech_missing
            + self.events_missing
            + self.replay_missing
            + self.tx_missing
            + self.consumer.missing
        )

    @property
    def applied_twice(self) -> int:
        return self.consumer.applied_twice

    def ok(self) -> bool:
        return not (
            self.lost
            or self.reordered
            or self.differing_duplicates
            or self.events_unexpected
            or self.unexpected_exits
            or self.unconfirmed
            or self.applied_twice
            or self.tx_wrong
        )

    def line(self) -> str:
        return (
            f"lost={self.lost} duplicated_ids={self.duplicated_ids} reordered={self.reordered} "
            f"differing_duplicates={self.differing_duplicates} "
            f"unexpected_exits={self.unexpected_exits} applied_twice={self.applied_twice}"
        )


def _lineage_text(record: Rec) -> str:
    """A record's place and its lineage headers, to say where an odd event came from."""
    lineage = {
        k.removeprefix("bizevents."): v.decode(errors="replace")
        for k, v in record.headers.items()
        if k.startswith("bizevents.")
    }
    return f"at {record.topic}/{record.partition}@{record.offset} {lineage}"


def check_events(
    name: str,
    expected: set[str],
    observed: list[Rec],
    tech_index: dict[tuple[str, int, int], int],
    schema_text: Callable[[int], str],
    report: Report,
) -> int:
    """Missing, doubled and out-of-order business events; returns how many are missing."""
    from bizevents.contracts.business import (
        HEADER_EVENT_ID,
        HEADER_SOURCE_OFFSET,
        HEADER_SOURCE_PARTITION,
        HEADER_SOURCE_TOPIC,
    )

    by_id: dict[str, list[Rec]] = defaultdict(list)
    sequences: dict[Any, list[tuple[int, Any]]] = defaultdict(list)
    for r in sorted(observed, key=lambda r: (r.topic, r.partition, r.offset)):
        event_id = r.headers.get(HEADER_EVENT_ID, b"").decode()
        by_id[event_id].append(r)
        source = (
            r.headers.get(HEADER_SOURCE_TOPIC, b"").decode(),
            int(r.headers.get(HEADER_SOURCE_PARTITION, b"-1")),
            int(r.headers.get(HEADER_SOURCE_OFFSET, b"-1")),
        )
        index = tech_index.get(source)
        if index is not None:
            sequences[(r.topic, r.key)].append((index, event_id))
    missing = expected - set(by_id)
    unexpected = set(by_id) - expected
    for event_id, copies in by_id.items():
        if len(copies) < 2:
            continue
        report.duplicated_ids += 1
        if all(c.value == copies[0].value for c in copies):
            report.identical_duplicates += 1
            continue
        first = content_of(copies[0].value, schema_text)
        if any(content_of(c.value, schema_text) != first for c in copies[1:]):
            report.differing_duplicates += 1
            report.details.append(f"{name}: event {event_id} doubled with other content")
        else:
            report.same_content_duplicates += 1
    breaks = order_breaks(sequences)
    report.reordered += len(breaks)
    report.events_unexpected += len(unexpected)
    report.details += [f"{name} reordered: {b}" for b in breaks[:5]]
    report.details += [f"{name} missing: {e}" for e in sorted(missing)[:5]]
    report.details += [
        f"{name} unexpected: {e} " + _lineage_text(by_id[e][0]) for e in sorted(unexpected)[:5]
    ]
    report.details.append(
        f"{name}: {len(expected)} expected, {len(missing)} missing, "
        f"{sum(len(c) for c in by_id.values())} records, {len(unexpected)} unexpected"
    )
    return len(missing)


def missing_sources(
    missing: list[Any], bootstrap: str, group: str, business: list[str]
) -> list[str]:
    """Where the ``missing`` business events (the pipeline's records) stem from: per
    source partition, their source offsets and the row group's committed offset there;
    and how many of them a ``read_uncommitted`` reader finds (written in a transaction
    that was aborted or never ended) rather than nowhere (never translated)."""
    from bizevents.contracts.business import (
        HEADER_EVENT_ID,
        HEADER_SOURCE_OFFSET,
        HEADER_SOURCE_PARTITION,
        HEADER_SOURCE_TOPIC,
    )

    uncommitted = read_topics(bootstrap, business, isolation="read_uncommitted")
    anywhere = {r.headers.get(HEADER_EVENT_ID, b"").decode() for r in uncommitted}
    by_source: dict[tuple[str, int], list[int]] = defaultdict(list)
    for o in missing:
        h = dict(o.headers)
        source = (h[HEADER_SOURCE_TOPIC].decode(), int(h[HEADER_SOURCE_PARTITION]))
        by_source[source].append(int(h[HEADER_SOURCE_OFFSET]))
    got = committed(bootstrap, group, dict.fromkeys(by_source, 0))
    found = sum(1 for o in missing if o.event_id in anywhere)
    lines = [f"business missing: {len(missing)} events, {found} of them read_uncommitted"]
    for (topic, partition), offsets in sorted(by_source.items()):
        lines.append(
            f"business missing from {topic}[{partition}]: {len(offsets)} events of source "
            f"offsets {min(offsets)}..{max(offsets)}; {group} committed "
            f"{got.get((topic, partition))}"
        )
    return lines
