"""Transaction translation: the store's orders placed in whole transactions, through
the assembler and orders@3, beside the row path (orders@2) on the same changes.

Two measures. :func:`report`: the translation core alone (decode, assemble or route,
translate, stamp, serialize) in this process, no Kafka, with an embedded schema
registry. :func:`through_kafka` (``bench/translate.py --transactions``): the same
transactions written to the technical topics (``store.orders`` and
``store.order_items``, 3 partitions each, with the transaction topic's BEGIN and END
records, all Confluent Avro) and run through ``bizevents translate --transactions``
processes, one and then two in one group; with ``--ceiling``, then two workers each
alone on its own copy of the transactions (no member reads what another translates: the
most a design of members that read only their share could reach on the machine). Each
transaction is what the store's load writes: the order inserted with total 0, three
items, the total set (5 changes, one END record; one OrderPlaced out).

    .venv/bin/python bench/translate_tx.py [--orders 4000] [--runs 3]
    .venv/bin/python bench/translate_tx.py --decode --orders 20000 --runs 5
    .venv/bin/python bench/translate.py --transactions [--records 100000] [--ceiling]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import kit  # noqa: E402

T0 = datetime(2026, 11, 24, 8, 0, tzinfo=UTC)


#: Changes per order: the order inserted with total 0, three items, the total set.
CHANGES_PER_ORDER = 5
#: The store's tables, keyed for routing by the order's id (issue 40's contract).
ROUTED = {"store.orders": "id", "store.order_items": "order_id"}


def orders_in_transactions(orders: int) -> list[tuple[int, ...]]:
    """Order ids 1..``orders`` grouped in transactions: one order, then two, alternately.
    Routed by order id, most pairs fall on two partitions: the exchange is measured,
    not bypassed (issue 40: at least a third of the transactions across partitions)."""
    groups: list[tuple[int, ...]] = []
    next_id = 1
    while next_id <= orders:
        size = min(1 + len(groups) % 2, orders - next_id + 1)
        groups.append(tuple(range(next_id, next_id + size)))
        next_id += size
    return groups


def placement(order_id: int, partitions: int) -> int:
    """The technical partition of every change of ``order_id`` (its row and its items),
    as a capture routing by business key places it."""
    from bizevents.contracts.technical.routing import partition_for, routing_key

    return partition_for(routing_key([order_id]), partitions)


def partition_counts(changes: Sequence[tuple[str, int]]) -> tuple[tuple[str, int, int], ...]:
    """END's ``partition_counts`` of a transaction's changes, each (table, partition)."""
    counts: dict[tuple[str, int], int] = {}
    for where in changes:
        counts[where] = counts.get(where, 0) + 1
    return tuple((table, partition, n) for (table, partition), n in sorted(counts.items()))


def across(ends: Sequence[Any]) -> float:
    """The share of END records whose transaction wrote to more than one partition."""
    crossed, of = crossing(ends)
    return crossed / of


def crossing(ends: Sequence[Any], tables: Collection[str] | None = None) -> tuple[int, int]:
    """(transactions across partitions, transactions) among END records' counts: those
    that wrote to ``tables`` (every END when ``None``), across when they wrote to more
    than one partition of them (a member owns partition numbers, whatever the table)."""
    crossed = of = 0
    for end in ends:
        touched = {p for t, p, _ in end.partition_counts or () if tables is None or t in tables}
        of += bool(touched)
        crossed += len(touched) > 1
    return crossed, of


def workload(
    server: str, registry: Any, orders: int, partitions: int = 3
) -> tuple[list[Any], list[Any]]:
    """(technical records of orders and items with transaction blocks, END records):
    ``orders`` orders in :func:`orders_in_transactions`, each change on the partition
    :func:`placement` gives its order, each END with its ``partition_counts``."""
    from bizevents.contracts.envelope import ChangeEvent, Transaction
    from bizevents.contracts.technical.transaction import TransactionRecord
    from bizevents.translators.pipeline import SourceRecord
    from tests.store_technical import (
        order_change,
        order_item_change,
        pending_order,
        registered_order_items_encoder,
        registered_orders_encoder,
    )

    encoders = {
        "store.orders": registered_orders_encoder(server, registry),
        "store.order_items": registered_order_items_encoder(server, registry),
    }
    records: list[SourceRecord] = []
    ends: list[TransactionRecord] = []
    lsn = 1_000_000
    for n, group in enumerate(orders_in_transactions(orders), start=1):
        xid, commit = 500 + n, lsn + 100 * len(group)
        tx_id = f"{xid}:{commit}"
        changes: list[ChangeEvent] = []
        for order_id in group:
            order = pending_order(order_id, T0)
            changes.append(order_change(server, "c", None, order, lsn=lsn, tx_id=xid))
            for line in (1, 2, 3):
                item = order_item_change(
                    server,
                    order_id,
                    line,
                    line,
                    line,
                    Decimal("2.50"),
                    lsn=lsn + line * 8,
                    tx_id=xid,
                )
                changes.append(item)
            total = {**order, "total": Decimal("15.00")}
            changes.append(order_change(server, "u", order, total, lsn=lsn + 40, tx_id=xid))
            lsn += 100
        lsn += 100  # the next transaction begins after this one's commit
        per_table: dict[str, int] = {}
        placed: list[tuple[str, int]] = []
        for order_no, change in enumerate(changes, start=1):
            table = change.source.qualified_table
            per_table[table] = per_table.get(table, 0) + 1
            block = Transaction(tx_id, order_no, per_table[table])
            key, value = encoders[table].encode(replace(change, transaction=block))
            assert change.after is not None  # inserts and updates only
            partition = placement(int(change.after[ROUTED[table]]), partitions)
            placed.append((table, partition))
            records.append(SourceRecord(f"{server}.{table}", partition, len(records), key, value))
        ends.append(
            TransactionRecord(
                "END",
                tx_id,
                0,
                len(changes),
                tuple(per_table.items()),
                partition_counts(placed),
            )
        )
    return records, ends


def measure(registry_url: str, orders: int) -> tuple[float, float, float]:
    """(transaction path changes/s in, its events/s out, row path changes/s in)."""
    from bizevents_store.translators import orders_v2, orders_v3
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from bizevents.contracts.serde import BusinessSerializer
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.plumbing.registry import schema_lookup
    from bizevents.translators.assembly import Assembler, Part
    from bizevents.translators.pipeline import Pipeline, SourceRecord
    from bizevents.translators.txcore import TransactionCore

    client = SchemaRegistryClient({"url": registry_url})
    server = f"benchtx{int(time.time() * 1000) % 1_000_000}"
    records, ends = workload(server, client, orders)
    decoder = AutoDecoder(schema_lookup(client))
    serializer = BusinessSerializer(client)
    core = TransactionCore([orders_v3], serializer)

    def transactional(batch: list[SourceRecord], batch_ends: list[Any]) -> int:
        assembler = Assembler(core.reads)
        events = 0
        offset = 0
        first = 0
        for end in batch_ends:
            outcomes = []
            for r in batch[first : first + end.event_count]:
                change = decoder.decode(r.key, r.value)
                outcomes += assembler.feed(Part(offset, r, change=change))  # type: ignore[arg-type]
                offset += 1
            first += end.event_count
            outcomes += assembler.feed(Part(offset, r, record=end))
            offset += 1
            events += sum(1 for o in core.process(outcomes).records if not o.dead_letter)
        return events

    warm = sum(end.event_count for end in ends[:20])
    transactional(records[:warm], ends[:20])  # warm: schemas fetched, writers compiled
    started = time.perf_counter()
    events = transactional(records, ends)
    tx_s = time.perf_counter() - started
    assert events == orders, f"{events} events from {orders} orders"

    pipeline = Pipeline([orders_v2], decoder, serializer)
    pipeline.process(records[:100])
    started = time.perf_counter()
    pipeline.process(records)
    row_s = time.perf_counter() - started
    return len(records) / tx_s, events / tx_s, len(records) / row_s


def report(registry_url: str, orders: int, runs: int) -> list[str]:
    """Lines with the median and spread of ``runs`` runs."""
    figures = [measure(registry_url, orders) for _ in range(runs)]

    def line(values: list[float]) -> str:
        return (
            f"{statistics.median(values):,.0f}/s (min {min(values):,.0f}, max {max(values):,.0f}, "
            f"{runs} runs)"
        )

    return [
        f"    transaction translation core (orders@3: decode, assemble, translate, serialize): "
        f"{line([f[0] for f in figures])} changes in, {line([f[1] for f in figures])} events out",
        f"    row path core on the same changes (orders@2): {line([f[2] for f in figures])} "
        "changes in",
    ]


def decode_cost(registry_url: str, orders: int, runs: int) -> list[str]:
    """CPU-µs per change of the compiled reader, whole and projected to the business
    keys (what a member would spend on a change it only routes): median of ``runs``
    passes over the workload's changes, with the spread."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from bizevents.contracts.exceptions import Coordinates
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.plumbing.registry import schema_lookup

    client = SchemaRegistryClient({"url": registry_url})
    records, _ = workload(f"benchdec{int(time.time() * 1000) % 1_000_000}", client, orders)
    decoder = AutoDecoder(schema_lookup(client))
    lines = []
    for name, columns in (("whole", None), ("business keys only", frozenset({"id", "order_id"}))):
        for r in records[:100]:  # warm: schemas fetched, readers compiled
            decoder.decode(r.key, r.value, Coordinates(r.topic, r.partition, r.offset), [], columns)
        passes = []
        for _ in range(runs):
            started = time.process_time()
            for r in records:
                where = Coordinates(r.topic, r.partition, r.offset)
                decoder.decode(r.key, r.value, where, [], columns)
            passes.append((time.process_time() - started) / len(records) * 1e6)
        lines.append(
            f"    decode, {name}: {statistics.median(passes):.1f} CPU-µs per change "
            f"(min {min(passes):.1f}, max {max(passes):.1f}, {runs} passes over "
            f"{len(records):,} changes)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=4_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--decode", action="store_true", help="the decode's CPU per change, whole and projected"
    )
    args = parser.parse_args()
    from bizevents.devstack.registry import run_in_thread

    with (
        tempfile.TemporaryDirectory(prefix="bench-tx-registry-") as folder,
        run_in_thread(Path(folder)) as registry,
    ):
        measure_ = decode_cost if args.decode else report
        for text in measure_(registry.url, args.orders, args.runs):
            print(text)


if __name__ == "__main__":
    main()


# -- through Kafka ---------------------------------------------------------------------

#: Targets of the transaction path through Kafka (issue 28, the design's performance targets).
TX_TARGET = 30_000
TX_FLAG = "--transactions"
SCALE_TARGET = 1.6
#: Two members' workers together per 100,000 changes over one member's (issue 40).
CPU_TARGET = 1.15


def fill_technical(
    bootstrap: str, registry_url: str, server: str, orders: int, partitions: int
) -> tuple[int, float]:
    """The store's transactions in technical topics of ``partitions`` partitions, each
    change where a capture routing by order id puts it, END with its counts per
    partition, and the routing declared on ``<server>.routing`` as such a capture
    declares it; returns (change records written, share of transactions across
    partitions)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from bizevents.contracts.technical.routing import TableRouting, encode_routing, routing_topic
    from bizevents.contracts.technical.transaction import (
        TRANSACTION_KEY_AVRO,
        TRANSACTION_VALUE_COUNTED_AVRO,
        TransactionRecord,
        encode_transaction_key,
        encode_transaction_value,
    )

    client = SchemaRegistryClient({"url": registry_url})
    tx_topic = f"{server}.transaction"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [
        NewTopic(f"{server}.store.orders", partitions),
        NewTopic(f"{server}.store.order_items", partitions),
        NewTopic(tx_topic, 1),
        NewTopic(routing_topic(server), 1, config={"cleanup.policy": "compact"}),
    ]
    for future in admin.create_topics(wanted).values():
        future.result(30)
    key_id = client.register_schema(
        f"{tx_topic}-key", Schema(json.dumps(TRANSACTION_KEY_AVRO), "AVRO")
    )
    value_id = client.register_schema(
        f"{tx_topic}-value", Schema(json.dumps(TRANSACTION_VALUE_COUNTED_AVRO), "AVRO")
    )
    records, ends = workload(server, client, orders, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})

    def produce(topic: str, key: bytes | None, value: bytes | None, partition: int) -> None:
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=partition)
                return
            except BufferError:
                producer.poll(0.05)

    for table, column in ROUTED.items():
        declared = encode_routing(TableRouting(table, (column,), partitions))
        produce(routing_topic(server), *declared, 0)
    first = 0
    for end in ends:
        key = encode_transaction_key(key_id, end.id)
        begin = TransactionRecord("BEGIN", end.id, end.ts_ms)
        produce(tx_topic, key, encode_transaction_value(value_id, begin, counted=True), 0)
        for r in records[first : first + end.event_count]:
            produce(r.topic, r.key, r.value, r.partition)
        first += end.event_count
        produce(tx_topic, key, encode_transaction_value(value_id, end, counted=True), 0)
    assert producer.flush(120) == 0
    return len(records), across(ends)


class PlacedReader:
    """The OrderPlaced events of some servers' orders, read in assign mode: their
    ids and their Kafka timestamps (the worker's append time)."""

    def __init__(self, bootstrap: str, *servers: str) -> None:
        from confluent_kafka import Consumer

        self.watch(*servers)
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
        )
        self.topic = "store.order-placed"
        self.positions: dict[int, int] = {}

    def watch(self, *servers: str) -> None:
        """Count from now on the events of these servers only."""
        self.servers = tuple(f"{server}.".encode() for server in servers)

    def read(self, expected: int, deadline: float, alive: Any) -> tuple[list[int], list[bytes]]:
        """Until ``expected`` distinct events of these servers arrived: (timestamps,
        ids, each prefixed by its server)."""
        from confluent_kafka import KafkaError, TopicPartition

        from bizevents.contracts.business import HEADER_EVENT_ID, HEADER_SOURCE_TOPIC

        stamps: list[int] = []
        ids: list[bytes] = []
        seen: set[bytes] = set()
        assigned = False
        while len(seen) < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(seen)} of {expected} OrderPlaced arrived in time")
            alive(len(seen))
            if not assigned:
                meta = self.consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
                if meta is None or not meta.partitions:
                    time.sleep(0.5)
                    continue
                starts = [(p, self.positions.get(p, 0)) for p in meta.partitions]
                self.consumer.assign([TopicPartition(self.topic, p, o) for p, o in starts])
                assigned = True
            for m in self.consumer.consume(2000, 0.1):
                error, partition, offset = m.error(), m.partition(), m.offset()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, str(error)
                    continue
                assert partition is not None and offset is not None
                self.positions[partition] = offset + 1
                headers = dict(m.headers() or [])
                source = headers.get(HEADER_SOURCE_TOPIC) or b""
                if not isinstance(source, bytes) or not source.startswith(self.servers):
                    continue
                event = headers.get(HEADER_EVENT_ID) or b""
                assert isinstance(event, bytes)
                event_id = source.split(b".", 1)[0] + b"/" + event
                stamps.append(m.timestamp()[1])
                ids.append(event_id)
                seen.add(event_id)
        return stamps, ids

    def close(self) -> None:
        self.consumer.close()


def worker_env(
    bootstrap: str, registry_url: str, server: str, tag: str, partitions: int
) -> dict[str, str]:
    """A transaction worker's environment: orders@3 over ``server``'s topics, as many
    virtual partitions as technical ones."""
    return {
        **os.environ,
        "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "BIZEVENTS_REGISTRY__URL": registry_url,
        "BIZEVENTS_TRANSLATORS": json.dumps({"orders": 3}),
        "BIZEVENTS_TRANSLATE__TOPIC_PREFIX": server,
        "BIZEVENTS_TRANSLATE__DEAD_LETTER_TOPIC": f"bench.dead-letter.{tag}",
        "BIZEVENTS_LOG_FORMAT": "json",
        "BIZEVENTS_LOG_LEVEL": "INFO",
        "BIZEVENTS_TRANSACTIONS__ASSEMBLY_PARTITIONS": str(partitions),
    }


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of(pids: Sequence[int]) -> float:
    """CPU seconds of the processes (and their threads) that still run."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += cpu_seconds(pid)
    return total


#: Whose CPU a run accounts for: the workers, then the rest of the pipeline.
ROLES = ("workers", "broker", "registry", "reader")


@dataclass(frozen=True, slots=True)
class Span:
    """What the processes spent from the moment every member held its share until the
    workers had nothing left to do after the last OrderPlaced: CPU seconds per role of
    :data:`ROLES`, wall seconds, the orders published, and how many seconds in the
    first of them came."""

    cpu: dict[str, float]
    seconds: float
    orders: int
    first_s: float = 0.0


def run_workers(
    env: dict[str, str] | Sequence[dict[str, str]],
    workers: int,
    log_dir: Path,
    reader: PlacedReader,
    orders: int,
    timeout: float,
    profile: Path | None = None,
    others: Mapping[str, int] | None = None,
    label: str = "",
) -> tuple[float, int, Span]:
    """``workers`` transaction workers of one group (or each with its own of ``env``'s
    environments) until ``orders`` OrderPlaced arrived; returns (orders per second,
    duplicates, and the :class:`Span`: the workers' CPU and that of ``others`` (role →
    pid: the broker, the registry, this process's reader)), all from the moment every
    member holds its share until the workers go quiet after the last event
    (:func:`steady`, :func:`quiet`). With ``profile``, each
    worker runs under cProfile and writes its statistics there."""
    import subprocess

    envs = [env] * workers if isinstance(env, dict) else list(env)
    processes = []
    logs = []
    label = label or str(workers)
    for i, worker_env in enumerate(envs):
        log = log_dir / f"tx-{label}-{i}.log"
        logs.append(log)
        with open(log, "wb") as out:
            processes.append(
                subprocess.Popen(
                    [
                        *kit.python(profile, f"tx-{label}-{i}"),
                        *("-m", "bizevents", "translate", TX_FLAG),
                    ],
                    env={**worker_env, "BIZEVENTS_STATE_DIR": str(log_dir / f"state-{label}-{i}")},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=REPO,
                )
            )

    def sample() -> tuple[float, dict[str, float]]:
        cpu = {"workers": sum(cpu_seconds(p.pid) for p in processes)}
        cpu.update({role: cpu_of([pid]) for role, pid in (others or {}).items()})
        return time.time(), cpu

    #: (wall clock, CPU per role), at most every 50 ms of the reader's turns
    samples: list[tuple[float, dict[str, float]]] = []
    #: when every member first held its share of the partitions
    settled: list[float] = []

    def alive(seen: int) -> None:
        for process, log in zip(processes, logs, strict=True):
            if process.poll() is not None:
                sys.exit(f"a worker exited {process.returncode}: {log.read_text()[-3000:]}")
        if not samples or time.time() - samples[-1][0] >= 0.05:
            samples.append(sample())
            if not settled and all(map(kit.holds_a_share, logs)):
                settled.append(samples[-1][0])

    try:
        stamps, ids = reader.read(orders, time.monotonic() + timeout, alive)
        last = quiet(sample, len(processes))
    finally:
        kit.stop_processes(processes)
    if not settled:
        sys.exit(f"{label}: the members did not all hold a share of the partitions by the end")
    span = steady(samples, settled[0], last, stamps, ids)
    if span.orders < orders / 10:
        sys.exit(
            f"{label}: only {span.orders:,} of {orders:,} events came after every member held "
            "its share; run with more --records"
        )
    window = max(stamps) / 1000.0 - (last[0] - span.seconds)
    return span.orders / window, len(ids) - len(set(ids)), span


#: CPU-seconds per second a worker with nothing left to do spends (measured: 0.02-0.03)
IDLE_CPU = 0.1


def quiet(
    sample: Callable[[], tuple[float, dict[str, float]]],
    workers: int,
    step: float = 0.25,
    limit: float = 20.0,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[float, dict[str, float]]:
    """The sample from which ``workers`` workers spend no more than an idle one's CPU
    (:data:`IDLE_CPU` each per second, over ``step`` seconds), taken after the last
    event: what the changes left them to do after it is part of their work. One member
    by partition reads the slices it forwarded to its own partitions after its last
    event (about 0.7 CPU-s of 200,000 changes); ended at the last event, its CPU per
    change was low by that, and the ratio of two members to one high. At most
    ``limit`` seconds."""
    before = sample()
    for _ in range(max(int(limit / step), 1)):
        sleep(step)
        now = sample()
        spent = now[1]["workers"] - before[1]["workers"]
        if spent <= IDLE_CPU * workers * max(now[0] - before[0], step):
            return before
        before = now
    return before


def steady(
    samples: Sequence[tuple[float, dict[str, float]]],
    settled: float,
    last: tuple[float, dict[str, float]],
    stamps: Sequence[int],
    ids: Sequence[bytes],
) -> Span:
    """The span from the last sample taken at or before ``settled`` (when every member
    held its share: start-up, group join and the first rebalance left out) to
    ``last``, with the distinct events appended since that sample (``stamps`` in ms,
    beside their ``ids``). The work before the first event is in: a worker catching up
    reads, decodes and assembles for seconds before it releases a transaction (counted
    from the first event, one member's CPU was 40 % short and two members' 20 %)."""
    start = samples[0]
    for sampled in samples:
        if sampled[0] <= settled:
            start = sampled
    cpu = {role: last[1][role] - start[1].get(role, 0.0) for role in last[1]}
    after = [(stamp, i) for stamp, i in zip(stamps, ids, strict=True) if stamp / 1000.0 >= start[0]]
    first = min((stamp for stamp, _ in after), default=start[0] * 1000.0) / 1000.0 - start[0]
    return Span(cpu, last[0] - start[0], len({i for _, i in after}), first)


@dataclass(frozen=True, slots=True)
class Figures:
    """One run of a group of workers: changes/s in, and CPU-seconds per 100,000
    changes per role of :data:`ROLES`."""

    changes_per_s: float
    per_100k: dict[str, float]
    cores_busy: float
    duplicates: int


def per_100k(span: Span, changes_per_order: float) -> dict[str, float]:
    """CPU-seconds per 100,000 changes in, per role, over the span."""
    changes = span.orders * changes_per_order
    return {role: cpu / changes * 100_000 for role, cpu in span.cpu.items()}


def spread(values: Sequence[float], digits: int = 2) -> str:
    """The median with the min-max, as the benches print them."""
    if digits == 0:
        return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"
    return (
        f"{statistics.median(values):.{digits}f} "
        f"({min(values):.{digits}f}-{max(values):.{digits}f})"
    )


def against(ratios: Sequence[float], target: float, at_most: bool = False) -> str:
    """The median of per-run ratios with its spread, its ratio to ``target`` and the verdict."""
    median = statistics.median(ratios)
    met = median <= target if at_most else median >= target
    return (
        f"{spread(ratios)}; / {target} target: {median / target:.2f} "
        f"({'≤' if at_most else '≥'} {target}: {'met' if met else 'MISSED'})"
    )


def summary(
    partitions: int, workers: int, path: str, one: Sequence[Figures], many: Sequence[Figures]
) -> list[str]:
    """Lines of one partition count: each group's medians with spread, then the ratios
    ``workers`` ÷ one per run (the runs were alternate, pairs in the same minutes)."""
    lines = [f"{partitions} technical partitions, {path}; median of {len(one)} runs (min-max):"]
    for n, runs in ((1, one), (workers, many)):
        cpu = ", ".join(
            f"{role} {spread([r.per_100k[role] for r in runs])}"
            for role in ROLES
            if role in runs[0].per_100k
        )
        lines.append(
            f"  {n} worker{'s' if n > 1 else ''}: "
            f"{spread([r.changes_per_s for r in runs], 0)} changes/s "
            f"(per worker / {TX_TARGET:,} target: "
            f"{statistics.median(r.changes_per_s for r in runs) / n / TX_TARGET:.2f}); "
            f"CPU-s per 100,000 changes: {cpu}; cores busy "
            f"{spread([r.cores_busy for r in runs])}; "
            f"{sum(r.duplicates for r in runs)} duplicates"
        )
    cpu_ratio = [
        m.per_100k["workers"] / o.per_100k["workers"] for o, m in zip(one, many, strict=True)
    ]
    rate_ratio = [m.changes_per_s / o.changes_per_s for o, m in zip(one, many, strict=True)]
    lines.append(
        f"  {workers} ÷ 1, the workers' CPU-s per 100,000 changes: "
        + against(cpu_ratio, CPU_TARGET, at_most=True)
    )
    lines.append(f"  {workers} ÷ 1, changes/s: " + against(rate_ratio, SCALE_TARGET))
    return lines


def worker_path(bootstrap: str, group_id: str) -> str:
    """Which path the transaction worker took, from what it leaves on the broker: the
    exchange topic of members that read only their share (``transactions.by_partition``,
    issue 40) with the slices forwarded through it, else today's path."""
    from confluent_kafka import Consumer, TopicPartition

    exchange = f"{group_id}.exchange"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        topic = consumer.list_topics(exchange, timeout=10).topics.get(exchange)
        if topic is None or topic.error is not None or not topic.partitions:
            return "every member reading everything (no exchange topic: today's worker)"
        forwarded = sum(
            consumer.get_watermark_offsets(TopicPartition(exchange, p), timeout=10)[1]
            for p in topic.partitions
        )
    finally:
        consumer.close()
    return f"members reading only their share ({forwarded:,} records forwarded through {exchange})"


_SPIN = """
import time
end, n = time.perf_counter() + {seconds}, 0
while time.perf_counter() < end:
    for _ in range(10_000):
        pass
    n += 1
print(n)
"""


def cores_divide(seconds: float = 3.0) -> float:
    """Loops of pure Python done by two processes at once over those done by one in the
    same time: how far the machine's cores divide CPU work without Kafka."""
    import subprocess

    def spin(copies: int) -> int:
        code = _SPIN.format(seconds=seconds)
        runs = [
            subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
            for _ in range(copies)
        ]
        return sum(int(run.communicate()[0]) for run in runs)

    return spin(2) / spin(1)


def through_kafka(
    bootstrap: str,
    registry_url: str,
    changes: int,
    workers: int,
    timeout: float,
    tmp: Path,
    profile: Path | None = None,
    stack_pids: Mapping[str, int] | None = None,
    ceiling: bool = False,
    partitions: Sequence[int] = (4, 8),
    runs: int = 3,
    by_partition: bool = False,
) -> Iterator[str]:
    """Lines: for each partition count, one worker and ``workers`` in one group, run
    alternately ``runs`` times: changes/s in and CPU-seconds per 100,000 changes of the
    workers and, with ``stack_pids`` (role → pid: broker, registry), of each other
    process of the pipeline (this process is the reader); then medians with spread and
    the ratios ``workers`` ÷ one against their targets.

    With ``ceiling``, also ``workers`` workers each alone on a copy of the transactions
    under its own server name (its own topics, its own group): no member reads what
    another translates, which is the most any design of members that read only their
    share of the changes could reach on this machine. With ``by_partition``, the workers
    run with ``transactions.by_partition`` (members own the technical partitions)."""
    import uuid

    tag = uuid.uuid4().hex[:8]
    orders = max(changes // CHANGES_PER_ORDER, 2)
    servers = {n: f"benchtx{tag}p{n}" for n in partitions}
    copies = {
        n: [f"{servers[n]}c{i}" for i in range(1, workers)] if ceiling else [] for n in partitions
    }
    per_order = float(CHANGES_PER_ORDER)
    for n, server in servers.items():
        started = time.perf_counter()
        written, crossed = fill_technical(bootstrap, registry_url, server, orders, n)
        per_order = written / orders
        yield (
            f"technical topics {server}.store.orders/order_items, {n} partitions: "
            f"{written:,} changes of {orders:,} orders, routed by order id; {crossed:.0%} "
            f"of the transactions across partitions (written in "
            f"{time.perf_counter() - started:.1f}s)"
        )
        for copy in copies[n]:
            fill_technical(bootstrap, registry_url, copy, orders, n)
            yield f"the same under {copy}, for the ceiling"
    reader = PlacedReader(bootstrap, *servers.values())
    others = {**(stack_pids or {}), "reader": os.getpid()}
    found: dict[tuple[int, str], list[Figures]] = {}
    paths: dict[int, str] = {}

    def group(n: int, name: str, prefix: str) -> dict[str, str]:
        env = worker_env(bootstrap, registry_url, prefix, tag, n)
        if by_partition:
            env["BIZEVENTS_TRANSACTIONS__BY_PARTITION"] = "true"
        return {
            **env,
            "BIZEVENTS_TRANSACTIONS__GROUP_ID": f"bench-tx-{name}-{tag}",
            "BIZEVENTS_TRANSLATE__GROUP_ID": f"bench-tx-{name}-{tag}",
        }

    def measured(n: int, label: str, envs: list[dict[str, str]], watched: list[str]) -> str:
        reader.watch(*watched)
        rate, duplicates, span = run_workers(
            envs, len(envs), tmp, reader, orders * len(watched), timeout, profile, others,
            f"{n}p-{label}-{len(found.get((n, label), []))}",
        )  # fmt: skip
        busy = sum(span.cpu.values()) / span.seconds if span.seconds > 0 else float("nan")
        figures = Figures(rate * per_order, per_100k(span, per_order), busy, duplicates)
        found.setdefault((n, label), []).append(figures)
        cpu = ", ".join(f"{role} {cpu:.2f}" for role, cpu in figures.per_100k.items())
        return (
            f"  {n} partitions, {label}: {figures.changes_per_s:,.0f} changes/s, "
            f"{rate:,.0f} OrderPlaced/s ({duplicates} duplicates); CPU-s per 100,000 "
            f"changes: {cpu}; cores busy {busy:.2f}; over the {span.orders:,} events "
            f"after every member held its share (the first {span.first_s:.1f}s in)"
        )

    many = f"{workers} workers"
    try:
        for run in range(runs):
            yield f"run {run + 1} of {runs}"
            for n, server in servers.items():
                # alternately, so that drift on a shared machine hits both alike
                for size in (1, workers) if run % 2 == 0 else (workers, 1):
                    name = "1 worker" if size == 1 else many
                    envs = [group(n, f"{n}-{size}-{run}", server)] * size
                    yield measured(n, name, envs, [server])
                    if size > 1:
                        paths[n] = worker_path(bootstrap, f"bench-tx-{n}-{size}-{run}-{tag}")
                if copies[n]:
                    prefixes = [server, *copies[n]]
                    envs = [group(n, f"{n}-alone{i}-{run}", p) for i, p in enumerate(prefixes)]
                    yield measured(n, "ceiling", envs, prefixes)
    finally:
        reader.close()
    for n in partitions:
        yield from summary(n, workers, paths[n], found[(n, "1 worker")], found[(n, many)])
        if copies[n]:
            pairs = list(zip(found[(n, "1 worker")], found[(n, "ceiling")], strict=True))
            ceiling_ratio = [c.changes_per_s / o.changes_per_s for o, c in pairs]
            ceiling_cpu = [c.per_100k["workers"] / o.per_100k["workers"] for o, c in pairs]
            yield (
                f"  ceiling ÷ 1, changes/s ({workers} members that never read what another "
                f"translates, the most a design of members reading only their share could "
                f"reach here): " + against(ceiling_ratio, SCALE_TARGET)
            )
            yield (
                f"  ceiling ÷ 1, the workers' CPU-s per 100,000 changes (the least any "
                f"design of {workers} members spends here): "
                + against(ceiling_cpu, CPU_TARGET, at_most=True)
            )
    if ceiling:
        yield (
            f"pure Python in two processes / one, without Kafka: {cores_divide():.2f} "
            f"(how far this machine's {os.cpu_count()} cores divide CPU work)"
        )
    yield (
        "on a loaded machine the CPU-seconds per 100,000 changes are the figures that "
        "count; the throughput ratio is printed beside them"
    )
