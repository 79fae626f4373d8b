"""``bizevents verify``'s run: each captured table compared with its technical topic
(:mod:`bizevents.capture.verify`), its differing keys checked again once capture passed
the database, and, when asked, the gaps repaired: the extra keys' tombstones written,
then a snapshot asked of the running capture for exactly the differing chunks."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from bizevents.capture.config import CaptureConfig
from bizevents.capture.control import send_signals
from bizevents.capture.core.filters import any_of, condition_text
from bizevents.capture.core.signals import Signal
from bizevents.capture.verify import (
    Key,
    Report,
    TopicRow,
    TopicState,
    check_table,
    compare,
    entry_of,
    topic_state,
)
from bizevents.capture.verifylag import capture_progress
from bizevents.capture.verifytables import TableReader, open_readers
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import DeliveryError, send_confirmed

__all__ = ["CapturedTable", "Comparer", "Repair", "compare_here", "repair", "verify_tables"]

#: ``(table, topic, reader) -> (the first comparison, the topic's state of some keys)``:
#: how a table is compared; :func:`compare_here` reads the topic in this process.
Comparer = Callable[
    [str, str, TableReader],
    tuple[Callable[[], Report], Callable[[list[Key]], TopicState]],
]


@dataclass(frozen=True)
class Repair:
    """What a repair of one table writes: the extra keys' tombstones, then a signal that
    snapshots the rows where ``condition`` holds."""

    table: str
    topic: str
    condition: str
    tombstones: list[tuple[int, bytes]]


def compare_here(kafka: dict[str, Any], chunk_rows: int) -> Comparer:
    """Tables compared with topics read in this process, a chunk of ``chunk_rows`` keys
    at a time."""

    def comparer(
        table: str, topic: str, reader: TableReader
    ) -> tuple[Callable[[], Report], Callable[[list[Key]], TopicState]]:
        return (
            partial(_compare, kafka, table, topic, reader, chunk_rows),
            partial(_keys_state, kafka, topic, reader),
        )

    return comparer


def _compare(kafka: dict[str, Any], name: str, topic: str, table: Any, chunk_rows: int) -> Report:
    state = topic_state(kafka, topic, table.decoder)
    report = Report(name, topic, records_read=state.read)
    compare(report, state, table.chunks(chunk_rows))
    return report


def _keys_state(kafka: dict[str, Any], topic: str, table: Any, keys: list[Key]) -> TopicState:
    state = topic_state(kafka, topic, table.decoder)
    return TopicState(
        {k: state.rows[k] for k in keys if k in state.rows},
        {k: state.gone[k] for k in keys if k in state.gone},
    )


@dataclass(frozen=True)
class CapturedTable:
    """One captured table as ``verify --spark``'s tasks reach it (shipped with them):
    the table side of :class:`bizevents.replay.verify.SparkVerify`."""

    registry: dict[str, Any]
    dsn: str
    config: CaptureConfig
    table: str

    def open_reader(self) -> tuple[TableReader, Callable[[], None]]:
        from bizevents.plumbing.registry import registry_client, schema_lookup

        lookup = schema_lookup(registry_client(self.registry))
        ((_table, _topic, reader),), _side, close = open_readers(
            self.config, self.dsn, [self.table], lookup
        )
        return reader, close

    def entry_of(self, decoded: Any, partition: int, offset: int) -> tuple[str, Any, Any, Any]:
        return entry_of(decoded, partition, offset)

    def state_of(self, found: list[tuple[Key, tuple[Any, ...]]]) -> TopicState:
        state = TopicState()
        for key, (partition, _offset, digest, where, _order, raw) in found:
            if digest is None:
                state.gone[key] = where
            else:
                state.rows[key] = TopicRow(digest, where, raw, partition)
        return state

    def compared(self, table: str, topic: str, read: int, state: TopicState, chunks: Any) -> Report:
        report = Report(table, topic, records_read=read)
        compare(report, state, chunks)
        return report


def verify_tables(
    config: CaptureConfig,
    dsn: str,
    kafka: dict[str, Any],
    lookup: Callable[[int], str],
    tables: Sequence[str],
    comparer: Comparer,
    rechecks: int,
    wait_s: float,
) -> tuple[list[Report], list[Repair]]:
    """Every table of ``tables`` (none: every captured one) compared with its topic and
    its differences checked again up to ``rechecks`` times, each once capture passed
    the database (waiting up to ``wait_s``); the reports, and the repairs of those
    whose differences are confirmed gaps."""
    readers, side, close = open_readers(config, dsn, list(tables), lookup)
    reports: list[Report] = []
    repairs: list[Repair] = []
    try:
        behind = capture_progress(config, dsn, side, kafka, wait_s)
        for qualified, topic, table in readers:
            first, state_of = comparer(qualified, topic, table)
            report = check_table(
                qualified, topic, behind, first, state_of, table.rows_for, rechecks
            )
            reports.append(report)
            if report.repairable:
                found = _repair_of(report, table)
                if found is not None:
                    repairs.append(found)
    finally:
        close()
    return reports, repairs


def _repair_of(report: Report, table: TableReader) -> Repair | None:
    parts = [table.range_condition(lo, hi) for lo, hi in report.differing_chunks]
    extras = [d for d in report.differences if d.kind == "extra" and d.tombstone]
    if extras:
        # Snapshotted again after their tombstones: a key inserted again meanwhile gets
        # its row back after the tombstone.
        parts.append(table.keys_condition([d.key for d in extras]))
    tombstones = [d.tombstone for d in extras if d.tombstone is not None]
    if not parts:
        return None
    return Repair(report.table, report.topic, condition_text(any_of(parts)), tombstones)


def repair(kafka: dict[str, Any], config: CaptureConfig, repairs: Sequence[Repair]) -> list[str]:
    """Carry out ``repairs``, each table's tombstones acknowledged before its snapshot is
    asked for; the id of each table's signal."""
    from confluent_kafka import Producer

    producer = Producer(kafka)
    sent = []
    for fix in repairs:
        records = [(key, None, partition) for partition, key in fix.tombstones]
        try:
            send_confirmed(producer, fix.topic, records)
        except DeliveryError as exc:
            raise TransientError(
                f"the repair's tombstones for {fix.topic} were not all written ({exc.reason}); "
                "no snapshot was asked for: run verify --repair again"
            ) from None
        signal = Signal(
            uuid.uuid4().hex, "execute-snapshot", (fix.table,), ((fix.table, fix.condition),)
        )
        send_signals(kafka, config, [signal])
        sent.append(signal.id)
    return sent
