"""The demo: the whole flow on the embedded stack, live on the terminal.

It starts the stack (if it is not running), creates the store's tables in the local
PostgreSQL, starts ``bizevents capture postgres`` and ``bizevents translate`` as
processes of their own (as they run in production), drives a stream of store
activity, and shows the business events arriving, with the counts each translator
emitted, dropped and dead-lettered. Ctrl-C (or ``--duration``) stops it cleanly:
load first, then the worker and capture (each acknowledges what it has), then the
stack if the demo started it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from bizevents.devstack import DevStack, Endpoints, StackError
from bizevents.devstack.processes import free_port, tail
from bizevents.plumbing.errors import ConfigError
from bizevents.plumbing.framing import unframe
from bizevents.settings import Settings
from bizevents.status import ENDPOINTS_FILE
from bizevents.story import Agreement, OrderBook, Seen, describe
from bizevents.translators.api import Translator

SERVER = "demo"
SLOT = "bizevents_demo"
TABLES = ("store.customers", "store.products", "store.orders", "store.order_items")
#: The live flow's pins. orders@3 reads whole transactions (orders with their items):
#: it runs under ``bizevents translate --transactions`` beside the row worker
#: (docs/transactions.md).
PINS = {"customers": 1, "orders": 3, "products": 1}
DEAD_LETTER_TOPIC = "bizevents.dead-letter"
TRANSACTION_TOPIC = f"{SERVER}.transaction"
#: The demo's worker is the only member of its group on a loopback broker that holds
#: every JoinGroup in 1 s rounds until half the session has passed (docs/broker.md): at
#: least one round for any session, 3 with the default 6 s, 1 with 2 s. The join, from
#: the consumer's start to "partitions assigned", takes 1.0 s with 2 s (plus Faust's
#: table-manager pause of 1 s before the worker stopped it, bizevents.translators._faust).
DEMO_GROUP = {
    "BIZEVENTS_TRANSLATE__SESSION_TIMEOUT_S": "2",
    "BIZEVENTS_TRANSLATE__HEARTBEAT_INTERVAL_S": "0.5",
    "BIZEVENTS_TRANSLATE__REBALANCE_TIMEOUT_S": "2",
}


@dataclass
class Tally:
    """What the terminal shows; written by the reader thread, read by the display."""

    per_topic: Counter[str] = field(default_factory=Counter)
    #: (translator@version, the event in words), the latest last
    recent: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=10))
    #: counters of the running worker, and the sums of the workers stopped before it
    translator_counts: dict[str, dict[str, float]] = field(default_factory=dict)
    earlier_counts: dict[str, dict[str, float]] = field(default_factory=dict)
    #: business events seen per translator@version (from their lineage), live only
    per_translator: Counter[str] = field(default_factory=Counter)
    #: OrderPlaced events seen live, and those whose total is not 0.00
    orders_placed: int = 0
    orders_with_total: int = 0
    load_steps: int = 0
    book: OrderBook = field(default_factory=OrderBook)
    #: order id → status in PostgreSQL, for this run's orders
    database: dict[int, str] = field(default_factory=dict)
    #: order id → total in PostgreSQL, for this run's orders
    totals: dict[int, Decimal] = field(default_factory=dict)
    history: list[float] = field(default_factory=list)
    step: str = ""
    #: held by the load for each store action: whoever holds it pauses the store
    pause: threading.Lock = field(default_factory=threading.Lock)
    first_event_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def counts(self) -> dict[str, dict[str, float]]:
        """Per translator@version, this run's counters over every worker it started."""
        merged: dict[str, dict[str, float]] = {}
        for source in (self.earlier_counts, self.translator_counts):
            for ref, values in source.items():
                into = merged.setdefault(ref, {})
                for key, value in values.items():
                    into[key] = into.get(key, 0.0) + value
        return merged

    def retire_worker(self) -> None:
        """The running worker stops: keep its last counters in the sums."""
        self.earlier_counts = self.counts()
        self.translator_counts = {}


def _env(endpoints: Endpoints, settings: Settings, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": endpoints.bootstrap_servers,
        "BIZEVENTS_REGISTRY__URL": endpoints.registry_url,
        "BIZEVENTS_DATABASE__POSTGRES_DSN": endpoints.postgres_dsn,
        "BIZEVENTS_STATE_DIR": str(settings.state_dir.resolve()),
        "BIZEVENTS_LOG_FORMAT": "json",
        **extra,
    }


@contextmanager
def _process(
    argv: list[str], env: dict[str, str], log: Path, what: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A child process for the demo's lifetime; stopped with SIGTERM, as an operator would."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        _terminate(proc, what, log)


def _terminate(proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    """SIGTERM, as an operator stops it (killed after 60 s); an unexpected exit status
    prints the child's log tail."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.returncode not in (0, -signal.SIGTERM):
        print(f"{what} exited with {proc.returncode}; its log {log}:\n{tail(log)}", file=sys.stderr)


def _check_alive(proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    if proc.poll() is not None:
        raise StackError(
            f"{what} stopped with exit code {proc.returncode}; its log {log}:\n{tail(log)}"
        )


def store_plugin() -> tuple[list[Translator], ModuleType]:
    """The store plugin's pinned translators and its load module, found through the
    plugin's entry points (bizevents does not depend on the example it ships)."""
    from bizevents.translators.exceptions import PluginError
    from bizevents.translators.registry import discover

    try:
        pinned = discover(names=PINS).pinned(PINS)
        first = pinned[0]
        func = getattr(first, "tx_func", None) or first.func  # a transaction translator's own
        package = func.__module__.rpartition(".")[0]
        load = importlib.import_module(f"{package}.load")
    except (PluginError, ImportError) as exc:
        raise ConfigError(
            f"the demo runs the store plugin (bizevents-store), which is not installed: "
            f"install it with `pip install -e examples/store` from a checkout of bizevents "
            f"(`uv sync` does it for development); {exc}"
        ) from exc
    return pinned, load


def _connect(dsn: str) -> Any:
    """A connection of the store's database (PostgreSQL or, by its DSN, MySQL)."""
    if dsn.startswith(("mysql://", "mariadb://")):
        from bizevents.capture.mariadb import queries as my

        return my.connect(dsn, autocommit=False)
    import psycopg2

    return psycopg2.connect(dsn)


def _prepare_database(dsn: str, store: ModuleType) -> None:
    conn = _connect(dsn)
    try:
        store.create_schema(conn, "mysql" if dsn.startswith("mysql://") else "postgresql")
    finally:
        conn.close()


def _wait_for_slot(conn: Any, stop: threading.Event) -> None:
    """The store's first writes wait for capture's replication slot: a row written
    before it exists reaches Kafka only in the snapshot, as a read the orders
    translators skip, so its order would never get an OrderPlaced."""
    deadline = time.monotonic() + 60
    while not stop.is_set() and time.monotonic() < deadline:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (SLOT,))
            found = cur.fetchone() is not None
        conn.commit()
        if found:
            return
        stop.wait(0.05)


def _load(dsn: str, rate: float, stop: threading.Event, tally: Tally, store: ModuleType) -> None:
    conn = _connect(dsn)
    if not dsn.startswith("mysql://"):
        _wait_for_slot(conn, stop)
    load = store.StoreLoad(conn, seed=int(time.time()))
    interval = 1.0 / rate
    next_at = time.monotonic()
    try:
        while not stop.is_set():
            with tally.pause:
                load.step()
            with tally.lock:
                tally.load_steps += 1
            next_at = max(next_at + interval, time.monotonic() - interval)  # no burst after a pause
            stop.wait(max(0.0, next_at - time.monotonic()))
    finally:
        conn.close()


class _Decoder:
    """Business events in the Confluent framing, decoded with their writer's schema
    (fetched from the registry by id, once)."""

    def __init__(self, registry_url: str) -> None:
        self.registry_url = registry_url.rstrip("/")
        self.schemas: dict[int, tuple[str, Any]] = {}

    def __call__(self, data: bytes) -> tuple[str, dict[str, Any]]:
        import io

        import fastavro

        schema_id, body = unframe(data)
        if schema_id not in self.schemas:
            url = f"{self.registry_url}/schemas/ids/{schema_id}"
            with urllib.request.urlopen(url, timeout=5) as response:
                text = json.load(response)["schema"]
            parsed: Any = fastavro.parse_schema(json.loads(text))
            self.schemas[schema_id] = (str(json.loads(text)["name"]).rpartition(".")[2], parsed)
        name, schema = self.schemas[schema_id]
        record = fastavro.schemaless_reader(io.BytesIO(body), schema, None)
        assert isinstance(record, dict)
        return name, record


def _read_business_topics(
    bootstrap: str,
    registry_url: str,
    topics: list[str],
    since_ms: int,
    stop: threading.Event,
    tally: Tally,
) -> None:
    """Follow the business topics in assign mode (no consumer group needed to watch),
    from their start, counting what was produced since ``since_ms``: this run's events,
    even on a stack that earlier runs used (the broker's ListOffsets cannot be trusted
    for the ends, see docs/broker.md)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bizevents-demo-view",
            "log_level": 0,
            "enable.auto.commit": False,
            "log.connection.close": False,
            "fetch.wait.max.ms": 50,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    decode = _Decoder(registry_url)
    assigned: set[tuple[str, int]] = set()
    last_refresh = 0.0
    try:
        while not stop.is_set():
            if time.monotonic() - last_refresh > 1:
                last_refresh = time.monotonic()
                metadata = consumer.list_topics(timeout=5)
                new = {
                    (t, p)
                    for t in topics
                    if t in metadata.topics
                    for p in metadata.topics[t].partitions
                } - assigned
                if new:
                    assigned |= new
                    consumer.incremental_assign([TopicPartition(t, p, 0) for t, p in sorted(new)])
            for message in consumer.consume(500, timeout=0.2):
                if message.error() is not None or message.timestamp()[1] < since_ms:
                    continue
                _show(message, decode, tally)
    finally:
        consumer.close()


def _show(message: Any, decode: _Decoder, tally: Tally) -> None:
    topic = str(message.topic())
    if topic == DEAD_LETTER_TOPIC:
        headers = {str(k): _text(v) for k, v in list(message.headers() or [])}
        line = ("dead letter", headers.get("bizevents.dlq.reason", "")[:80])
        with tally.lock:
            tally.per_topic[topic] += 1
            tally.recent.append(line)
        return
    try:
        seen = Seen.from_record(*decode(message.value()))
    except Exception as exc:  # a view: an event it cannot read is shown, never fatal
        with tally.lock:
            tally.recent.append(("?", f"{topic}: not readable ({exc})"[:100]))
        return
    label = seen.translator + (" (replay)" if seen.replay else "")
    with tally.lock:
        if not seen.replay:
            tally.per_topic[topic] += 1
            tally.per_translator[seen.translator] += 1
            if seen.contract == "OrderPlaced":
                tally.orders_placed += 1
                tally.orders_with_total += seen.fields.get("total") != 0
        if tally.first_event_at is None:
            tally.first_event_at = time.monotonic()
        tally.book.add(seen)
        tally.recent.append((label, describe(seen)))


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value or ""


def _scrape(url: str) -> dict[str, dict[str, float]]:
    """Per-translator counters from the worker's Prometheus text endpoint."""
    counts: dict[str, dict[str, float]] = {}
    with urllib.request.urlopen(url, timeout=1) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("#") or "translator=" not in line:
            continue
        name, _, rest = line.partition("{")
        labels, _, value = rest.rpartition("} ")
        translator = labels.split('translator="', 1)[1].split('"', 1)[0]
        metric = name.removeprefix("bizevents_translator_").removesuffix("_total")
        if metric in ("consumed", "emitted", "dropped", "dead_lettered"):
            counts.setdefault(translator, {})[metric] = float(value)
    return counts


SPARK = " ▁▂▃▄▅▆▇█"


def _sparkline(history: list[float], width: int = 60) -> str:
    """The whole run's agreement in ``width`` characters (evenly spaced samples)."""
    if len(history) > width:
        history = [history[i * len(history) // width] for i in range(width - 1)] + history[-1:]
    return "".join(SPARK[min(8, int(p / 100 * 8))] for p in history)


def _agreement_text(agreement: Agreement, history: list[float], totals: Agreement) -> str:
    colour = "green" if agreement.percent >= 100 else "red"
    totals_colour = "green" if totals.percent >= 100 else "red"
    return (
        f"[bold]orders: status in PostgreSQL vs the latest business event[/]  "
        f"[{colour} bold]{agreement.percent:5.1f} % agree[/]\n"
        f"[{colour}]{_sparkline(history)}[/]  {agreement.agree} agree · "
        f"{agreement.disagree} disagree · {agreement.unseen} not yet seen\n"
        f"[bold]orders: total in PostgreSQL vs the latest OrderPlaced[/]  "
        f"[{totals_colour} bold]{totals.percent:5.1f} % agree[/]"
    )


def _view(tally: Tally, topics: list[str], story: bool) -> Group:
    with tally.lock:
        counts = Table(title="per translator (this run)", title_justify="left")
        for column in ("translator", "consumed", "emitted", "dropped", "dead-lettered"):
            counts.add_column(column, justify="right" if column != "translator" else "left")
        scraped = tally.counts()
        for translator, values in sorted(scraped.items()):
            counts.add_row(
                translator,
                *(
                    f"{values.get(k, 0):.0f}"
                    for k in ("consumed", "emitted", "dropped", "dead_lettered")
                ),
            )
        for translator, seen in sorted(tally.per_translator.items()):
            if translator not in scraped:  # the transaction worker's: events seen
                counts.add_row(f"{translator} (transactions)", "", str(seen), "", "")
        per_topic = Table(
            title=f"business topics ({tally.load_steps} store actions so far; "
            f"{tally.orders_with_total} of {tally.orders_placed} OrderPlaced with a total "
            "other than 0.00)",
            title_justify="left",
        )
        per_topic.add_column("topic")
        per_topic.add_column("events", justify="right")
        for topic in topics:
            per_topic.add_row(topic, str(tally.per_topic.get(topic, 0)))
        recent = Table(title="latest events", title_justify="left")
        recent.add_column("translator")
        recent.add_column("event")
        for row in tally.recent:
            recent.add_row(*row)
        parts: list[Any] = [Text.from_markup(f"[bold cyan]{tally.step}[/]")]
        if story:
            agreement = tally.book.agreement(tally.database)
            totals = tally.book.totals_agreement(tally.totals)
            parts.append(Text.from_markup(_agreement_text(agreement, tally.history, totals)))
    return Group(*parts, counts, per_topic, recent)


class _Worker:
    """The translator worker as a process of its own, restartable with other pins."""

    def __init__(
        self, cli: list[str], env: dict[str, str], log: Path, transactions: bool = False
    ) -> None:
        self.cli, self.env, self.log = cli, env, log
        self.transactions = transactions
        self.what = "the transaction worker" if transactions else "the translator worker"
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_url = ""

    def start(self, pins: dict[str, int]) -> None:
        env = {**self.env, "BIZEVENTS_TRANSLATORS": json.dumps(pins)}
        argv = [*self.cli, "translate"]
        if self.transactions:
            argv.append("--transactions")  # it serves no metrics: its events are counted
        else:
            port = free_port("127.0.0.1")
            self.metrics_url = f"http://127.0.0.1:{port}/metrics"
            env["BIZEVENTS_TRANSLATE__METRICS_PORT"] = str(port)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    @property
    def running(self) -> bool:
        return self.proc is not None

    def check(self) -> None:
        if self.proc is not None:
            _check_alive(self.proc, self.what, self.log)

    def scrape(self) -> dict[str, dict[str, float]] | None:
        if not self.metrics_url:
            return None
        try:
            return _scrape(self.metrics_url)
        except OSError:
            return None  # still starting

    def stop(self) -> None:
        """SIGTERM, as an operator stops it: it commits what the broker acknowledged."""
        proc, self.proc = self.proc, None
        if proc is not None:
            _terminate(proc, self.what, self.log)


@dataclass(frozen=True, slots=True)
class StoryPlan:
    """The story's knobs: which versions, how long the live steps last."""

    buggy: int = 1
    #: orders@3 places each order with its true total (orders@2 fixes the statuses only)
    fixed: int = 3
    step_seconds: float = 15.0
    settle_seconds: float = 30.0


class _Stopped(Exception):
    """--duration ran out."""


def _database_orders(conn: Any, since_order: int) -> tuple[dict[int, str], dict[int, Decimal]]:
    """This run's orders in PostgreSQL: their statuses and their totals."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT id, status::text, total FROM store.orders WHERE id > %s", (since_order,)
        )
        rows = cur.fetchall()
    conn.commit()
    return (
        {int(order): str(status) for order, status, _ in rows},
        {int(order): Decimal(total) for order, _, total in rows},
    )


def _technical_topics(bootstrap: str) -> None:
    """Created up front as capture creates them (the tables' compacted, the transaction
    topic with one partition), so that capture and the workers start side by side: the
    workers refuse technical topics that do not exist."""
    from confluent_kafka.admin import AdminClient

    from bizevents.plumbing.kafka import ensure_topics

    admin = AdminClient({"bootstrap.servers": bootstrap, "log.connection.close": False})
    topics = [f"{SERVER}.{table}" for table in TABLES]
    ensure_topics(admin, topics, 4, config={"cleanup.policy": "compact"}, timeout_s=15)
    ensure_topics(admin, [TRANSACTION_TOPIC], 1, timeout_s=15)


def _needs_transactions(pins: dict[str, int]) -> bool:
    """Whether a pinned translator reads whole transactions (the transaction worker's)."""
    from bizevents.translators.registry import discover

    pinned = discover(names=pins).pinned(pins)
    return any(getattr(t, "tx_func", None) is not None for t in pinned)


def _max_order(dsn: str) -> int:
    conn = _connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT coalesce(max(id), 0) FROM store.orders")
            row = cur.fetchone()
        return int(row[0]) if row else 0
    finally:
        conn.close()


def _end(proc: subprocess.Popen[bytes], interrupt: bool) -> None:
    """Stop the replay and everything it started: it runs in a process group of its own
    (Spark's JVM ignores SIGINT and may outlive its driver), which gets SIGINT (for
    Ctrl-C), then SIGTERM, then SIGKILL, 10 s apart; what is left once the driver is
    done gets SIGTERM."""
    signals = ([signal.SIGINT] if interrupt else []) + [signal.SIGTERM, signal.SIGKILL]
    for sig in signals:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            continue
        break
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    if proc.stdout is not None:
        proc.stdout.close()


def _replay(
    cli: list[str],
    env: dict[str, str],
    version: int,
    began: float,
    duration: float | None,
    console: Console,
    transactions: bool = False,
) -> dict[str, Any]:
    """``bizevents replay`` over the orders topic from offset 0 into the contracts' topics,
    its progress bar on this terminal; its JSON summary back. A transaction translator
    (``transactions``) replays whole transactions: the orders and order items topics,
    whole partitions, assembled in Spark (docs/transactions.md)."""
    if transactions:
        what = [f"{SERVER}.store.orders,{SERVER}.store.order_items"]
    else:
        what = [f"{SERVER}.store.orders", "--from", "0"]
    argv = [
        *cli,
        "replay",
        "--topics",
        *what,
        "--translator",
        f"orders@{version}",
        "--to",
        "topic",
        "--progress",
        "--json",
    ]
    console.print("$ bizevents " + " ".join(argv[len(cli) :]), highlight=False)
    quiet = {**env, "BIZEVENTS_LOG_LEVEL": "WARNING"}  # its progress bar, not its log lines
    # a group of its own, so that the demo stops all of it (see _end)
    proc = subprocess.Popen(argv, env=quiet, stdout=subprocess.PIPE, start_new_session=True)
    try:
        left = None if duration is None else max(0.1, duration - (time.monotonic() - began))
        out, _ = proc.communicate(timeout=left)
    except subprocess.TimeoutExpired:
        _end(proc, interrupt=False)
        raise _Stopped from None
    except KeyboardInterrupt:  # Ctrl-C reached the demo: pass it on
        _end(proc, interrupt=True)
        raise
    if proc.returncode != 0:
        raise StackError(f"bizevents replay failed with exit code {proc.returncode} (see above)")
    result: dict[str, Any] = json.loads(out)
    return result


def replayed(result: dict[str, Any]) -> int:
    """The events a replay's JSON summary says it re-emitted (per topic for a row
    translator, in all for a transaction translator)."""
    if "events" in result:
        return sum(int(n) for n in result["events"].values())
    return int(result.get("emitted", 0))


def _hand_over_orders(conn: Any, bootstrap: str, group: str) -> None:
    """Where the transaction worker takes over the orders from the row worker, with the
    store paused (the caller holds the load's lock): once capture has confirmed every
    change the database wrote, the transaction worker's start group (where a group that
    never checkpointed begins) is set at the ends of the topics it reads, so it starts
    with the next transaction, none cut in two. The orders changes the row worker had
    not translated when it stopped are the replay's (step 3)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from bizevents.replay.plan import Planner

    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()::text")
        (written,) = cur.fetchone()
    conn.commit()
    deadline = time.monotonic() + 30
    while True:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (written, SLOT),
            )
            row = cur.fetchone()
        conn.commit()
        if row is not None and row[0]:
            break
        if time.monotonic() > deadline:
            raise StackError(f"capture did not confirm the store's changes up to {written} in 30 s")
        time.sleep(0.05)
    topics = [f"{SERVER}.store.orders", f"{SERVER}.store.order_items", TRANSACTION_TOPIC]
    planner = Planner({"bootstrap.servers": bootstrap, "log.connection.close": False})
    counts = planner.topics(",".join(topics))
    marks = planner.watermarks([(t, p) for t, n in sorted(counts.items()) for p in range(n)])
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{group}.start", "log_level": 0}
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(t, p, high) for (t, p), (_, high) in sorted(marks.items())],
            asynchronous=False,
        )
    except KafkaException as exc:
        raise StackError(f"cannot set where the transaction worker starts: {exc}") from exc
    finally:
        consumer.close()


def run_demo(
    settings: Settings,
    duration: float | None,
    rate: float,
    story: StoryPlan | None = None,
    console: Console | None = None,
    source: str = "postgres",
) -> dict[str, Any]:
    """Run the demo until Ctrl-C, ``duration`` seconds or the story's end; return the
    final tally. ``story`` None: the live flow only, with the fixed pins. ``source``
    ``mysql`` runs the live flow on the stack's MariaDB (binlog capture): the same store,
    the same translators, the same technical topics."""
    import psycopg2

    if source == "mysql" and story is not None:
        raise StackError(
            "the story runs on PostgreSQL; on MySQL the demo runs the live flow: add --live-only"
        )
    began = time.monotonic()
    console = console or Console()

    def line(text: str) -> None:
        console.print(f"[{time.monotonic() - began:5.1f}s] {text}", highlight=False, markup=False)

    line("finding the store plugin…")
    pinned, store = store_plugin()
    dev = settings.dev.model_copy(update={"mysql": True}) if source == "mysql" else settings.dev
    stack = DevStack(settings.state_dir, dev)
    was_running = all(h.ok for h in stack.status())
    logs = stack.state_dir / "logs"
    cli = [sys.executable, "-m", "bizevents"]
    pins = dict(PINS) if story is None else {**PINS, "orders": story.buggy}
    worker = _Worker(cli, {}, logs / "demo-translate.log")
    tx_worker = _Worker(cli, {}, logs / "demo-translate-transactions.log", transactions=True)
    try:

        def start_worker(bootstrap: str, registry_url: str) -> None:
            """The technical topics, then the workers: they need the broker and the
            registry only, so they start (imports, group joins) while PostgreSQL starts."""
            _technical_topics(bootstrap)
            env = _env(
                Endpoints(bootstrap, registry_url, ""),
                settings,
                BIZEVENTS_TRANSLATE__TOPIC_PREFIX=SERVER,
                **DEMO_GROUP,
            )
            del env["BIZEVENTS_DATABASE__POSTGRES_DSN"]  # they read no database
            worker.env = tx_worker.env = env
            worker.start(pins)
            if _needs_transactions(pins):
                tx_worker.start(pins)

        def on_start(name: str) -> None:
            line(f"starting {name}…")
            bootstrap, registry_url = stack.endpoint("broker"), stack.endpoint("registry")
            # Not earlier, at the registry's start: on two cores the workers' imports
            # then slowed the registry and PostgreSQL more than they gained
            # (docs/demo.md, start-up).
            if name == "postgres" and bootstrap and registry_url and not worker.running:
                line("creating the technical topics, starting the translator workers…")
                start_worker(bootstrap, registry_url)

        stack.up(on_start=on_start)
        endpoints = stack.endpoints()
        ready_at = time.monotonic()
        steps: dict[str, float] = {"stack": ready_at - began}
        line(
            f"stack ready: broker {endpoints.bootstrap_servers}, registry {endpoints.registry_url}"
        )
        demo_dir = stack.state_dir / "demo"
        demo_dir.mkdir(parents=True, exist_ok=True)
        dsn = endpoints.postgres_dsn
        if source == "mysql":
            assert endpoints.mysql_dsn is not None
            dsn = endpoints.mysql_dsn
        _prepare_database(dsn, store)
        since_order = _max_order(dsn)
        since_ms = int(time.time() * 1000)

        if not worker.running:  # the stack was up already
            line("creating the technical topics, starting the translator workers…")
            start_worker(endpoints.bootstrap_servers, endpoints.registry_url)

        capture_port = free_port("127.0.0.1")
        capture_config = demo_dir / "capture.toml"
        where = f'dsn = "{dsn}"\n' if source == "mysql" else f'slot = "{SLOT}"\n'
        capture_config.write_text(
            f'server = "{SERVER}"\ntables = {json.dumps(list(TABLES))}\npartitions = 4\n'
            f"{where}metrics_port = {capture_port}\n"
            # capture refreshes its per-table counts and slot lag at each heartbeat
            "heartbeat_interval_s = 1.0\n"
        )
        capture_config.chmod(0o600)  # a MySQL DSN holds its password
        env = _env(endpoints, settings, BIZEVENTS_TRANSLATE__TOPIC_PREFIX=SERVER, **DEMO_GROUP)
        topics = [*sorted({c.contract_topic() for t in pinned for c in t.emits}), DEAD_LETTER_TOPIC]
        tally = Tally()
        stop = threading.Event()
        replay_result: dict[str, Any] = {}
        before_replay: Agreement | None = None
        load_stop = threading.Event()  # the load stops before the rest (the story's step 3)
    except BaseException:  # Ctrl-C or a failure while starting: stop what was started
        worker.stop()
        tx_worker.stop()
        if not was_running:
            stack.down()
        raise
    with ExitStack() as cleanup:
        line("starting capture…")
        capture = cleanup.enter_context(
            _process(
                [*cli, "capture", source, "--config", str(capture_config)],
                env,
                logs / "demo-capture.log",
                "capture",
            )
        )
        cleanup.callback(worker.stop)
        endpoints_file = settings.state_dir.resolve() / ENDPOINTS_FILE
        endpoints_file.write_text(
            json.dumps(
                {
                    "capture": f"http://127.0.0.1:{capture_port}/metrics",
                    "translate": worker.metrics_url,
                }
            )
        )
        cleanup.callback(endpoints_file.unlink, missing_ok=True)
        cleanup.callback(tx_worker.stop)

        def start_transactions(pins: dict[str, int]) -> None:
            if _needs_transactions(pins):  # its topics exist (_technical_topics)
                tx_worker.start(pins)

        threads = [
            threading.Thread(
                target=_load,
                args=(dsn, rate, load_stop, tally, store),
                daemon=True,
            ),
            threading.Thread(
                target=_read_business_topics,
                args=(
                    endpoints.bootstrap_servers,
                    endpoints.registry_url,
                    topics,
                    since_ms,
                    stop,
                    tally,
                ),
                daemon=True,
            ),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            cleanup.callback(thread.join, 10)
        cleanup.callback(stop.set)
        cleanup.callback(load_stop.set)
        database = psycopg2.connect(endpoints.postgres_dsn) if story else None
        if database is not None:
            cleanup.callback(database.close)
        live_started = time.monotonic()

        def tick(live: Live) -> None:
            """One refresh: children alive, counters, the database's statuses."""
            if duration is not None and time.monotonic() - began >= duration:
                raise _Stopped
            _check_alive(capture, "capture", logs / "demo-capture.log")
            worker.check()
            tx_worker.check()
            scraped = worker.scrape()
            statuses, totals = (
                _database_orders(database, since_order) if database is not None else ({}, {})
            )
            with tally.lock:
                if scraped is not None:
                    tally.translator_counts = scraped
                if story:
                    tally.database = statuses
                    tally.totals = totals
                    tally.history.append(tally.book.agreement(statuses).percent)
            live.update(_view(tally, topics, story is not None))

        def run_for(live: Live, seconds: float | None, done: Callable[[], bool] = bool) -> None:
            until = None if seconds is None else time.monotonic() + seconds
            while until is None or time.monotonic() < until:
                tick(live)
                if done is not bool and done():
                    return
                time.sleep(0.25)

        def set_step(live: Live, text: str) -> None:
            with tally.lock:
                tally.step = text
            live.console.print(
                f"[{time.monotonic() - began:5.1f}s] {text}", highlight=False, markup=False
            )

        try:
            with Live(
                _view(tally, topics, story is not None),
                console=console,
                refresh_per_second=4,
                transient=False,
            ) as live:
                if story is None:
                    set_step(live, "live: " + ", ".join(f"{n}@{v}" for n, v in pins.items()))
                    run_for(live, None)
                else:
                    set_step(
                        live,
                        f"step 1/4 · live with orders@{story.buggy} pinned "
                        "(its bug: the status enum mapped by position)",
                    )
                    run_for(live, 30, lambda: tally.first_event_at is not None)
                    run_for(live, story.step_seconds)
                    steps["1 live, buggy"] = time.monotonic() - live_started
                    t = time.monotonic()
                    with tally.lock:
                        tally.translator_counts = worker.scrape() or tally.translator_counts
                        tally.retire_worker()
                    worker.stop()
                    tx_worker.stop()
                    pins = {**PINS, "orders": story.fixed}
                    fix_reads_transactions = _needs_transactions({"orders": story.fixed})
                    if fix_reads_transactions and database is not None:
                        with tally.pause:  # the store pauses for the hand-over
                            _hand_over_orders(
                                database,
                                endpoints.bootstrap_servers,
                                settings.transactions.group_id,
                            )
                    worker.start(pins)
                    start_transactions(pins)
                    record = json.loads(endpoints_file.read_text())
                    endpoints_file.write_text(
                        json.dumps({**record, "translate": worker.metrics_url})
                    )
                    set_step(
                        live,
                        f"step 2/4 · orders@{story.fixed} pinned: "
                        + (
                            "the transaction worker takes the orders over from the next "
                            "transaction (orders with their items and true totals)"
                            if fix_reads_transactions
                            else "the worker restarted with the fix and moves on from its "
                            "committed offsets"
                        ),
                    )
                    run_for(live, story.step_seconds)
                    steps["2 fix pinned"] = time.monotonic() - t
                    t = time.monotonic()
                    set_step(
                        live,
                        "step 3/4 · the store pauses; bizevents replay re-reads "
                        + (
                            f"{SERVER}.store.orders and .order_items, whole transactions, "
                            if fix_reads_transactions
                            else f"{SERVER}.store.orders from offset 0 "
                        )
                        + f"through orders@{story.fixed} (Spark)",
                    )
                    load_stop.set()
                    threads[0].join(10)
                    with tally.lock:
                        before_replay = tally.book.agreement(tally.database)
                    live.stop()
                    replay_result = _replay(
                        cli, env, story.fixed, began, duration, console, fix_reads_transactions
                    )
                    live.start()
                    steps["3 replay"] = time.monotonic() - t
                    t = time.monotonic()
                    set_step(live, "step 4/4 · the corrected events arrive; waiting for agreement")

                    def agreed() -> bool:
                        with tally.lock:
                            return tally.book.agreement(tally.database).complete

                    run_for(live, story.settle_seconds, agreed)
                    steps["4 agreement"] = time.monotonic() - t
                    tick(live)
        except (KeyboardInterrupt, _Stopped):
            pass
        with tally.lock:
            tally.translator_counts = worker.scrape() or tally.translator_counts
    if not was_running:
        stack.down()
    view = _view(tally, topics, story is not None)
    with tally.lock:
        agreement = tally.book.agreement(tally.database)
        totals = tally.book.totals_agreement(tally.totals)
        first = None if tally.first_event_at is None else tally.first_event_at - ready_at
        return {
            "store_actions": tally.load_steps,
            "events_per_topic": dict(tally.per_topic),
            "translators": tally.counts(),
            "events_per_translator": dict(tally.per_translator),
            "orders_placed": tally.orders_placed,
            "orders_placed_with_total": tally.orders_with_total,
            "corrected": len(tally.book.corrected),
            "agreement": {
                "percent": agreement.percent,
                "agree": agreement.agree,
                "disagree": agreement.disagree,
                "unseen": agreement.unseen,
                "unseen_orders": sorted(o for o in tally.database if tally.book.status(o) is None),
                "history": list(tally.history),
            },
            "totals": {
                "percent": totals.percent,
                "agree": totals.agree,
                "disagree": totals.disagree,
                "unseen": totals.unseen,
            },
            "before_replay": None if before_replay is None else before_replay.percent,
            "replay": replay_result,
            "replayed": replayed(replay_result),
            "steps": steps,
            "first_event_s": first,
            "seconds": time.monotonic() - began,
            "view": view,
        }
