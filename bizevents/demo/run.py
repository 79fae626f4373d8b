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

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from rich.console import Console
from rich.live import Live

from bizevents.demo.plan import DEAD_LETTER_TOPIC, DEMO_GROUP, PINS, SERVER, SLOT, TABLES, StoryPlan
from bizevents.demo.processes import _check_alive, _end, _env, _process, _Stopped, _Worker
from bizevents.demo.store import (
    _database_orders,
    _hand_over_orders,
    _load,
    _max_order,
    _needs_transactions,
    _prepare_database,
    _technical_topics,
    store_plugin,
)
from bizevents.demo.view import Tally, _read_business_topics, _view
from bizevents.devstack import DevStack, Endpoints, StackError
from bizevents.devstack.processes import free_port
from bizevents.settings import Settings
from bizevents.status import ENDPOINTS_FILE
from bizevents.story import Agreement


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
                [*cli, "capture", source, str(capture_config)],
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
