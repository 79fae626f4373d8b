"""Parking in the transaction worker, against the real broker, registry and PostgreSQL
capture (docs/parking.md, "The transaction worker").

The plugin ``parktx`` (tests/integration/parking_tx_plugin.py, installed for the workers
by an entry point in a folder on their path) is the store's orders@3 with a planted
bug in @1 (a transaction holding an item of quantity 13 raises) and its fix in @2.
Orders are placed (3 of them poisoned), then paid two orders per transaction (a
poisoned order's partner flows on), then, after the re-drive, shipped. A clean run's
event ids come from the same transactions assembled and translated through parktx@2
by the pure core (:class:`~bizevents.translators.txcore.TransactionCore`).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bizevents_store.contracts import OrderPlaced, OrderShipped, OrderStatusChanged
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.contracts.business import HEADER_EVENT_ID, HEADER_SOURCE_TOPIC, HEADER_TRANSLATOR
from bizevents.contracts.envelope import ChangeEvent
from bizevents.contracts.exceptions import Coordinates
from bizevents.contracts.technical import AutoDecoder
from bizevents.contracts.technical.transaction import TransactionDecoder
from bizevents.plumbing.registry import schema_lookup
from bizevents.translators.assembly import Assembler, Part, Ready
from bizevents.translators.pipeline import SourceRecord
from bizevents.translators.txcore import TransactionCore
from tests.capture.capture_helpers import Db
from tests.integration.parking_tx_plugin import POISON, parktx_v2
from tests.integration.test_transaction_worker import (
    REPO,
    Worker,
    _ids,
    _scrape,
    capturing,
    place_each,
    store_db,
)
from tests.integration.test_translate_worker import Message, read_all, wait_for
from tests.plugins import install_plugin, plugin_pythonpath

pytestmark = pytest.mark.integration

TOPICS = [c.contract_topic() for c in (OrderPlaced, OrderStatusChanged, OrderShipped)]
ORDERS = 30
POISONED = (4, 11, 23)  # indexes among the orders placed


@pytest.fixture
def db(bizevents_stack: Any) -> Iterator[Db]:
    with store_db(bizevents_stack) as made:
        yield made


def parking_worker(db: Db, tmp_path: Path, name: str) -> Worker:
    """A transaction worker with parktx@1 pinned, the plugin on its path."""
    site = tmp_path / "site"
    install_plugin(
        site, "bizevents-parktx-test", "parktx", "tests.integration.parking_tx_plugin:PARKTX"
    )
    group = f"txpark-{db.server}"
    made = Worker(db, group, f"{group}.dlq", tmp_path / f"{name}.log")
    made.env.update(
        {
            "PYTHONPATH": plugin_pythonpath(site),
            "BIZEVENTS_TRANSLATORS": json.dumps({"parktx": 1}),
            "BIZEVENTS_TRANSLATE__PARKED_TOPIC": f"{group}.parked",
        }
    )
    return made


class Published:
    """This test's parktx events, in each partition's order, read as they come: one
    consumer, kept (the business topics are shared with the run's other tests)."""

    def __init__(self, db: Db) -> None:
        self.source = f"{db.server}.store.orders".encode()
        self.consumer = Consumer(
            {
                "bootstrap.servers": db.endpoints.bootstrap_servers,
                "group.id": "unused",
                "enable.auto.commit": False,
            }
        )
        self.assigned = False
        self.found: list[Message] = []

    def __call__(self) -> list[Message]:
        """Every event read so far, after reading what is there now."""
        if not self.assigned:
            topics = self.consumer.list_topics(timeout=10).topics
            if any(t not in topics for t in TOPICS):
                return self.found  # the worker creates them at its start
            self.consumer.assign(
                [TopicPartition(t, p, 0) for t in TOPICS for p in topics[t].partitions]
            )
            self.assigned = True
        until = time.monotonic() + 2.0  # events that keep coming: the caller polls again
        while time.monotonic() < until:
            batch = [m for m in self.consumer.consume(1000, 0.3) if m.error() is None]
            if not batch:
                break
            for m in batch:
                headers = dict(m.headers() or [])
                if headers.get(HEADER_SOURCE_TOPIC) == self.source and (
                    headers.get(HEADER_TRANSLATOR) or b""
                ).startswith(b"parktx@"):
                    self.found.append(
                        Message(
                            m.topic() or "",
                            m.partition() or 0,
                            m.offset() or 0,
                            m.key(),
                            m.value(),
                            {k: v or b"" for k, v in headers.items()},
                        )
                    )
        return self.found

    def close(self) -> None:
        self.consumer.close()


def clean_run(db: Db) -> tuple[dict[bytes, list[tuple[str, str]]], dict[int, bytes]]:
    """What a clean run through parktx@2 publishes, from the same transactions: per
    order's Kafka key, the (topic, event id) of its events in commit order; and each
    order's Kafka key by order id."""
    lookup = schema_lookup(SchemaRegistryClient({"url": db.endpoints.registry_url}))
    decoder, tx_decoder = AutoDecoder(lookup), TransactionDecoder(lookup)
    core = TransactionCore([parktx_v2], lambda event, topic=None, lineage=None: b"")
    assembler = Assembler(core.reads)
    keys: dict[int, bytes] = {}
    ready: list[Ready] = []
    seq = 0
    bootstrap = db.endpoints.bootstrap_servers
    for topic in (f"{db.server}.store.orders", f"{db.server}.store.order_items"):
        for m in read_all(bootstrap, topic):
            if m.value is None:
                continue
            seq += 1
            where = Coordinates(m.topic, m.partition, m.offset)
            origin = SourceRecord(m.topic, m.partition, m.offset, m.key, m.value, [])
            change = decoder.decode(m.key, m.value, where, [])
            assert isinstance(change, ChangeEvent)
            if topic.endswith(".orders") and change.after is not None:
                keys[int(change.after["id"])] = m.key or b""
            part = Part(seq, origin, change=change)
            ready += [o for o in assembler.feed(part) if isinstance(o, Ready)]
    for m in read_all(bootstrap, f"{db.server}.transaction"):
        seq += 1
        where = Coordinates(m.topic, m.partition, m.offset)
        origin = SourceRecord(m.topic, m.partition, m.offset, m.key, m.value, [])
        part = Part(seq, origin, record=tx_decoder.decode(m.value or b"", where))
        ready += [o for o in assembler.feed(part) if isinstance(o, Ready)]
    lanes: dict[bytes, list[tuple[str, str]]] = defaultdict(list)
    for record in core.process(ready).records:
        assert record.event_id, record.headers
        lanes[record.key or b""].append((record.topic, record.event_id))
    return lanes, keys


def placed_orders(db: Db) -> list[int]:
    """``ORDERS`` orders, each its own transaction; those at ``POISONED`` poisoned."""
    customer, products = _ids(db)
    quantities = [POISON if i in POISONED else i % 3 + 1 for i in range(ORDERS)]
    return place_each(db, customer, [[(products[i % 3], q)] for i, q in enumerate(quantities)])


def set_status(db: Db, orders: list[int], status: str) -> None:
    """Two orders per transaction (a poisoned order with a clean one), in order."""
    with db.conn.cursor() as cur:
        for n in range(0, len(orders), 2):
            cur.execute("BEGIN")
            cur.execute(
                "UPDATE store.orders SET status = %s WHERE id = ANY(%s)",
                (status, orders[n : n + 2]),
            )
            cur.execute("COMMIT")


def by_key(messages: list[Message]) -> dict[bytes, list[tuple[str, str]]]:
    """Per order key, its events' (topic, id) in each topic's order, each id once; a
    repeated id must be a copy (same bytes)."""
    seen: dict[str, bytes] = {}
    lanes: dict[bytes, list[tuple[str, str]]] = defaultdict(list)
    for m in messages:
        event_id = m.headers[HEADER_EVENT_ID].decode()
        if event_id in seen:
            assert seen[event_id] == m.value, f"event {event_id} published twice, differently"
            continue
        seen[event_id] = m.value or b""
        lanes[m.key or b""].append((m.topic, event_id))
    return lanes


def per_topic(lane: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for topic, event_id in lane:
        out[topic].append(event_id)
    return dict(out)


def wait_flowed(
    published: Published, lanes: dict[bytes, list[tuple[str, str]]], what: str
) -> dict[bytes, list[tuple[str, str]]]:
    """Until each key of ``lanes`` has its lane's events, topic by topic: what was
    published then, by key."""

    def flowed() -> bool:
        found = by_key(published())
        return all(per_topic(found.get(k, [])) == per_topic(lane) for k, lane in lanes.items())

    wait_for(flowed, 90, what)
    return by_key(published())


def _metrics(worker: Worker) -> dict[str, float]:
    """The worker's metrics, by name and translator label (the group label dropped)."""
    url = next(
        json.loads(line)["url"]
        for line in worker.log.read_text().splitlines()
        if '"metrics endpoint"' in line
    )
    out: dict[str, float] = {}
    for name, value in _scrape(url).items():
        out[re.sub(r'group="[^"]*",?', "", name)] = value
    return out


def test_parked_orders_wait_and_are_re_driven_in_commit_order_with_the_clean_ids(
    db: Db, tmp_path: Path
) -> None:
    worker = parking_worker(db, tmp_path, "worker")
    worker.env["BIZEVENTS_TRANSLATE__METRICS_PORT"] = "0"
    published = Published(db)
    with capturing(db, tmp_path) as run:
        worker.start()
        try:
            orders = placed_orders(db)
            poisoned = {orders[i] for i in POISONED}
            set_status(db, orders, "paid")
            run.wait_acked(db.wal_lsn())
            expected, keys = clean_run(db)
            parked_keys = {keys[o] for o in poisoned}
            flowing = {k: lane for k, lane in expected.items() if k not in parked_keys}
            assert len(flowing) == ORDERS - len(POISONED)
            assert all(len(lane) == 2 for lane in expected.values())  # placed, paid
            found = wait_flowed(published, flowing, "the clean orders' events")
            assert worker.alive(), worker.tail()
            # no event of a parked order, not even of its later (paid) transaction
            assert not parked_keys & set(found), worker.tail()

            metrics = _metrics(worker)
            # placing: 3 parts failed, 3 orders; paid: the 2 parts parked behind, 3 orders
            assert metrics['bizevents_translator_parked_total{translator="parktx@1"}'] == 15
            assert metrics['bizevents_parked_keys{translator="parktx"}'] == 3

            listed = worker.cli("dlq", "list", "--translator", "parktx", "--json")
            assert listed.returncode == 0, listed.stderr
            rows = json.loads(listed.stdout)
            assert sorted(bytes.fromhex(r["key"]) for r in rows) == sorted(
                str(o).encode() for o in poisoned
            )
            assert {r["stage"] for r in rows} == {"translate"}
            assert all("poisoned item" in r["reason"] for r in rows)
            assert all(r["parked"] == 2 for r in rows)  # placed (failed), paid (behind)
            shown = worker.cli("dlq", "show", rows[0]["key"], "--json")
            assert shown.returncode == 0, shown.stderr
            stages = [r["stage"] for r in json.loads(shown.stdout)]
            # placed: the order, its item, its total; paid: the whole transaction (two orders)
            assert stages == ["translate"] * 3 + ["parked"] * 2, stages

            done = worker.cli("dlq", "redrive", "--translator", "parktx@2", "--all")
            assert done.returncode == 0, done.stdout + done.stderr + worker.tail()
            assert done.stdout.count("done:") == 3, done.stdout

            set_status(db, orders, "shipped")  # after the re-drive: live again
            run.wait_acked(db.wal_lsn())
            expected, _ = clean_run(db)
            assert all(len(lane) == 4 for lane in expected.values())  # and shipped (two)
            found = wait_flowed(published, expected, "every order's events")
            assert worker.alive(), worker.tail()
            assert set(found) == set(expected)
            for key, lane in expected.items():  # in commit order, the clean run's ids
                assert per_topic(found[key]) == per_topic(lane), key
            after = worker.cli("dlq", "list", "--translator", "parktx", "--json")
            assert json.loads(after.stdout) == []
        finally:
            published.close()
            if worker.alive():
                worker.signal(signal.SIGTERM)


def test_a_re_drive_that_fails_again_keeps_the_key_parked(db: Db, tmp_path: Path) -> None:
    """Re-driven through the buggy version itself: failed, the key stays parked with the
    reason; a discard then unparks it and its next transaction flows. Two re-drives of
    another key at once: one is done, the other refused."""
    worker = parking_worker(db, tmp_path, "worker")
    published = Published(db)
    with capturing(db, tmp_path) as run:
        worker.start()
        try:
            customer, products = _ids(db)
            poisoned = [[(products[0], POISON)], [(products[1], POISON)]]
            order, other = place_each(db, customer, poisoned)
            run.wait_acked(db.wal_lsn())
            key = str(order).encode().hex()

            def parked(key: str = key) -> Any:
                listed = worker.cli("dlq", "list", "--translator", "parktx", "--json")
                return [r for r in json.loads(listed.stdout or "[]") if r["key"] == key]

            wait_for(lambda: parked() and parked(str(other).encode().hex()), 90, "both parked")
            both = [
                subprocess.Popen(
                    [*REDRIVE, "parktx@2", "--key", str(other).encode().hex()],
                    env=worker.env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    cwd=REPO,
                )
                for _ in range(2)
            ]
            said = sorted(p.communicate(timeout=150)[0] for p in both)
            codes = sorted(p.returncode for p in both)
            assert codes == [0, 1], said
            assert said[0].startswith("done:") or said[1].startswith("done:"), said
            assert any("refused:" in text for text in said), said
            again = worker.cli("dlq", "redrive", "--translator", "parktx@1", "--key", key)
            assert again.returncode == 1, again.stdout + again.stderr
            assert "failed again" in again.stdout and "poisoned item" in again.stdout
            # where the transaction translator raised, too
            reason = parked()[0]["latest_reason"]
            assert "has a poisoned item (at " in reason, reason
            assert reason.endswith("parking_tx_plugin.py:39)"), reason
            gone = worker.cli("dlq", "discard", key, "--translator", "parktx", "--reason", "test")
            assert gone.returncode == 0, gone.stdout + gone.stderr
            assert not parked()
            set_status(db, [order], "paid")
            run.wait_acked(db.wal_lsn())

            def paid() -> bool:
                return any(m.topic == OrderStatusChanged.contract_topic() for m in published())

            wait_for(paid, 90, "the discarded order's next transaction")
        finally:
            published.close()
            if worker.alive():
                worker.signal(signal.SIGTERM)


REDRIVE = [sys.executable, "-m", "bizevents", "dlq", "redrive", "--translator"]


def _story(workers: list[Worker]) -> str:
    """What the workers said of parking (for a failure's message)."""
    lines = []
    for w in workers:
        for line in w.log.read_text().splitlines() if w.log.exists() else []:
            if "dead-lettered" not in line and ("request" in line or "error" in line.lower()):
                lines.append(f"{w.log.name}: {line[:500]}")
    return "\n".join(lines[-40:])


def _carrying_out(w: Worker) -> bool:
    return '"carrying out a request"' in (w.log.read_text() if w.log.exists() else "")


def test_a_kill_9_mid_re_drive_hands_it_to_the_other_worker_in_order(
    db: Db, tmp_path: Path
) -> None:
    """A poisoned order and 30 later transactions of it parked by one worker; a second
    joins (a rebalance: both restore the parked keys) and 4 more transactions of the
    order are parked too; the re-drive through the slow fix (parktx@3) killed -9
    half-way: the other worker takes the key's virtual partition over and re-drives it
    again, so the key's events are the clean run's, in commit order (the repeated ones
    identical copies), before its next one."""
    workers = [parking_worker(db, tmp_path, f"w{i}") for i in (1, 2)]
    published = Published(db)

    def toggle(order: int, times: int) -> None:
        with db.conn.cursor() as cur:
            for _ in range(times):  # paid, pending, paid, ...: an event each
                cur.execute("BEGIN")
                cur.execute(
                    "UPDATE store.orders SET status = CASE status WHEN 'paid' "
                    "THEN 'pending'::store.order_status ELSE 'paid' END WHERE id = %s",
                    (order,),
                )
                cur.execute("COMMIT")

    def parked(count: int) -> bool:
        listed = workers[0].cli("dlq", "list", "--translator", "parktx", "--json")
        return any(r["parked"] >= count for r in json.loads(listed.stdout or "[]"))

    with capturing(db, tmp_path) as run:
        workers[0].start()
        redrive: subprocess.Popen[str] | None = None
        try:
            customer, products = _ids(db)
            (order,) = place_each(db, customer, [[(products[0], POISON)]])
            toggle(order, 30)
            run.wait_acked(db.wal_lsn())
            _, keys = clean_run(db)
            key = keys[order]  # its events' Kafka key; the parked key is its id
            wait_for(lambda: parked(31), 90, "the order and its 30 later transactions parked")
            workers[1].start()
            wait_for(
                lambda: (
                    all(w.log.read_text().count('"assembling"') >= 1 for w in workers)
                    and workers[0].log.read_text().count('"assembling"') >= 2
                ),
                60,
                "the rebalance",
            )
            toggle(order, 4)
            run.wait_acked(db.wal_lsn())
            wait_for(lambda: parked(35), 90, "4 more transactions parked after the rebalance")
            assert not [m for m in published() if m.key == key]
            redrive = subprocess.Popen(
                [*REDRIVE, "parktx@3", "--key", str(order).encode().hex(), "--timeout", "150"],
                env=workers[0].env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=REPO,
            )
            victim = wait_for(
                lambda: next((w for w in workers if _carrying_out(w)), None), 60, "a re-drive"
            )
            survivor = next(w for w in workers if w is not victim)

            wait_for(
                lambda: len([m for m in published() if m.key == key]) >= 3,
                60,
                "a few of the key's 35 transactions re-driven (SLOW_S each)",
            )
            victim.signal(signal.SIGKILL)
            assert '"request answered"' not in victim.log.read_text(), "not killed mid-re-drive"
            out, _ = redrive.communicate(timeout=170)
            assert redrive.returncode == 0, out + survivor.tail()
            assert _carrying_out(survivor), survivor.tail()
            set_status(db, [order], "shipped")
            run.wait_acked(db.wal_lsn())
            expected, _ = clean_run(db)
            assert len(expected[key]) == 1 + 34 + 2
            wait_flowed(published, {key: expected[key]}, "the order's events")
            copies = [m for m in published() if m.key == key]
            assert len(copies) > len(expected[key]), "the victim re-drove some: repeated"
        finally:
            published.close()
            if redrive is not None and redrive.poll() is None:
                redrive.kill()
            for w in workers:
                if w.alive():
                    w.signal(signal.SIGTERM)


def test_on_error_fail_stops_the_worker_with_a_sentence(db: Db, tmp_path: Path) -> None:
    worker = parking_worker(db, tmp_path, "worker")
    published = Published(db)
    worker.env["BIZEVENTS_TRANSLATE__ON_ERROR"] = json.dumps({"parktx": "fail"})
    with capturing(db, tmp_path) as run:
        worker.start()
        try:
            customer, products = _ids(db)
            place_each(db, customer, [[(products[0], POISON)]])
            run.wait_acked(db.wal_lsn())
            assert worker.process is not None
            code = worker.process.wait(90)
            found = published()
        finally:
            published.close()
            if worker.alive():
                worker.signal(signal.SIGTERM)
    out = worker.log.read_text()
    assert code == 1, out[-3000:]
    plain = [line for line in out.splitlines() if not line.startswith("{")]
    assert "parktx@1 failed (translate) on transaction" in plain[-1], out[-3000:]
    assert "poisoned item" in plain[-1] and "on_error.parktx" in plain[-1]
    assert not any("Traceback" in line for line in plain), out[-3000:]
    assert not found  # nothing of it
