"""The demo's store: its plugin, its database prepared and loaded, and the orders it holds."""

from __future__ import annotations

import importlib
import threading
import time
from decimal import Decimal
from types import ModuleType
from typing import Any

from bizevents.demo.plan import PINS, SERVER, SLOT, TABLES, TRANSACTION_TOPIC
from bizevents.demo.view import Tally
from bizevents.devstack import StackError
from bizevents.plumbing.errors import ConfigError
from bizevents.translators.api import Translator


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
