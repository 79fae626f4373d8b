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

    .venv/bin/python bench/translate_tx.py [--transactions 4000] [--runs 3]
    .venv/bin/python bench/translate_tx.py --decode --transactions 20000 --runs 5
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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import kit  # noqa: E402

T0 = datetime(2026, 11, 24, 8, 0, tzinfo=UTC)


def _items_encoder(server: str, registry: Any) -> Any:
    from bizevents.contracts.logical import ColumnType, Field, Kind
    from bizevents.contracts.technical import TableSchema
    from tests.store_technical import registered_encoder

    key = (
        Field("order_id", ColumnType(Kind.INT64), optional=False),
        Field("line_no", ColumnType(Kind.INT32), optional=False),
    )
    value = (
        *key,
        Field("product_id", ColumnType(Kind.INT64), optional=False),
        Field("quantity", ColumnType(Kind.INT32), optional=False),
        Field("unit_price", ColumnType(Kind.DECIMAL, scale=2, precision=12), optional=False),
    )
    return registered_encoder(TableSchema(server, "store", "order_items", key, value), registry)


def workload(server: str, registry: Any, transactions: int) -> tuple[list[Any], list[Any]]:
    """(technical records of orders and items with transaction blocks, END records)."""
    from bizevents.contracts.envelope import ChangeEvent, PgPosition, Source, Transaction
    from bizevents.contracts.technical.transaction import TransactionRecord
    from bizevents.translators.pipeline import SourceRecord
    from tests.store_technical import order_change, registered_orders_encoder

    orders = registered_orders_encoder(server, registry)
    items = _items_encoder(server, registry)
    records: list[SourceRecord] = []
    ends: list[TransactionRecord] = []
    lsn = 1_000_000
    for n in range(1, transactions + 1):
        xid, commit = 500 + n, lsn + 100
        tx_id = f"{xid}:{commit}"
        order = {
            "id": n,
            "customer_id": 7,
            "status": "pending",
            "total": Decimal("0.00"),
            "currency": "EUR",
            "placed_at": T0,
            "shipped_at": None,
            "tracking_number": None,
            "updated_at": T0,
        }
        created = order_change(server, "c", None, order, lsn=lsn, tx_id=xid)
        changes: list[tuple[Any, ChangeEvent]] = [(orders, created)]
        for line in (1, 2, 3):
            row = {
                "order_id": n,
                "line_no": line,
                "product_id": line,
                "quantity": line,
                "unit_price": Decimal("2.50"),
            }
            source = Source(
                "postgresql", server, "store", "store", "order_items", 0,
                position=PgPosition(lsn + line * 8, xid),
            )  # fmt: skip
            key = {"order_id": n, "line_no": line}
            changes.append((items, ChangeEvent("c", source, None, row, key, 0)))
        total = {**order, "total": Decimal("15.00")}
        changes.append((orders, order_change(server, "u", order, total, lsn=lsn + 40, tx_id=xid)))
        per_table: dict[str, int] = {}
        for order_no, (encoder, change) in enumerate(changes, start=1):
            table = change.source.qualified_table
            per_table[table] = per_table.get(table, 0) + 1
            block = Transaction(tx_id, order_no, per_table[table])
            encoded = encoder.encode(replace(change, transaction=block))
            records.append(
                SourceRecord(f"{server}.{table}", n % 3, len(records), encoded[0], encoded[1])
            )
        ends.append(TransactionRecord("END", tx_id, 0, 5, tuple(per_table.items())))
        lsn += 200
    return records, ends


def measure(registry_url: str, transactions: int) -> tuple[float, float, float]:
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
    records, ends = workload(server, client, transactions)
    decoder = AutoDecoder(schema_lookup(client))
    serializer = BusinessSerializer(client)
    core = TransactionCore([orders_v3], serializer)

    def transactional(batch: list[SourceRecord], batch_ends: list[Any]) -> int:
        assembler = Assembler(core.reads)
        events = 0
        offset = 0
        per_tx = 5
        for i, end in enumerate(batch_ends):
            outcomes = []
            for r in batch[i * per_tx : (i + 1) * per_tx]:
                change = decoder.decode(r.key, r.value)
                outcomes += assembler.feed(Part(offset, r, change=change))  # type: ignore[arg-type]
                offset += 1
            outcomes += assembler.feed(Part(offset, r, record=end))
            offset += 1
            events += sum(1 for o in core.process(outcomes).records if not o.dead_letter)
        return events

    transactional(records[:100], ends[:20])  # warm: schemas fetched, writers compiled
    started = time.perf_counter()
    events = transactional(records, ends)
    tx_s = time.perf_counter() - started
    assert events == transactions, f"{events} events from {transactions} transactions"

    pipeline = Pipeline([orders_v2], decoder, serializer)
    pipeline.process(records[:100])
    started = time.perf_counter()
    pipeline.process(records)
    row_s = time.perf_counter() - started
    return len(records) / tx_s, events / tx_s, len(records) / row_s


def report(registry_url: str, transactions: int, runs: int) -> list[str]:
    """Lines with the median and spread of ``runs`` runs."""
    figures = [measure(registry_url, transactions) for _ in range(runs)]

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


def decode_cost(registry_url: str, transactions: int, runs: int) -> list[str]:
    """CPU-µs per change of the compiled reader, whole and projected to the business
    keys (what a member would spend on a change it only routes): median of ``runs``
    passes over the workload's changes, with the spread."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from bizevents.contracts.exceptions import Coordinates
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.plumbing.registry import schema_lookup

    client = SchemaRegistryClient({"url": registry_url})
    records, _ = workload(f"benchdec{int(time.time() * 1000) % 1_000_000}", client, transactions)
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
    parser.add_argument("--transactions", type=int, default=4_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--decode", action="store_true", help="the decode's CPU per change, whole and projected"
    )
    args = parser.parse_args()
    from bizevents.devstack.registry import run_in_thread

    with run_in_thread(Path(tempfile.mkdtemp(prefix="bench-tx-registry-"))) as registry:
        measure_ = decode_cost if args.decode else report
        for text in measure_(registry.url, args.transactions, args.runs):
            print(text)


if __name__ == "__main__":
    main()


# -- through Kafka ---------------------------------------------------------------------

#: Targets of the transaction path through Kafka (issue 28, the design's performance targets).
TX_TARGET = 30_000
TX_FLAG = "--transactions"
SCALE_TARGET = 1.6


def fill_technical(bootstrap: str, registry_url: str, server: str, transactions: int) -> int:
    """The store's transactions in the technical and transaction topics; returns the
    number of change records written."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from bizevents.contracts.technical.transaction import (
        TRANSACTION_KEY_AVRO,
        TRANSACTION_VALUE_AVRO,
        TransactionRecord,
        encode_transaction_key,
        encode_transaction_value,
    )

    client = SchemaRegistryClient({"url": registry_url})
    tx_topic = f"{server}.transaction"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [
        NewTopic(f"{server}.store.orders", 3),
        NewTopic(f"{server}.store.order_items", 3),
        NewTopic(tx_topic, 1),
    ]
    for future in admin.create_topics(wanted).values():
        future.result(30)
    key_id = client.register_schema(
        f"{tx_topic}-key", Schema(json.dumps(TRANSACTION_KEY_AVRO), "AVRO")
    )
    value_id = client.register_schema(
        f"{tx_topic}-value", Schema(json.dumps(TRANSACTION_VALUE_AVRO), "AVRO")
    )
    records, ends = workload(server, client, transactions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})

    def produce(topic: str, key: bytes | None, value: bytes | None, partition: int) -> None:
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=partition)
                return
            except BufferError:
                producer.poll(0.05)

    per_tx = len(records) // len(ends)
    for n, end in enumerate(ends):
        key = encode_transaction_key(key_id, end.id)
        begin = TransactionRecord("BEGIN", end.id, end.ts_ms)
        produce(tx_topic, key, encode_transaction_value(value_id, begin), 0)
        for r in records[n * per_tx : (n + 1) * per_tx]:
            produce(r.topic, r.key, r.value, r.partition)
        produce(tx_topic, key, encode_transaction_value(value_id, end), 0)
    assert producer.flush(120) == 0
    return len(records)


class PlacedReader:
    """The OrderPlaced events of some servers' orders, read in assign mode: their
    ids and their Kafka timestamps (the worker's append time)."""

    def __init__(self, bootstrap: str, *servers: str) -> None:
        from confluent_kafka import Consumer

        self.servers = tuple(f"{server}.".encode() for server in servers)
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
        )
        self.topic = "store.order-placed"
        self.positions: dict[int, int] = {}

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
            for m in self.consumer.consume(2000, 0.5):
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
    bootstrap: str, registry_url: str, server: str, tag: str, transactions: int
) -> dict[str, str]:
    """A transaction worker's environment: orders@3 over ``server``'s topics."""
    return {
        **os.environ,
        "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "BIZEVENTS_REGISTRY__URL": registry_url,
        "BIZEVENTS_TRANSLATORS": json.dumps({"orders": 3}),
        "BIZEVENTS_TRANSLATE__TOPIC_PREFIX": server,
        "BIZEVENTS_TRANSLATE__DEAD_LETTER_TOPIC": f"bench.dead-letter.{tag}",
        "BIZEVENTS_LOG_FORMAT": "json",
        "BIZEVENTS_LOG_LEVEL": "INFO",
        # the whole backlog may be open at once while the worker catches up: the bench
        # measures the rate, not the limit (docs/transactions.md, "Limits")
        "BIZEVENTS_TRANSACTIONS__MAX_OPEN": str(transactions + 1),
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


@dataclass(frozen=True, slots=True)
class Span:
    """What the processes spent between the first OrderPlaced the reader saw and the
    last: CPU seconds, wall seconds, and the transactions published meanwhile."""

    workers_cpu: float
    others_cpu: float
    seconds: float
    transactions: int


def run_workers(
    env: dict[str, str] | Sequence[dict[str, str]],
    workers: int,
    log_dir: Path,
    reader: PlacedReader,
    transactions: int,
    timeout: float,
    profile: Path | None = None,
    others: Sequence[int] = (),
    label: str = "",
) -> tuple[float, int, Span]:
    """``workers`` transaction workers of one group (or each with its own of ``env``'s
    environments) until ``transactions`` OrderPlaced arrived;
    returns (transactions per second between the first and the last event, duplicates,
    and the :class:`Span`: the workers' CPU and that of ``others`` (the broker, the
    registry, this process: the rest of the pipeline) from the first event the reader
    saw to the last, start-up excluded).
    With ``profile``, each worker runs under cProfile and writes its statistics there."""
    import subprocess

    def prefix(name: str) -> list[str]:
        if profile is None:
            return [sys.executable]
        return [sys.executable, "-m", "cProfile", "-o", str(profile / f"{name}.prof")]

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
                    [*prefix(f"tx-{label}-{i}"), "-m", "bizevents", "translate", TX_FLAG],
                    env={**worker_env, "BIZEVENTS_STATE_DIR": str(log_dir / f"state-{label}-{i}")},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=REPO,
                )
            )

    def sample(seen: int) -> tuple[float, float, float, int]:
        workers_cpu = sum(cpu_seconds(p.pid) for p in processes)
        return workers_cpu, cpu_of(others), time.monotonic(), seen

    #: the first sample, once the reader saw an event
    first: list[tuple[float, float, float, int]] = []

    def alive(seen: int) -> None:
        for process, log in zip(processes, logs, strict=True):
            if process.poll() is not None:
                sys.exit(f"a worker exited {process.returncode}: {log.read_text()[-3000:]}")
        if seen and not first:
            first.append(sample(seen))

    try:
        stamps, ids = reader.read(transactions, time.monotonic() + timeout, alive)
        last = sample(len(set(ids)))
    finally:
        kit.stop_processes(processes)
    window = (max(stamps) - min(stamps)) / 1000.0
    begin = first[0]
    span = Span(last[0] - begin[0], last[1] - begin[1], last[2] - begin[2], last[3] - begin[3])
    return (transactions - 1) / window, len(ids) - len(set(ids)), span


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
    stack_pids: Sequence[int] = (),
    ceiling: bool = False,
) -> list[str]:
    """Lines: changes/s in and events/s out through Kafka, one worker and ``workers``.

    With ``stack_pids`` (the broker's and the registry's), also what the whole pipeline
    spends per change (workers, broker, registry and this process's reader) and so the
    cores a rate needs: one worker's rate times the target ratio needs that many cores at
    the least, however the work were shared.

    With ``ceiling``, also ``workers`` workers each alone on a copy of the transactions
    under its own server name (its own topics, its own group): no member reads what
    another translates, which is the most any design of members that read only their
    share of the changes could reach on this machine."""
    import uuid

    tag = uuid.uuid4().hex[:8]
    server = f"benchtx{tag}"
    copies = [f"{server}c{i}" for i in range(1, workers)] if ceiling else []
    transactions = max(changes // 5, 2)
    started = time.perf_counter()
    written = fill_technical(bootstrap, registry_url, server, transactions)
    per_tx = written / transactions
    lines = [
        f"technical topics {server}.store.orders/order_items: {written:,} changes in "
        f"{transactions:,} transactions (written in {time.perf_counter() - started:.1f}s)"
    ]
    for copy in copies:
        fill_technical(bootstrap, registry_url, copy, transactions)
        lines.append(f"the same under {copy}, for the ceiling")
    env = worker_env(bootstrap, registry_url, server, tag, transactions)
    reader = PlacedReader(bootstrap, server)
    others = [*stack_pids, os.getpid()]
    rates: dict[str, float] = {}

    def group(name: str, prefix: str = server) -> dict[str, str]:
        return {
            **env,
            "BIZEVENTS_TRANSLATE__TOPIC_PREFIX": prefix,
            "BIZEVENTS_TRANSACTIONS__GROUP_ID": f"bench-tx-{name}-{tag}",
            "BIZEVENTS_TRANSLATE__GROUP_ID": f"bench-tx-{name}-{tag}",
        }

    def measured(label: str, title: str, envs: list[dict[str, str]], reading: PlacedReader) -> None:
        n = len(envs)
        expected = transactions * len(reading.servers)
        rate, duplicates, span = run_workers(
            envs, n, tmp, reading, expected, timeout, profile, others, label
        )
        rates[label] = rate
        # CPU per change says what the load of others' processes hides: the rate
        # one worker would reach with a core of its own
        changes_in = span.transactions * per_tx
        per_cpu = changes_in / span.workers_cpu if span.workers_cpu > 0 else float("nan")
        lines.append(
            f"{title}: {rate * per_tx:,.0f} changes/s in, "
            f"{rate:,.0f} events/s out ({duplicates} duplicates); "
            f"per worker / {TX_TARGET:,}/s target: {rate * per_tx / n / TX_TARGET:.2f}; "
            f"{per_cpu:,.0f} changes per worker CPU-second "
            f"({span.workers_cpu:.1f} CPU-s for {changes_in:,.0f} changes)"
        )
        if stack_pids and changes_in and span.seconds > 0:
            pipeline = (span.workers_cpu + span.others_cpu) / changes_in
            lines.append(
                f"    the whole pipeline over {span.seconds:.1f}s: {span.workers_cpu:.1f} "
                f"CPU-s in the worker{'s' if n > 1 else ''}, {span.others_cpu:.1f} in the "
                f"broker, registry and reader; {pipeline * 1e6:,.1f} CPU-µs per change; "
                f"{(span.workers_cpu + span.others_cpu) / span.seconds:.2f} cores busy"
            )
            if label == "1":
                needs = pipeline * rate * per_tx * SCALE_TARGET
                lines.append(
                    f"    {SCALE_TARGET} times this rate needs at least {needs:.2f} cores "
                    f"at this CPU per change (the machine has {os.cpu_count()})"
                )

    try:
        measured("1", "(d) 1 transaction worker (orders@3, through Kafka)", [group("1")], reader)
        if workers > 1:
            title = f"(e) {workers} transaction workers (orders@3, through Kafka)"
            measured(str(workers), title, [group(str(workers))] * workers, reader)
        if copies:
            alone = PlacedReader(bootstrap, server, *copies)
            alone.positions = dict(reader.positions)  # after the runs above
            try:
                title = (
                    f"(f) ceiling: {workers} workers, each alone on its own copy of the "
                    "transactions (own topics, own group)"
                )
                envs = [group(f"alone-{i}", prefix) for i, prefix in enumerate([server, *copies])]
                measured("ceiling", title, envs, alone)
            finally:
                alone.close()
    finally:
        reader.close()
    if workers > 1:
        scale = rates[str(workers)] / rates["1"]
        lines.append(
            f"{workers} workers / one: {scale:.2f} (target ≥ {SCALE_TARGET}: "
            f"{'met' if scale >= SCALE_TARGET else 'MISSED'}; {os.cpu_count()} cores, "
            "shared with the broker)"
        )
    if copies:
        lines.append(
            f"ceiling / one: {rates['ceiling'] / rates['1']:.2f} ({workers} members that never "
            "read what another translates, the most a design of members reading only their "
            f"share could reach here; target {SCALE_TARGET})"
        )
        lines.append(
            f"pure Python in two processes / one, without Kafka: {cores_divide():.2f} "
            f"(how far this machine's {os.cpu_count()} cores divide CPU work)"
        )
    one = rates["1"] * per_tx
    lines.append(
        f"one worker / {TX_TARGET:,} changes/s target: {one / TX_TARGET:.2f} "
        f"({'met' if one >= TX_TARGET else 'MISSED'})"
    )
    return lines
