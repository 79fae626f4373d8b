"""The demo: the whole flow on the embedded stack, live on the terminal.

It starts the stack (if it is not running), creates the store's tables in the local
PostgreSQL (or, with ``--source mysql``, in the stack's MariaDB), starts ``bizevents
capture postgres`` (or ``capture mysql``), ``bizevents translate`` and ``bizevents
translate --transactions`` (orders@3, whole transactions) as processes of their own (as
they run in production), drives a stream of store activity, and shows the business
events arriving, with the counts each translator emitted, dropped and dead-lettered.
Ctrl-C (or ``--duration``) stops it cleanly:
load first, then the worker and capture (each acknowledges what it has), then the
stack if the demo started it.
"""

from __future__ import annotations

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
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.table import Table

from base.errors import ConfigError
from bizevents.devstack import DevStack, Endpoints, StackError
from bizevents.devstack.processes import free_port, tail
from bizevents.settings import Settings
from translators.api import Translator

SERVER = "demo"
TABLES = ("store.customers", "store.products", "store.orders", "store.order_items")
#: orders@3 reads whole transactions (orders with their items): it runs under
#: ``bizevents translate --transactions`` beside the row worker (docs/transactions.md).
PINS = {"customers": 1, "orders": 3, "products": 1}
DEAD_LETTER_TOPIC = "bizevents.dead-letter"
ORDER_PLACED = "store.order-placed"


@dataclass
class Tally:
    """What the terminal shows; written by the reader thread, read by the display."""

    per_topic: Counter[str] = field(default_factory=Counter)
    recent: deque[tuple[str, str, str]] = field(default_factory=lambda: deque(maxlen=12))
    translator_counts: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Business events seen per translator (from their lineage headers).
    per_translator: Counter[str] = field(default_factory=Counter)
    #: OrderPlaced events seen, and those whose total is not 0.00.
    orders_placed: int = 0
    orders_with_total: int = 0
    load_steps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


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
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.returncode not in (0, -signal.SIGTERM):
            print(
                f"{what} exited with {proc.returncode}; its log {log}:\n{tail(log)}",
                file=sys.stderr,
            )


def _check_alive(proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    if proc.poll() is not None:
        raise StackError(
            f"{what} stopped with exit code {proc.returncode}; its log {log}:\n{tail(log)}"
        )


def store_plugin() -> tuple[list[Translator], ModuleType]:
    """The store plugin's pinned translators and its load module, found through the
    plugin's entry points (bizevents does not depend on the example it ships)."""
    from translators.exceptions import PluginError
    from translators.registry import discover

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
        from capture import mysql as my

        return my.connect(dsn, autocommit=False)
    import psycopg2

    return psycopg2.connect(dsn)


def _prepare_database(dsn: str, store: ModuleType) -> None:
    conn = _connect(dsn)
    try:
        store.create_schema(conn, "mysql" if dsn.startswith("mysql://") else "postgresql")
    finally:
        conn.close()


def _load(dsn: str, rate: float, stop: threading.Event, tally: Tally, store: ModuleType) -> None:
    conn = _connect(dsn)
    load = store.StoreLoad(conn, seed=int(time.time()))
    interval = 1.0 / rate
    next_at = time.monotonic()
    try:
        while not stop.is_set():
            load.step()
            with tally.lock:
                tally.load_steps += 1
            next_at += interval
            stop.wait(max(0.0, next_at - time.monotonic()))
    finally:
        conn.close()


def _read_business_topics(
    bootstrap: str,
    topics: list[str],
    stop: threading.Event,
    tally: Tally,
    placed: Callable[[bytes], Any] | None = None,
) -> None:
    """Follow the business topics in assign mode (no consumer group needed to watch)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bizevents-demo-view",
            "log_level": 0,
            "enable.auto.commit": False,
            "log.connection.close": False,
        }
    )
    assigned: set[tuple[str, int]] = set()
    last_refresh = 0.0
    try:
        while not stop.is_set():
            if time.monotonic() - last_refresh > 2:
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
                    consumer.assign([TopicPartition(t, p, 0) for t, p in sorted(assigned)])
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is not None:
                    continue
                headers = {str(k): _text(v) for k, v in list(message.headers() or [])}
                topic = str(message.topic())
                label = headers.get("bizevents.translator", "")
                detail = headers.get("bizevents.dlq.reason") or headers.get(
                    "bizevents.event_id", ""
                )
                if placed is not None and topic == ORDER_PLACED and message.value():
                    try:
                        order = placed(message.value() or b"")
                        detail = f"total {order.total} {order.currency}, {len(order.items)} items"
                    except Exception:  # the view must not stop on one event
                        order = None
                else:
                    order = None
                with tally.lock:
                    tally.per_topic[topic] += 1
                    if label:
                        tally.per_translator[label] += 1
                    if order is not None:
                        tally.orders_placed += 1
                        tally.orders_with_total += order.total != 0
                    tally.recent.append((topic, label, detail[:60]))
    finally:
        consumer.close()


def _wait_for_topic(
    bootstrap: str, topic: str, capture: subprocess.Popen[bytes], logs: Path
) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log.connection.close": False})
    deadline = time.monotonic() + 120
    while topic not in admin.list_topics(timeout=10).topics:
        _check_alive(capture, "capture", logs / "demo-capture.log")
        if time.monotonic() > deadline:
            raise StackError(f"capture did not create {topic} within 120 s")
        time.sleep(0.5)


def _order_placed_reader(registry_url: str, pinned: list[Translator]) -> Any:
    """Reads OrderPlaced values (to show their totals), or ``None`` without the contract."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from contracts.serde import BusinessDeserializer

    contract = next(
        (c for t in pinned for c in t.emits if c.contract_topic() == ORDER_PLACED), None
    )
    if contract is None:
        return None
    return BusinessDeserializer(SchemaRegistryClient({"url": registry_url}), contract)


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


def _view(tally: Tally, topics: list[str]) -> Group:
    with tally.lock:
        counts = Table(title="per translator", title_justify="left")
        for column in ("translator", "consumed", "emitted", "dropped", "dead-lettered"):
            counts.add_column(column, justify="right" if column != "translator" else "left")
        for translator, values in sorted(tally.translator_counts.items()):
            counts.add_row(
                translator,
                *(
                    f"{values.get(k, 0):.0f}"
                    for k in ("consumed", "emitted", "dropped", "dead_lettered")
                ),
            )
        for translator, seen in sorted(tally.per_translator.items()):
            if translator not in tally.translator_counts:  # the transaction worker's
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
        for column in ("topic", "translator", "event id / reason"):
            recent.add_column(column)
        for row in tally.recent:
            recent.add_row(*row)
    return Group(counts, per_topic, recent)


def run_demo(
    settings: Settings, duration: float | None, rate: float, source: str = "postgres"
) -> dict[str, Any]:
    """Run the demo until Ctrl-C or ``duration`` seconds; return the final tally.

    ``source`` is ``postgres`` or ``mysql`` (the embedded MariaDB): the same store,
    the same translators, the technical topics captured from either.
    """
    pinned, store = store_plugin()
    dev = settings.dev.model_copy(update={"mysql": True}) if source == "mysql" else settings.dev
    stack = DevStack(settings.state_dir, dev)
    was_running = all(h.ok for h in stack.status())
    stack.up()
    endpoints = stack.endpoints()
    demo_dir = stack.state_dir / "demo"
    demo_dir.mkdir(parents=True, exist_ok=True)
    dsn = endpoints.postgres_dsn
    capture_config = demo_dir / "capture.toml"
    config = f'server = "{SERVER}"\ntables = {json.dumps(list(TABLES))}\npartitions = 4\n'
    if source == "mysql":
        assert endpoints.mysql_dsn is not None
        dsn = endpoints.mysql_dsn
        config += f'dsn = "{dsn}"\n'
    else:
        config += 'slot = "bizevents_demo"\n'
    capture_config.write_text(config)
    capture_config.chmod(0o600)
    _prepare_database(dsn, store)
    metrics_port = free_port("127.0.0.1")
    env = _env(
        endpoints,
        settings,
        BIZEVENTS_TRANSLATORS=json.dumps(PINS),
        BIZEVENTS_TRANSLATE__METRICS_PORT=str(metrics_port),
        BIZEVENTS_TRANSLATE__TOPIC_PREFIX=SERVER,
    )
    topics = [*sorted({c.contract_topic() for t in pinned for c in t.emits}), DEAD_LETTER_TOPIC]
    tally = Tally()
    stop = threading.Event()
    logs = stack.state_dir / "logs"
    cli = [sys.executable, "-m", "bizevents"]
    started = time.monotonic()
    with ExitStack() as cleanup:
        capture = cleanup.enter_context(
            _process(
                [*cli, "capture", source, "--config", str(capture_config)],
                env,
                logs / "demo-capture.log",
                "capture",
            )
        )
        worker = cleanup.enter_context(
            _process([*cli, "translate"], env, logs / "demo-translate.log", "the translator worker")
        )
        # the transaction topic exists once capture streams (after its snapshot)
        _wait_for_topic(endpoints.bootstrap_servers, f"{SERVER}.transaction", capture, logs)
        tx_worker = cleanup.enter_context(
            _process(
                [*cli, "translate", "--transactions"],
                env,
                logs / "demo-translate-transactions.log",
                "the transaction worker",
            )
        )
        threads = [
            threading.Thread(target=_load, args=(dsn, rate, stop, tally, store), daemon=True),
            threading.Thread(
                target=_read_business_topics,
                args=(
                    endpoints.bootstrap_servers,
                    topics,
                    stop,
                    tally,
                    _order_placed_reader(endpoints.registry_url, pinned),
                ),
                daemon=True,
            ),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            cleanup.callback(thread.join, 10)
        cleanup.callback(stop.set)
        try:
            with Live(_view(tally, topics), refresh_per_second=4, transient=False) as live:
                while duration is None or time.monotonic() - started < duration:
                    _check_alive(capture, "capture", logs / "demo-capture.log")
                    _check_alive(worker, "the translator worker", logs / "demo-translate.log")
                    _check_alive(
                        tx_worker,
                        "the transaction worker",
                        logs / "demo-translate-transactions.log",
                    )
                    try:
                        scraped = _scrape(f"http://127.0.0.1:{metrics_port}/metrics")
                    except OSError:
                        scraped = None  # the worker is still starting
                    if scraped is not None:
                        with tally.lock:
                            tally.translator_counts = scraped
                    live.update(_view(tally, topics))
                    time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    if not was_running:
        stack.down()
    with tally.lock:
        return {
            "store_actions": tally.load_steps,
            "events_per_topic": dict(tally.per_topic),
            "translators": tally.translator_counts,
            "events_per_translator": dict(tally.per_translator),
            "orders_placed": tally.orders_placed,
            "orders_placed_with_total": tally.orders_with_total,
        }
