"""Translator throughput: Avro in → Avro out in one worker, against a bare passthrough.

Fills a 4-partition technical topic with N Confluent-Avro Debezium envelopes of the
store's ``orders`` table (orders placed, paid, touched, shipped: 3 of 4 give events,
1 of 4 is dropped), then runs on the same broker and topic, one after the other:

(a) a bare consume→produce passthrough: the worker's own lean Faust path (same
    aiokafka client, block size, batching and commit-after-ack), copying bytes;
(b) one ``bizevents translate`` worker (``orders@2``), as a subprocess;
(c) with ``--workers N``, N such workers in one consumer group (the scale-out path).

Each figure is input records per second, once the group has committed them all:
from the first block a worker receives to the acknowledgement of the last record's
outputs (group join excluded), read from the workers' own metrics endpoints. Prints
them, the ratio to the target (50,000/s) and worker/passthrough (target ≥ 0.6), the
worker's RSS, and the translation core alone (no Kafka) for comparison, with the
transaction path's core (orders@3 over whole transactions, bench/translate_tx.py).

    .venv/bin/python bench/translate.py                    # private stack on free ports
    .venv/bin/python bench/translate.py --records 200000 --stack-json endpoints.json
    .venv/bin/python bench/translate.py --workers 2
    .venv/bin/python bench/translate.py --broker kafka     # on Apache Kafka (default tansu)
    .venv/bin/python bench/translate.py --broker both      # 3 runs on each, side by side
    .venv/bin/python bench/translate.py --transactions   # orders@3 through Kafka, 1 and 2 workers
    .venv/bin/python bench/translate.py --transactions --partitions 4 --runs 1
    .venv/bin/python bench/translate.py --transactions --by-partition  # members own partitions
    .venv/bin/python bench/translate.py --transactions --ceiling  # and 2 on disjoint copies
    .venv/bin/python bench/translate.py --parking-overhead 3  # parking on/off, alternately
    .venv/bin/python bench/translate.py --shadow         # orders@2 in the shadow of orders@1

``--shadow`` runs the worker with ``orders@1`` live, with ``orders@2`` (the story's fix)
in its shadow (its events compared, docs/shadow.md) and without, alternately, three
times each, and prints both medians and their ratio (target ≥ 0.6).

``--transactions`` measures the transaction path instead (bench/translate_tx.py,
``through_kafka``): orders@3 over the store's orders and order items, routed by order
id over 4 and then 8 technical partitions (``--partitions``), half the transactions
placing two orders; one worker and two in one group, alternately, ``--runs`` times:
changes/s in and CPU-seconds per 100,000 changes of the workers, the broker, the
registry and the bench's reader, apart; then medians with spread and two ÷ one of
the workers' CPU (target ≤ 1.15) with the throughput ratio beside it, and which
worker path ran. With ``--ceiling``, also two workers each alone on its own copy of
the transactions (own topics, own group): no member reads what the other translates,
the most any design of members that read only their share could reach on this
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import kit  # noqa: E402

TARGET = 50_000
RATIO_TARGET = 0.6  # DESIGN.md
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def envelopes(server: str, registry_url: str, n: int) -> list[tuple[bytes | None, bytes | None]]:
    """N encoded changes: orders placed, then paid, touched (updated_at only), shipped."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from tests.store_technical import order_change, registered_orders_encoder

    encoder = registered_orders_encoder(server, SchemaRegistryClient({"url": registry_url}))
    orders = n // 4
    rows: dict[int, dict[str, Any]] = {}
    out: list[tuple[bytes | None, bytes | None]] = []
    lsn = 1_000_000
    for step in ("c", "paid", "touch", "shipped"):
        for order_id in range(1, orders + 1):
            lsn += 16
            before = rows.get(order_id)
            if step == "c":
                after = {
                    "id": order_id,
                    "customer_id": order_id % 997,
                    "status": "pending",
                    "total": Decimal(order_id % 500) + Decimal("0.99"),
                    "currency": "EUR",
                    "placed_at": T0 + timedelta(seconds=order_id),
                    "shipped_at": None,
                    "tracking_number": None,
                    "updated_at": T0 + timedelta(seconds=order_id),
                }
            elif step == "touch":
                assert before is not None
                after = dict(before, updated_at=before["updated_at"] + timedelta(minutes=1))
            elif step == "shipped":
                assert before is not None
                after = dict(
                    before,
                    status="shipped",
                    tracking_number=f"TRK{order_id:08d}",
                    shipped_at=T0 + timedelta(days=1),
                    updated_at=T0 + timedelta(days=1),
                )
            else:
                assert before is not None
                after = dict(before, status=step, updated_at=before["updated_at"] + timedelta(1))
            rows[order_id] = after
            change = order_change(
                server, "c" if step == "c" else "u", before, after, lsn=lsn, tx_id=lsn // 64
            )
            out.append(encoder.encode(change))
    return out


def create_topics(bootstrap: str, topics: Sequence[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions) for t in topics]).values():
        future.result(30)


def fill(bootstrap: str, topic: str, records: Sequence[tuple[bytes | None, bytes | None]]) -> None:
    from tests.kafka import produce

    produce(bootstrap, topic, records)


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        found[name.split("{", 1)[0]] = found.get(name.split("{", 1)[0], 0.0) + float(value)
    return found


def rss_kb(pid: int) -> tuple[int, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    """How many records of ``topic`` the group has committed, over all partitions (0
    while Kafka's coordinator of the group is still moving or loading)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
        return sum(max(tp.offset, 0) for tp in tps)
    except KafkaException as exc:
        moving = (
            KafkaError.NOT_COORDINATOR,
            KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            KafkaError.COORDINATOR_NOT_AVAILABLE,
        )
        if exc.args[0].code() not in moving:
            raise
        return 0
    finally:
        consumer.close()


def measure(
    name: str,
    commands: Sequence[tuple[list[str], dict[str, str]]],
    records: int,
    done: Callable[[], bool],
    log_dir: Path,
    timeout: float,
) -> tuple[float, tuple[int, int]]:
    """Run workers of one group until ``done()``; returns (records/s, largest (rss, peak) kB).

    The rate is ``records`` over the time from the first block any of them received to
    the last acknowledgement of any, read from their metrics endpoints.
    """
    logs = [log_dir / f"{name.replace(' ', '-')}-{i}.log" for i in range(len(commands))]
    processes = []
    for (command, env), log in zip(commands, logs, strict=True):
        with open(log, "wb") as out:
            processes.append(
                subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
            )
    try:
        urls: list[str | None] = [None] * len(processes)
        deadline = time.monotonic() + timeout
        while True:
            for process, log in zip(processes, logs, strict=True):
                if process.poll() is not None:
                    sys.exit(f"{name} exited {process.returncode}: {log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                sys.exit(f"{name}: not done within {timeout}s: {logs[0].read_text()[-3000:]}")
            for i, log in enumerate(logs):
                for line in log.read_text().splitlines() if urls[i] is None else ():
                    if '"metrics endpoint"' in line:
                        urls[i] = json.loads(line)["url"]
            if all(urls) and done():
                scraped = [scrape(url) for url in urls if url]
                seconds = max(
                    m.get("bizevents_translate_last_ack_timestamp_seconds", 0) for m in scraped
                ) - min(
                    m["bizevents_translate_first_block_timestamp_seconds"]
                    for m in scraped
                    if m.get("bizevents_translate_first_block_timestamp_seconds")
                )
                memory = [rss_kb(process.pid) for process in processes]
                return records / seconds, max(memory, key=lambda m: m[1])
            time.sleep(0.2)
    finally:
        kit.stop_processes(processes)


def stack_pids(stack: Any) -> dict[str, int]:
    """The private stack's broker and registry, by name: their pids."""
    return {
        h.name: h.started.pid
        for h in stack.status()
        if h.started and h.name in ("broker", "registry")
    }


def passthrough_child() -> None:
    """Role (a): the worker's lean path with a processor that copies bytes."""
    from bizevents.plumbing.logging import configure_logging
    from bizevents.settings import load_settings
    from bizevents.translators.metrics import WorkerStats, serve_metrics
    from bizevents.translators.pipeline import OutRecord, Result
    from bizevents.translators.worker import build_app, run_worker

    settings = load_settings()
    configure_logging("INFO", "json")
    source, sink = os.environ["BENCH_SOURCE"], os.environ["BENCH_SINK"]

    def copy(topic: str, partition: int, records: Sequence[Any]) -> Result:
        return Result(
            records=[OutRecord(sink, r.key, r.value, list(r.headers), "", "-") for r in records]
        )

    stats = WorkerStats(settings.translate.group_id)
    _, port = serve_metrics(stats, "127.0.0.1", 0)
    import structlog

    structlog.get_logger("bench").info("metrics endpoint", url=f"http://127.0.0.1:{port}/metrics")
    datadir = Path(tempfile.mkdtemp(prefix="bench-passthrough-"))
    run_worker(build_app(settings.runtime(), [source], copy, stats, datadir))


def core_only(
    server: str,
    registry_url: str,
    records: Sequence[tuple[bytes | None, bytes | None]],
    parking: bool = False,
) -> float:
    """The translation core alone on 20,000 of the records (no Kafka): the ceiling. Run as
    the worker runs it: 1,000 records at a time, results dropped, the collector settled.
    The records are taken evenly from the whole topic, so they hold its mix of changes
    (its first 20,000 are all inserts). ``parking``: with parking on, nothing parked."""
    from bizevents_store.translators import orders_v2
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from bizevents.contracts.serde import BusinessSerializer
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.plumbing.process import settle_collector
    from bizevents.translators.pipeline import Pipeline, SourceRecord

    client = SchemaRegistryClient({"url": registry_url})
    schemas: dict[int, str] = {}

    def lookup(schema_id: int) -> str:
        if schema_id not in schemas:
            schemas[schema_id] = str(client.get_schema(schema_id).schema_str)
        return schemas[schema_id]

    from bizevents.plumbing.parking import ParkedKeys

    pipeline = Pipeline(
        [orders_v2],
        AutoDecoder(lookup),
        BusinessSerializer(client),
        parking=ParkedKeys() if parking else None,
        parked_topic="bench.parked",
    )
    topic = f"{server}.store.orders"
    step = max(1, len(records) // 20_000)
    sample = [SourceRecord(topic, 0, i, k, v) for i, (k, v) in enumerate(records[::step][:20_000])]
    pipeline.process(sample[:200])
    settle_collector()
    chunks = [sample[i : i + 1000] for i in range(0, len(sample), 1000)]
    started = time.perf_counter()
    for chunk in chunks:
        pipeline.process(chunk)
    return len(sample) / (time.perf_counter() - started)


SHADOW_TARGET = 0.6


def shadow_bench(translate: Callable[..., tuple[float, tuple[int, int]]]) -> None:
    """One worker running orders@1 live, without a shadow and with orders@2 (the story's
    fix of its status mapping) in its shadow, alternately; the shadow's events are
    compared, not written (translate.shadow_output's default, ``count``)."""
    import statistics

    live = {"BIZEVENTS_TRANSLATORS": json.dumps({"orders": 1})}
    shadow = {**live, "BIZEVENTS_TRANSLATE__SHADOW": json.dumps(["orders@2"])}
    without: list[float] = []
    beside: list[float] = []
    for run in range(3):
        without.append(translate(1, extra=live)[0])
        beside.append(translate(1, extra=shadow)[0])
        print(f"run {run + 1}: without {without[-1]:,.0f}/s, with a shadow {beside[-1]:,.0f}/s")
    plain, shadowed = statistics.median(without), statistics.median(beside)
    print(
        f"worker (orders@1) without a shadow: {plain:,.0f} records/s (median of 3, "
        f"{min(without):,.0f}-{max(without):,.0f})"
    )
    print(
        f"worker with orders@2 in the shadow of orders@1: {shadowed:,.0f} records/s (median of "
        f"3, {min(beside):,.0f}-{max(beside):,.0f})"
    )
    ratio = shadowed / plain
    print(
        f"with / without: {ratio:.2f} (target ≥ {SHADOW_TARGET}: "
        f"{'met' if ratio >= SHADOW_TARGET else 'MISSED'})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--poll", type=int, default=5_000, help="translate.max_poll_records")
    parser.add_argument("--stack-json", type=Path, help="endpoints of a running stack")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument(
        "--workers", type=int, default=1, help="also run N workers in one group (scale-out)"
    )
    parser.add_argument(
        "--transactions",
        action="store_true",
        help="the transaction path instead (orders@3 through Kafka, one and two workers)",
    )
    parser.add_argument(
        "--shadow",
        action="store_true",
        help="the worker with orders@2 in the shadow of orders@1, against without (3 runs each)",
    )
    parser.add_argument(
        "--parking-overhead",
        type=int,
        metavar="N",
        help="only the worker, N times with parking off and on alternately "
        "(docs/parking.md: nothing parked, at most 3 %% slower than off)",
    )
    parser.add_argument(
        "--profile", type=Path, help="with --transactions: cProfile each worker into this folder"
    )
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="with --transactions: also two workers each alone on its own copy of the "
        "transactions (what members reading only their share could reach at best)",
    )
    parser.add_argument("--role", choices=["bench", "passthrough"], default="bench")
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="with a choice of both: runs with each choice; with --transactions: runs of "
        "one worker and of two, alternately, per partition count",
    )
    parser.add_argument(
        "--by-partition",
        action="store_true",
        help="with --transactions: the workers with transactions.by_partition (members "
        "read only their technical partitions; the bench says which path ran)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        nargs="+",
        default=[4, 8],
        help="with --transactions: the technical topics' partition counts, each measured",
    )
    kit.broker_option(parser)
    args = parser.parse_args()
    if args.role == "passthrough":
        passthrough_child()
        return
    if args.broker == "both":
        if args.transactions or args.shadow or args.parking_overhead or args.stack_json:
            parser.error("--broker both runs the worker's figures on private stacks only")
        kit.both_brokers(
            {
                "passthrough records/s": None,
                "worker records/s": kit.Target(TARGET),
                "worker / passthrough": kit.Target(RATIO_TARGET),
                "worker peak RSS MB": kit.Target(300, at_most=True),
            },
            runs=args.runs,
        )
        return

    with kit.bench_stack("bench-translate-", args.stack_json, broker=args.broker) as (
        endpoints,
        tmp,
        stack,
    ):
        tag = uuid.uuid4().hex[:8]
        server = f"bench{tag}"
        source = f"{server}.store.orders"
        sink = f"bench.passthrough.{tag}"
        bootstrap = endpoints.bootstrap_servers
        if args.transactions:
            from translate_tx import through_kafka  # bench/translate_tx.py

            workers = max(args.workers, 2)
            # the broker's and the registry's pids: their CPU per change, apart
            pids = {} if stack is None else stack_pids(stack)
            speed = kit.python_speed()
            for line in through_kafka(
                bootstrap,
                endpoints.registry_url,
                args.records,
                workers,
                args.timeout,
                tmp,
                args.profile,
                pids,
                args.ceiling,
                args.partitions,
                args.runs,
                args.by_partition,
            ):
                print(line, flush=True)
            print(kit.speed_line(speed, kit.python_speed()))
            return
        create_topics(bootstrap, [source, sink], 4)
        started = time.perf_counter()
        records = envelopes(server, endpoints.registry_url, args.records)
        encoded_s = time.perf_counter() - started
        started = time.perf_counter()
        fill(bootstrap, source, records)
        print(
            f"technical topic {source}: {len(records):,} Avro envelopes "
            f"(encoded in {encoded_s:.1f}s, produced in {time.perf_counter() - started:.1f}s)"
        )
        base_env = {
            **os.environ,
            "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
            "BIZEVENTS_REGISTRY__URL": endpoints.registry_url,
            "BIZEVENTS_TRANSLATE__MAX_POLL_RECORDS": str(args.poll),
            "BIZEVENTS_LOG_FORMAT": "json",
            "BIZEVENTS_LOG_LEVEL": "INFO",
        }

        def group_done(group: str) -> Callable[[], bool]:
            return lambda: committed(bootstrap, group, source, 4) >= len(records)

        runs = iter(range(1_000_000))

        def translate(
            workers: int, parking: bool = True, extra: dict[str, str] | None = None
        ) -> tuple[float, tuple[int, int]]:
            group = f"bench-translate-{workers}-{next(runs)}-{tag}"
            env = {
                **base_env,
                "BIZEVENTS_TRANSLATORS": json.dumps({"orders": 2}),
                "BIZEVENTS_TRANSLATE__TOPIC_PREFIX": server,
                "BIZEVENTS_TRANSLATE__GROUP_ID": group,
                "BIZEVENTS_TRANSLATE__DEAD_LETTER_TOPIC": f"bench.dead-letter.{tag}",
                "BIZEVENTS_TRANSLATE__PARKED_TOPIC": f"bench.parked.{tag}",
                "BIZEVENTS_TRANSLATE__METRICS_PORT": "0",
                **(extra or {}),
            }
            if not parking:  # today's behaviour: no parked keys looked up, no parked topic
                env["BIZEVENTS_TRANSLATE__ON_ERROR"] = json.dumps({"orders": "dead-letter"})
            command = [sys.executable, "-m", "bizevents", "translate"]
            return measure(
                f"translate {workers}",
                [
                    (command, {**env, "BIZEVENTS_STATE_DIR": str(tmp / f"state-{group}-{i}")})
                    for i in range(workers)
                ],
                len(records),
                group_done(group),
                tmp,
                args.timeout,
            )

        if args.shadow:
            shadow_bench(translate)
            return
        if args.parking_overhead:
            rates: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.parking_overhead):
                for parking in (False, True):  # alternate: drift hits both alike
                    rate, _ = translate(1, parking)
                    rates[parking].append(rate)
                    print(f"parking {'on ' if parking else 'off'}: {rate:,.0f} records/s")
            cores: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.parking_overhead):
                for parking in (False, True):
                    rate = core_only(server, endpoints.registry_url, records, parking)
                    cores[parking].append(rate)
            for what, found in (("worker", rates), ("translation core alone", cores)):
                off, on = (sorted(found[k]) for k in (False, True))
                mid = len(off) // 2
                slower = 1 - on[mid] / off[mid]
                print(
                    f"{what}, median of {len(off)}: off {off[mid]:,.0f}/s "
                    f"({off[0]:,.0f}-{off[-1]:,.0f}), on {on[mid]:,.0f}/s "
                    f"({on[0]:,.0f}-{on[-1]:,.0f}); on is {slower:+.1%} slower (target ≤ 3 %: "
                    f"{'met' if slower <= 0.03 else 'MISSED'}; on a shared, noisy machine "
                    "single runs move by more than that)"
                )
            return

        passthrough_group = f"bench-pass-{tag}"
        rate_a, _ = measure(
            "passthrough",
            [
                (
                    [sys.executable, str(Path(__file__).resolve()), "--role", "passthrough"],
                    {
                        **base_env,
                        "BENCH_SOURCE": source,
                        "BENCH_SINK": sink,
                        "BIZEVENTS_TRANSLATE__GROUP_ID": passthrough_group,
                    },
                )
            ],
            len(records),
            group_done(passthrough_group),
            tmp,
            args.timeout,
        )
        print(f"(a) passthrough (lean Faust path, bytes copied): {rate_a:,.0f} records/s")

        rate_b, (rss, peak) = translate(1)
        print(
            f"(b) bizevents translate (orders@2, Avro in → Avro out): {rate_b:,.0f} records/s, "
            f"RSS {rss / 1024:.0f} MB (peak {peak / 1024:.0f} MB)"
        )
        if args.workers > 1:
            rate_c, _ = translate(args.workers)
            print(
                f"(c) {args.workers} bizevents translate processes in one group: "
                f"{rate_c:,.0f} records/s ({rate_c / rate_b:.2f} times one; "
                f"{os.cpu_count()} cores, shared with the broker)"
            )
        core = core_only(server, endpoints.registry_url, records)
        print(f"    translation core alone (decode, translate, stamp, serialize): {core:,.0f}/s")
        from translate_tx import report as transaction_report  # bench/translate_tx.py

        for line in transaction_report(endpoints.registry_url, 4_000, 3):
            print(line)
        ratio = rate_b / rate_a
        print(
            f"worker / {TARGET:,}/s target: {rate_b / TARGET:.2f} "
            f"({'met' if rate_b >= TARGET else 'MISSED'})"
        )
        print(
            f"worker / passthrough: {ratio:.2f} (target ≥ {RATIO_TARGET}: "
            f"{'met' if ratio >= RATIO_TARGET else 'MISSED'})"
        )
        print(f"worker RSS ≤ 300 MB: {'met' if peak <= 300 * 1024 else 'MISSED'}")
        kit.report_figures(
            {
                "passthrough records/s": rate_a,
                "worker records/s": rate_b,
                "worker / passthrough": ratio,
                "worker peak RSS MB": peak / 1024,
            }
        )


if __name__ == "__main__":
    main()
