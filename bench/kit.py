"""What the benchmarks share: their stack on either broker, their PostgreSQL load, a
probe's latencies, an incremental snapshot timed, worker processes stopped, the medians
printed, and a bench run on both brokers alternately with its figures side by side.

A benchmark puts the checkout first on ``sys.path`` and imports ``bench.kit``; the
project's own modules are imported inside the functions, as in the scripts, so that
``--help`` answers at once.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

#: Rows changed per transaction by a RateWriter.
PER_TX = 50


#: The brokers a bench runs on (``--broker``), in the order ``both`` starts with.
BROKERS = ("tansu", "kafka")
#: What starts the line of a run's figures, which ``--broker both`` reads from each run.
FIGURES = "bench figures: "


def broker_option(
    parser: argparse.ArgumentParser, default: str = "tansu", *, both: bool = True
) -> None:
    """``--broker``, ``default`` when not given; ``both`` where the bench can run on each
    broker alternately (:func:`both_brokers`)."""
    if both:
        choices = [*BROKERS, "both"]
        what = "the embedded Tansu, Apache Kafka (the dev stack's --broker kafka), or both: "
        what += "--runs runs on each alternately, side by side"
    else:
        choices = list(BROKERS)
        what = "the embedded Tansu or Apache Kafka (the dev stack's --broker kafka)"
    parser.add_argument(
        "--broker",
        choices=choices,
        default=default,
        help=f"the private stack's broker: {what} (default {default})",
    )


def python_speed() -> float:
    """Seconds this process takes for ten million additions of pure Python: this
    machine's speed at the moment. A two-core machine that shares its host ran the same
    work at half its usual speed on some days, and every figure with it."""
    started = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.perf_counter() - started


def speed_line(before: float, after: float) -> str:
    """The machine's speed around a bench's runs (:func:`python_speed`)."""
    return (
        f"this machine: ten million pure-Python additions in {before:.2f} s before the "
        f"runs, {after:.2f} s after (the figures above move with it)"
    )


def python(profile: Path | None, name: str) -> list[str]:
    """This Python, under cProfile writing ``profile/name.prof`` when ``profile`` is given."""
    if profile is None:
        return [sys.executable]
    profile.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-m", "cProfile", "-o", str(profile / f"{name}.prof")]


def dev_settings(broker: Literal["tansu", "kafka"], *, mysql: bool = False) -> Any:
    """A private stack's settings: every port free, ``broker`` (tansu or kafka)."""
    from bizevents.settings import DevSettings

    return DevSettings(
        broker_port=0,
        registry_port=0,
        postgres_port=0,
        mysql=mysql,
        mysql_port=0,
        broker=broker,
    )


@contextmanager
def bench_stack(
    prefix: str,
    stack_json: Path | None = None,
    *,
    mysql: bool = False,
    broker: Literal["tansu", "kafka"] = "tansu",
) -> Iterator[tuple[Any, Path, Any]]:
    """The endpoints of the stack in ``stack_json``, or of a private one on free ports
    (with MariaDB if ``mysql``) on ``broker``, a scratch folder, and the private DevStack
    (None with ``stack_json``); the private stack and the folder gone on leaving."""
    from bizevents.devstack import DevStack, Endpoints

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    stack = None
    try:
        if stack_json is not None:
            endpoints = Endpoints(**json.loads(stack_json.read_text()))
        else:
            stack = DevStack(tmp / "stack", dev_settings(broker, mysql=mysql))
            stack.up()
            endpoints = stack.endpoints()
        yield endpoints, tmp, stack
    finally:
        if stack is not None:
            stack.down(purge=True)
        shutil.rmtree(tmp, ignore_errors=True)


def holds_a_share(log: Path) -> bool:
    """Whether a transaction worker's last ``assembling`` line in its JSON log names
    partitions it owns (every member holding one: the group has settled)."""
    owned: list[int] = []
    for line in log.read_text().splitlines():
        if '"assembling"' in line:
            owned = json.loads(line).get("partitions") or []
    return bool(owned)


def generate_pg(dsn: str, table: str, changes: int, tx_rows: int) -> None:
    """Half ``changes`` inserts into ``table``, then updates of the same rows, in
    transactions of ``tx_rows`` rows."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = False
    with conn.cursor() as cur:
        for insert, first, last in change_batches(changes, tx_rows):
            if insert:
                cur.execute(
                    f"INSERT INTO {table} SELECT g, 'customer ' || g, g %% 97, g * 1.25, now(), "
                    "g %% 2 = 0 FROM generate_series(%s, %s) g",
                    (first, last),
                )
            else:
                cur.execute(UPDATE_BATCH.format(table), (first, last))
            conn.commit()
    conn.close()


#: A batch's updates (:func:`change_batches`), the same SQL on both sources.
UPDATE_BATCH = "UPDATE {} SET qty = qty + 1, price = price + 0.01 WHERE id BETWEEN %s AND %s"


def change_batches(changes: int, tx_rows: int) -> Iterator[tuple[bool, int, int]]:
    """Half ``changes`` inserts of rows 1 on, then updates of the same rows, as
    transactions of ``tx_rows`` rows: each ``(insert, first id, last id)``."""
    inserts = changes // 2
    for first in range(1, inserts + 1, tx_rows):
        yield True, first, min(first + tx_rows - 1, inserts)
    for first in range(1, changes - inserts + 1, tx_rows):
        yield False, first, min(first + tx_rows - 1, changes - inserts)


class RateWriter(threading.Thread):
    """Changes ``rate`` rows/s of a big table in transactions of PER_TX rows and a probe
    row about 50 times a second, through ``step(cursor, ids, probe_id or None)`` on a
    connection from ``connect()``."""

    def __init__(
        self,
        connect: Callable[[], Any],
        step: Callable[[Any, list[int], int | None], None],
        rows: int,
        rate: int,
    ) -> None:
        super().__init__(daemon=True)
        self.connect, self.step, self.rows, self.rate = connect, step, rows, rate
        self.stop_event = threading.Event()
        self.changes = 0

    def run(self) -> None:
        conn = self.connect()
        rnd = random.Random(1)
        interval = PER_TX / self.rate
        next_at = time.perf_counter()
        n = 0
        with conn.cursor() as cur:
            while not self.stop_event.is_set():
                ids = [rnd.randrange(1, self.rows + 1) for _ in range(PER_TX)]
                n += 1
                probe = (
                    rnd.randrange(1, 101) if n % max(1, self.rate // PER_TX // 50) == 0 else None
                )
                self.step(cur, ids, probe)
                self.changes += PER_TX
                next_at += interval
                delay = next_at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -0.1:
                    next_at = time.perf_counter()  # behind: no burst to catch up
        conn.close()


def probe_latencies(
    endpoints: Any, topic: str, sent_ms: Callable[[Any], int | None]
) -> list[tuple[int, float]]:
    """(sent ms, latency s) of every streamed update on ``topic``; ``sent_ms`` reads when
    a change was made from its ChangeEvent (None: not a probe change)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from bizevents.contracts.envelope import ChangeEvent
    from bizevents.contracts.technical import AvroDecoder

    registry = SchemaRegistryClient({"url": endpoints.registry_url})
    decoder = AvroDecoder(lambda i: registry.get_schema(i).schema_str)
    consumer = Consumer(
        {
            "bootstrap.servers": endpoints.bootstrap_servers,
            "group.id": "bench",
            "enable.partition.eof": True,
        }
    )
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    ends, out = 0, []
    while ends < len(meta.partitions):
        for m in consumer.consume(1000, timeout=5):
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"reading {topic}: {err}")
                ends += 1
                continue
            d = decoder.decode(m.key(), m.value())
            sent = sent_ms(d) if isinstance(d, ChangeEvent) and d.op == "u" else None
            if sent:
                out.append((sent, (m.timestamp()[1] - sent) / 1000))
    consumer.close()
    return out


def p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def capture_thread(
    capture: Callable[..., Any], config: Any, dsn: str, endpoints: Any, slot: str, state_dir: Path
) -> tuple[Any, Any, threading.Thread]:
    """A capture runner (``capture``: PostgresCapture or MysqlCapture) of ``config`` on the
    stack's ``endpoints``, its stats under ``slot``, and the daemon thread that runs it,
    not started."""
    from bizevents.capture.metrics import CaptureStats
    from bizevents.capture.postgres.runner import CaptureEndpoints

    stats = CaptureStats(config.server, slot)
    kafka = {"bootstrap.servers": endpoints.bootstrap_servers}
    where = CaptureEndpoints(dsn, kafka, {"url": endpoints.registry_url}, state_dir)
    runner = capture(config, where, stats=stats)
    return runner, stats, threading.Thread(target=runner.run, daemon=True)


def wait_snapshot_done(stats: Any, thread: threading.Thread) -> None:
    """Until the capture ``thread`` runs finished its initial snapshot."""
    while not stats.snapshot_done:
        assert thread.is_alive(), "capture stopped"
        time.sleep(0.01)


def incremental_rate(
    kafka: dict[str, Any], config: Any, runner: Any, thread: threading.Thread, table: str, rows: int
) -> float:
    """Rows/s of an incremental snapshot of ``table``: from its signal sent to the
    runner's ledger empty again."""
    from confluent_kafka import Producer

    from bizevents.capture.core.signals import SignalTopic, new_signal

    producer = Producer(kafka)
    sent_at = time.perf_counter()
    SignalTopic(kafka, config.signal_topic_name, config.server).send(
        producer, new_signal("execute-snapshot", (table,))
    )
    producer.flush(10)
    while not runner.ledger.queue:
        assert thread.is_alive(), "capture stopped"
        time.sleep(0.005)
    while runner.ledger.queue:
        assert thread.is_alive(), "capture stopped"
        time.sleep(0.01)
    return rows / (time.perf_counter() - sent_at)


def stop_processes(processes: Iterable[subprocess.Popen[Any]]) -> None:
    """Terminate every process, then wait for each (killed after 30 s)."""
    processes = list(processes)
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def snapshot_parser(doc: str, rows: int, rate: int, load_s: float) -> argparse.ArgumentParser:
    """The options both snapshot benches take."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rows", type=int, default=rows)
    parser.add_argument("--rate", type=int, default=rate, help="stream changes/s under load")
    parser.add_argument("--load-seconds", type=float, default=load_s)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chunk-rows", type=int, default=1024, help="incremental chunk size")
    return parser


def capture_parser(doc: str) -> argparse.ArgumentParser:
    """The options both capture benches take."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--tx-rows", type=int, default=1_000)
    parser.add_argument("--profile", type=Path, help="write a cProfile of the capture run")
    parser.add_argument(
        "--no-transaction-metadata",
        action="store_true",
        help="capture without transaction blocks and BEGIN/END records (the cost of them)",
    )
    return parser


def each_run(count: int, one_run: Callable[[int], dict[str, float]]) -> list[dict[str, float]]:
    """``one_run(n)`` for n in range(count), each run's figures printed as it ends."""
    runs = []
    for n in range(count):
        result = one_run(n)
        runs.append(result)
        print(f"run {n + 1}: " + ", ".join(f"{k} {v:,.1f}" for k, v in result.items()), flush=True)
    return runs


def stopped_probe(
    writer: RateWriter, endpoints: Any, topic: str, sent_ms: Callable[[Any], int | None]
) -> list[tuple[int, float]]:
    """The writer stopped, then its probe's latencies once the stream has caught up."""
    writer.stop_event.set()
    writer.join()
    time.sleep(3)
    return probe_latencies(endpoints, topic, sent_ms)


def probe_figures(
    lat: list[tuple[int, float]], before: tuple[int, int], during: tuple[int, int], name: str
) -> dict[str, float]:
    """The probe's p99 (ms) and count in the window ``before`` the snapshot (called
    ``name``) and ``during`` it, each window ``(from_ms, to_ms)`` both ends included."""
    out: dict[str, float] = {}
    for label, (lo, hi) in ((name, before), ("during", during)):
        seconds = [s for ms, s in lat if lo <= ms <= hi]
        out[f"stream p99 {label} ms"] = p99(seconds) * 1000
        out[f"probe changes {label}"] = float(len(seconds))
    return out


def print_runs(runs: list[dict[str, float]], title: str, digits: int = 0) -> None:
    """``title`` and each figure's median of the runs with min-max (the ``probe`` counts
    left out)."""
    print(title)
    for key in runs[0]:
        if key.startswith("probe"):
            continue
        values = [r[key] for r in runs]
        print(
            f"  {key:32} {statistics.median(values):>10,.{digits}f} "
            f"({min(values):,.{digits}f}-{max(values):,.{digits}f})"
        )


@dataclass(frozen=True)
class Target:
    """DESIGN.md's target for a figure: a floor, or a ceiling (``at_most``)."""

    value: float
    at_most: bool = False

    def met(self, figure: float) -> bool:
        return figure <= self.value if self.at_most else figure >= self.value


def report_figures(figures: dict[str, float]) -> None:
    """The run's headline figures on one line, for ``--broker both`` to read."""
    print(FIGURES + json.dumps(figures), flush=True)


def both_brokers(
    targets: dict[str, Target | None], runs: int = 3, child_args: Sequence[str] = ()
) -> None:
    """This bench on each broker alternately, side by side (:func:`alternately`)."""
    alternately("--broker", BROKERS, targets, runs, child_args)


def alternately(
    option: str,
    choices: Sequence[str],
    targets: dict[str, Target | None],
    runs: int = 3,
    child_args: Sequence[str] = (),
) -> None:
    """This bench run ``runs`` times with each of two ``choices`` of ``option``,
    alternately (A, B, then B, A: drift on a shared machine hits both alike), each run a
    child process with ``option`` set and ``child_args`` added; then each figure of
    ``targets`` (in that order) side by side: the median with its spread per choice,
    its ratio to the target, and the second choice's median over the first's."""
    argv, skip = [], False
    for arg in sys.argv[1:]:  # the command line without ``option``
        if skip or arg.startswith(option + "="):
            skip = False
            continue
        if arg == option:
            skip = True
            continue
        argv.append(arg)
    first, second = choices
    found: dict[str, list[dict[str, float]]] = {choice: [] for choice in choices}
    for n in range(runs):
        for choice in (first, second) if n % 2 == 0 else (second, first):
            command = [sys.executable, sys.argv[0], *argv, option, choice, *child_args]
            print(f"== run {n + 1} of {runs} with {option} {choice}", flush=True)
            with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as child:
                assert child.stdout is not None
                for line in child.stdout:
                    if line.startswith(FIGURES):
                        found[choice].append(json.loads(line[len(FIGURES) :]))
                    print(f"  [{choice}] {line}", end="", flush=True)
            if child.returncode != 0 or len(found[choice]) != n + 1:
                sys.exit(f"the run with {option} {choice} failed (exit {child.returncode})")
    print(f"median of {runs} runs each (spread), run alternately:")
    print(f"  {'figure':30} {first:>30} {second:>30} {second + '/' + first:>14}")
    for name, target in targets.items():
        cells, medians = [], []
        for choice in choices:
            values = [run[name] for run in found[choice]]
            median = statistics.median(values)
            medians.append(median)
            cell = f"{fmt(median)} ({fmt(min(values))}-{fmt(max(values))})"
            if target is not None:
                cell += f" {median / target.value:.2f}{'' if target.met(median) else '!'}"
            cells.append(cell)
        ratio = f"{medians[1] / medians[0]:.2f}" if medians[0] else "-"
        print(f"  {name:30} {cells[0]:>30} {cells[1]:>30} {ratio:>14}")
    print("  after a figure: its ratio to DESIGN.md's target (! where missed); the targets:")
    for name, target in targets.items():
        if target is not None:
            print(f"    {name}: {'≤' if target.at_most else '≥'} {fmt(target.value)}")


def fmt(value: float) -> str:
    """A figure as the benches print them: thousands whole, small ones to 2 places."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
