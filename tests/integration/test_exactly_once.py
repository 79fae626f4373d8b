"""Exactly once on Apache Kafka: both workers with ``processing_guarantee =
"exactly_once"``, killed (SIGKILL) mid-stream and restarted again and again; a
``read_committed`` reader sees each event once, while a ``read_uncommitted`` reader
sees the aborted transactions' copies (so the check has something to catch). On the
embedded broker the setting is refused with one sentence (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from bizevents.contracts.business import HEADER_EVENT_ID, HEADER_SOURCE_TOPIC, HEADER_TRANSLATOR
from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import Db
from tests.cli import bizevents
from tests.integration import test_transaction_worker as txw
from tests.integration.test_translate_worker import (
    ORDER_TOPICS,
    REPO,
    Setup,
    Worker,
    expected_ids,
    order_story,
    orders_encoder,
    produce,
    wait_for,
)
from tests.plugins import install_plugin, plugin_pythonpath

pytestmark = pytest.mark.integration

EXACTLY_ONCE = {"BIZEVENTS_TRANSLATE__PROCESSING_GUARANTEE": "exactly_once"}
#: What a group's offsets answer while its coordinator is not known or still loading.
COORDINATOR_NOT_YET = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
)
#: Kills before the test gives up seeing an aborted transaction's records; each loop ends
#: at the first one seen.
MAX_KILLS = 12
#: The row worker's kills, each while a block's transaction is open with records sent
#: (:func:`kill_in_open_transaction`). Killed as soon as it translated, it had sent none
#: at times: under load, 12 kills of 12 aborted no record (one run of 10 beside another).
ROW_KILLS = 3
#: How long a kill looks for a transaction open with records sent before it kills anyway.
OPEN_WAIT_S = 10.0
#: The business topic of the orders' events (OrderPlaced by orders@3).
BUSINESS = "store.order-placed"
#: What the transaction worker logs at each rebuild, with its new producers' epochs.
REBUILT = '"partition producers started"'


def event_ids(
    bootstrap: str, topics: Sequence[str], keep: Callable[[dict[str, bytes]], bool], isolation: str
) -> list[str]:
    """The event ids of the records of ``topics`` that ``keep`` keeps (by their
    headers), read with ``isolation`` until each partition's end was reached once (a
    worker may be publishing meanwhile)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    try:
        assigned = []
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            assigned += [TopicPartition(topic, p, 0) for p in meta.partitions]
        consumer.assign(assigned)
        at_end: set[tuple[str, int]] = set()
        ids: list[str] = []
        deadline = time.monotonic() + 60
        while len(at_end) < len(assigned):
            assert time.monotonic() < deadline, f"{topics}: no end within 60 s"
            for m in consumer.consume(5000, timeout=0.5):
                where = (str(m.topic()), int(m.partition() or 0))
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, str(err)
                    at_end.add(where)
                    continue
                headers: dict[str, bytes] = {}
                for header in m.headers() or []:
                    name, raw = header[0], header[1]
                    headers[name] = raw.encode() if isinstance(raw, str) else raw or b""
                if keep(headers):
                    ids.append(headers[HEADER_EVENT_ID].decode())
        return ids
    finally:
        consumer.close()


def kill_in_open_transaction(worker: Worker, bootstrap: str, topics: Sequence[str]) -> bool:
    """Kill ``worker`` (SIGKILL) while a transaction of it is open with records sent, so
    that they are aborted (:func:`stop_in_open_transaction`); False if no stop found one
    (it is killed anyway)."""
    assert worker.process is not None
    found = stop_in_open_transaction(worker.process, bootstrap, topics)
    worker.process.send_signal(signal.SIGKILL)
    worker.process.wait(10)
    return found


def stop_in_open_transaction(
    process: subprocess.Popen[bytes], bootstrap: str, topics: Sequence[str]
) -> bool:
    """Stop ``process`` (SIGSTOP) while a transaction of it is open with records sent:
    stopped again and again, until a stop finds a partition of ``topics`` whose last
    stable offset (what a ``read_committed`` reader's ListOffsets answers) is behind its
    high watermark. False if none is found within :data:`OPEN_WAIT_S` (left running)."""
    readers = {
        isolation: Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": isolation}
        )
        for isolation in ("read_committed", "read_uncommitted")
    }
    committed, uncommitted = readers["read_committed"], readers["read_uncommitted"]

    def open_transaction() -> bool:
        for tp in partitions:
            stable = committed.get_watermark_offsets(tp, timeout=5, cached=False)[1]
            if stable < uncommitted.get_watermark_offsets(tp, timeout=5, cached=False)[1]:
                return True
        return False

    try:
        partitions = [
            TopicPartition(topic, p)
            for topic in topics
            for p in committed.list_topics(topic, timeout=10).topics[topic].partitions
        ]
        deadline = time.monotonic() + OPEN_WAIT_S
        while time.monotonic() < deadline:
            process.send_signal(signal.SIGSTOP)
            time.sleep(0.05)  # what it sent before the stop lands
            if open_transaction():
                return True
            process.send_signal(signal.SIGCONT)
            time.sleep(0.02)
        return False
    finally:
        for reader in readers.values():
            reader.close()


def consumed(worker: Worker) -> float:
    return worker.metric("bizevents_translator_consumed_total", translator="orders@2")


def translated_more(worker: Worker, than: float) -> bool:
    return consumed(worker) > than


def published_more(ids: Callable[[str], list[str]], than: int) -> bool:
    return len(ids("read_uncommitted")) > than


def read_twice(committed: list[str]) -> dict[str, int]:
    """The ids read more than once, with how many times."""
    return {i: c for i, c in Counter(committed).items() if c > 1}


def resume_and_stop(worker: txw.Worker) -> None:
    """A worker stopped (SIGSTOP) or not: resumed, then asked to stop (SIGTERM)."""
    if worker.alive():
        assert worker.process is not None
        worker.process.send_signal(signal.SIGCONT)
        worker.signal(signal.SIGTERM)


class OrderLoad:
    """Orders of 20 items each, one transaction each, placed on a thread from
    :meth:`start` to :meth:`stop`; :meth:`ids` reads the events this database's orders
    gave (OrderPlaced by orders@3)."""

    def __init__(self, db: Db, pause: float = 0.0) -> None:
        self.db = db
        self.pause = pause
        self.orders: list[int] = []
        self._customer, self._products = txw._ids(db)
        self._placing = threading.Event()
        self._thread = threading.Thread(target=self._place, daemon=True)

    def _ours(self, h: dict[str, bytes]) -> bool:
        source = h.get(HEADER_SOURCE_TOPIC, b"").decode()
        return h.get(HEADER_TRANSLATOR) == b"orders@3" and source.startswith(f"{self.db.server}.")

    def ids(self, isolation: str) -> list[str]:
        bootstrap = self.db.endpoints.bootstrap_servers
        return event_ids(bootstrap, [BUSINESS], self._ours, isolation)

    def _place(self) -> None:
        with self.db.conn.cursor() as cur:
            while self._placing.is_set():
                n = len(self.orders)
                lines = [(self._products[n % 3], 1 + n % 4)] * 20
                cur.execute("BEGIN")
                self.orders.append(txw.place(cur, self._customer, lines))
                cur.execute("COMMIT")
                time.sleep(self.pause)

    def start(self) -> None:
        self._placing.set()
        self._thread.start()

    def stop(self) -> None:
        self._placing.clear()
        if self._thread.is_alive():
            self._thread.join(30)

    def assert_once(self, committed: list[str], after: str = "") -> None:
        """Each order placed has its event among the ``committed`` ids, once."""
        twice = read_twice(committed)
        assert len(set(committed)) == len(self.orders)
        assert not twice, f"{len(twice)} events read_committed more than once{after}"

    def all_committed(self) -> list[str]:
        """Stops placing and waits until a read_committed reader has every order's event:
        the ids it read then."""
        self.stop()
        wait_for(
            lambda: len(set(self.ids("read_committed"))) >= len(self.orders),
            180,
            f"{len(self.orders)} orders placed",
        )
        time.sleep(2)  # any copy that would (wrongly) follow
        return self.ids("read_committed")


@pytest.fixture
def kafka(bizevents_stack_on: Callable[[Any], Endpoints]) -> Endpoints:
    return bizevents_stack_on("kafka")


def test_row_worker_killed_again_and_again_gives_each_event_once(
    kafka: Endpoints, tmp_path: Path
) -> None:
    """The row worker: each block's outputs and its offsets in one transaction. Killed
    three times while a block's transaction is open with records sent; then every
    expected event reaches the read_committed reader once, and a read_uncommitted
    reader sees the aborted blocks' copies."""
    setup = Setup.fresh(kafka, tmp_path, "eo", "eo")
    server = setup.server
    encoder = orders_encoder(kafka.registry_url, server)
    changes = order_story(server, 12000)
    expected = expected_ids(changes)
    records = [encoder.encode(c) for c in changes]
    ours = lambda h: h.get(HEADER_SOURCE_TOPIC) == setup.topic.encode()  # noqa: E731
    env = {**EXACTLY_ONCE, "BIZEVENTS_TRANSLATE__MAX_POLL_RECORDS": "1000"}

    def uncommitted_copies() -> int:
        ids = event_ids(kafka.bootstrap_servers, ORDER_TOPICS, ours, "read_uncommitted")
        return len(ids) - len(set(ids))

    kills = aborting = 0
    produce(kafka.bootstrap_servers, setup.topic, records)
    worker = setup.worker("w0", **env)
    try:
        # each worker is killed soon after it starts translating the backlog, once a
        # block's transaction is open with records sent (which the next one aborts)
        while kills < ROW_KILLS or (not aborting and kills < MAX_KILLS):
            worker.wait_assigned(60)
            before = consumed(worker)
            wait_for(partial(translated_more, worker, before), 60, "translating", [worker])
            aborting += kill_in_open_transaction(worker, kafka.bootstrap_servers, ORDER_TOPICS)
            kills += 1
            worker = setup.worker(f"w{kills}", **env)

        def all_committed() -> list[str] | None:
            ids = event_ids(kafka.bootstrap_servers, ORDER_TOPICS, ours, "read_committed")
            return ids if set(ids) >= set(expected) else None

        committed = wait_for(all_committed, 180, f"all {len(expected)} events", [worker])
        time.sleep(2)  # any copy that would (wrongly) follow
        committed = event_ids(kafka.bootstrap_servers, ORDER_TOPICS, ours, "read_committed")
        # an aborted block shows as copies once the next worker published it again
        copies = uncommitted_copies()
    finally:
        worker.stop()
    twice = read_twice(committed)
    assert set(committed) == set(expected)
    assert not twice, f"{len(twice)} events read_committed more than once after {kills} kills"
    assert aborting, f"no kill of {kills} found a transaction open with records sent"
    assert copies > 0, f"no aborted transaction seen by read_uncommitted in {kills} kills"
    print(
        f"{len(expected)} events once after {kills} kills, {aborting} in an open transaction;"
        f" {copies} aborted copies"
    )


def test_row_worker_never_moves_its_group_offsets_back(kafka: Endpoints, tmp_path: Path) -> None:
    """Each block's transaction commits its next offset; nothing commits an older one
    after it. Faust's commit timer did: its offsets, read while a block held the
    partition's transaction, were committed after that block's, and a worker killed
    before the next block's commit had its successor translate the block again (the
    kill test above read 994 events twice)."""
    setup = Setup.fresh(kafka, tmp_path, "eb", "eb")
    server = setup.server
    encoder = orders_encoder(kafka.registry_url, server)
    records = [encoder.encode(c) for c in order_story(server, 6000)]
    produce(kafka.bootstrap_servers, setup.topic, records)
    partitions = [TopicPartition(setup.topic, p) for p in range(4)]
    ends = {}
    watcher = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": setup.group})
    for tp in partitions:
        ends[tp.partition] = watcher.get_watermark_offsets(tp, timeout=10)[1]
    env = {
        **EXACTLY_ONCE,
        "BIZEVENTS_TRANSLATE__MAX_POLL_RECORDS": "1000",
        "BIZEVENTS_TRANSLATE__COMMIT_INTERVAL_S": "0.1",  # Faust's timer, often
    }
    worker = setup.worker("w", **env)
    highest = dict.fromkeys(ends, -1)
    backwards: list[str] = []
    try:
        deadline = time.monotonic() + 180
        while any(highest[p] < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"offsets {highest}, ends {ends}"
            worker.check_alive()
            try:
                committed = watcher.committed(partitions, timeout=10)
            except KafkaException as exc:  # the group's coordinator, not found yet
                assert exc.args[0].code() in COORDINATOR_NOT_YET, str(exc)
                time.sleep(0.1)
                continue
            for tp in committed:
                if tp.offset < 0:  # none committed yet
                    continue
                if tp.offset < highest[tp.partition]:
                    backwards.append(f"[{tp.partition}] {highest[tp.partition]} -> {tp.offset}")
                highest[tp.partition] = max(highest[tp.partition], tp.offset)
            time.sleep(0.01)
    finally:
        watcher.close()
        worker.stop()
    assert not backwards, f"the group's offsets went back {len(backwards)} times: {backwards[:10]}"


def cancel_plugin_env(setup: Setup) -> dict[str, str]:
    """cancelorders@1 pinned (tests/integration/cancel_plugin.py), found through an entry
    point in a .dist-info folder on the worker's PYTHONPATH."""
    site = setup.tmp / "site"
    install_plugin(
        site,
        "bizevents-cancel-test",
        "cancelorders",
        "tests.integration.cancel_plugin:cancelorders_v1",
    )
    return {
        "PYTHONPATH": plugin_pythonpath(site),
        "BIZEVENTS_TRANSLATORS": json.dumps({"cancelorders": 1}),
    }


def test_row_worker_reads_again_a_block_whose_transaction_aborted_while_it_goes_on(
    kafka: Endpoints, tmp_path: Path
) -> None:
    """A block's transaction aborted by a cancellation (Faust restarts the agent, the
    worker keeps its partitions): the block is translated again before its partition's
    next block commits. Each block used to commit its own next offset whatever became of
    the blocks before it, and the aborted block's events never reached a read_committed
    reader (docs/reliability.md, finding 9)."""
    from bizevents_store.translators import orders_v2

    from bizevents.contracts.change import Change
    from bizevents.translators.lineage import stamp

    setup = Setup.fresh(kafka, tmp_path, "ec", "ec")
    changes = order_story(setup.server, 1500)
    expected = {
        event.lineage.event_id
        for change in changes
        for event in stamp(orders_v2.translate(Change(change)), change, "cancelorders", 1)
    }
    encoder = orders_encoder(kafka.registry_url, setup.server)
    produce(kafka.bootstrap_servers, setup.topic, [encoder.encode(c) for c in changes])
    ours = lambda h: h.get(HEADER_SOURCE_TOPIC) == setup.topic.encode()  # noqa: E731
    partitions = [TopicPartition(setup.topic, p) for p in range(4)]
    watcher = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": setup.group})
    ends = [watcher.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions]

    def all_committed() -> bool:
        try:
            committed = watcher.committed(partitions, timeout=10)
        except KafkaException as exc:  # the group's coordinator, not found yet
            assert exc.args[0].code() in COORDINATOR_NOT_YET, str(exc)
            return False
        return [tp.offset for tp in committed] == ends

    env = {
        **EXACTLY_ONCE,
        **cancel_plugin_env(setup),
        "BIZEVENTS_TRANSLATE__MAX_POLL_RECORDS": "100",  # many blocks per partition
    }
    worker = setup.worker("w", **env)
    try:
        wait_for(all_committed, 120, f"the group's offsets at the ends {ends}", [worker])
        committed = event_ids(kafka.bootstrap_servers, ORDER_TOPICS, ours, "read_committed")
        worker.check_alive()
    finally:
        watcher.close()
        worker.stop()
    cancelled = [x for x in worker.lines() if "CancelledError" in str(x.get("event"))]
    assert cancelled, "no block's transaction was cancelled"
    missing = expected - set(committed)
    assert not missing, f"{len(missing)} of {len(expected)} events never read_committed"
    assert not read_twice(committed)


@pytest.fixture
def kafka_db(kafka: Endpoints) -> Iterator[Db]:
    with txw.store_db(kafka) as made:
        yield made


def test_transaction_worker_killed_again_and_again_gives_each_event_once(
    kafka_db: Db, tmp_path: Path
) -> None:
    """The transaction worker: its outputs since a checkpoint and the checkpoint in one
    transaction. Orders placed while it is killed and restarted, until a
    read_uncommitted reader has seen an aborted transaction's copies; every order's
    OrderPlaced reaches the read_committed reader once."""
    db = kafka_db
    group = f"tx-eo-{uuid.uuid4().hex[:8]}"
    load = OrderLoad(db)
    ids = load.ids

    def worker(n: int) -> txw.Worker:
        made = txw.Worker(db, group, f"{group}.dlq", tmp_path / f"w{n}.log")
        made.env.update(EXACTLY_ONCE)
        made.env["BIZEVENTS_TRANSACTIONS__TRANSACTION_TIMEOUT_S"] = "5"
        return made.start()

    kills = 0
    copies = 0
    with txw.capturing(db, tmp_path):
        current = worker(0)
        load.start()
        try:
            # each member is killed while it publishes under load: its open transaction
            # holds events; the aborted ones show as copies once the next member
            # published them again
            while kills < MAX_KILLS and not copies:
                read = ids("read_uncommitted")
                copies = len(read) - len(set(read))
                wait_for(partial(published_more, ids, len(read) + 20), 90, "orders@3 publishing")
                assert current.alive(), current.tail()
                current.signal(signal.SIGKILL)
                kills += 1
                current = worker(kills)
            committed = load.all_committed()
            read = ids("read_uncommitted")
            copies = len(read) - len(set(read))
            assert current.alive(), current.tail()
        finally:
            load.stop()
            current.signal(signal.SIGTERM)
    load.assert_once(committed, f" after {kills} kills")
    assert copies > 0, f"no aborted transaction seen by read_uncommitted in {kills} kills"
    print(f"{len(load.orders)} orders once after {kills} kills; {copies} aborted copies")


def test_transaction_worker_whose_transaction_the_broker_aborted_goes_on(
    kafka_db: Db, tmp_path: Path
) -> None:
    """A member held up past its transaction's timeout (stopped here; in the fault suite,
    a restarting cluster) finds that the broker aborted its transaction and fenced its
    producer: a new producer takes over, the member reads again from its checkpoints,
    and every order's OrderPlaced reaches the read_committed reader once. The member
    exited 1 on it (the fault suite: "Invalid state transition FATAL_ERROR ->
    ABORTING_TRANSACTION")."""
    db = kafka_db
    group = f"tx-fenced-{uuid.uuid4().hex[:8]}"
    load = OrderLoad(db)
    ids = load.ids
    member = txw.Worker(db, group, f"{group}.dlq", tmp_path / "w.log")
    member.env.update(EXACTLY_ONCE)
    member.env["BIZEVENTS_TRANSACTIONS__TRANSACTION_TIMEOUT_S"] = "2"
    member.env["BIZEVENTS_TRANSLATE__COMMIT_INTERVAL_S"] = "0.2"
    bootstrap = db.endpoints.bootstrap_servers

    with txw.capturing(db, tmp_path):
        member.start()
        load.start()
        try:
            met = taken_over = False
            for _ in range(3):  # each try stops it for up to OPEN_WAIT_S to find one open
                wait_for(partial(published_more, ids, len(ids("read_uncommitted")) + 20), 90, "-")
                assert member.process is not None
                rebuilds = member.log.read_text().count(REBUILT)
                met = stop_in_open_transaction(member.process, bootstrap, [BUSINESS])
                if not met:
                    continue
                time.sleep(5)  # its transaction outlives its timeout: the broker aborts it
                member.process.send_signal(signal.SIGCONT)
                deadline = time.monotonic() + 60
                while not taken_over and time.monotonic() < deadline:
                    # the member reads again from its checkpoints under new producers
                    taken_over = member.log.read_text().count(REBUILT) > rebuilds
                    assert member.alive(), member.tail()
                    time.sleep(0.5)
                break
            assert met, "no stop met an open transaction in 3 tries"
            assert taken_over, "no new producers within 60 s of resuming"
            seen = len(set(ids("read_committed")))
            wait_for(lambda: len(set(ids("read_committed"))) > seen + 20, 90, "orders@3 going on")
            committed = load.all_committed()
            assert member.alive(), member.tail()
        finally:
            load.stop()
            resume_and_stop(member)
    load.assert_once(committed)


def test_exactly_once_is_refused_with_a_sentence_on_the_embedded_broker(
    bizevents_stack_on: Callable[[Any], Endpoints], tmp_path: Path
) -> None:
    """Tansu has no transactions (aiokafka's InitProducerId v0 fails on it): the worker
    says so in one sentence and exits 1 (on Tansu's stack, whichever broker the suite
    runs on)."""
    tansu = bizevents_stack_on("tansu")
    setup = Setup(tansu, "eotansu", "eotansu.store.orders", "dlq", "g", tmp_path)
    done = bizevents("translate", env=setup.env(**EXACTLY_ONCE), cwd=REPO, timeout=90)
    assert done.returncode == 1, done.stderr[-3000:]
    assert 'translate.processing_guarantee = "exactly_once" needs a broker' in done.stderr
    assert "embedded (tansu) broker" in done.stderr
    assert 'use "at_least_once" there' in done.stderr
    assert "Traceback" not in done.stderr


def test_the_consumer_kit_skips_aborted_events_on_kafka(
    kafka: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    """The kit reads read_committed where the broker has transactions: an event of an
    aborted transaction (a killed worker's) is never handed to the handler."""
    from confluent_kafka import Producer

    from tests.consumers.test_consumer import Kit, _run_until

    kit = Kit(kafka, unique_topic("prices"), partitions=1)
    kit.producer = Producer({**kit.kafka.librdkafka(), "transactional.id": kit.topic})
    kit.producer.init_transactions(30)
    for seq, commit in ((1, True), (2, False), (3, True)):
        kit.producer.begin_transaction()
        kit.send(kit.event("k", seq, f"k/{seq}"), "k")
        assert kit.producer.flush(30) == 0  # on the broker before the end
        if commit:
            kit.producer.commit_transaction(30)
        else:
            kit.producer.abort_transaction(30)
    seen: list[int] = []
    consumer = kit.consumer(lambda d: seen.append(d.event.seq), unique_topic("group"))
    asyncio.run(_run_until(consumer, lambda: len(seen) >= 2, 60))
    assert seen == [1, 3]


def test_read_latest_reads_a_transactional_topic_to_its_end(
    kafka: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    """The transaction worker's checkpoints and hand-overs are written in transactions:
    read_latest ends past the last commit marker (no record carries its offset)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from bizevents.plumbing.kafka import ensure_topics, read_latest

    topic = unique_topic("state")
    conf: dict[str, str | int | float | bool] = {"bootstrap.servers": kafka.bootstrap_servers}
    ensure_topics(AdminClient(conf), [topic], 1)
    producer = Producer({**conf, "transactional.id": topic})
    producer.init_transactions(30)
    for value in (b"one", b"two"):
        producer.begin_transaction()
        producer.produce(topic, value, b"key")
        producer.commit_transaction(30)
    assert read_latest(conf, topic, "reader") == {b"key": b"two"}


def test_transaction_worker_paused_past_its_session_is_fenced_by_the_next_owner(
    kafka_db: Db, tmp_path: Path
) -> None:
    """Two members; one is stopped (SIGSTOP) past its session with its transaction open
    (its timeout far away), the other takes its virtual partitions over and publishes
    their events again, then the first resumes. Its producer must be fenced: with a
    transactional id of its own per member, it committed its open transaction on
    resuming, and a read_committed reader read those events twice."""
    db = kafka_db
    group = f"tx-paused-{uuid.uuid4().hex[:8]}"
    load = OrderLoad(db, pause=0.02)
    ids = load.ids

    def member(name: str) -> txw.Worker:
        made = txw.Worker(db, group, f"{group}.dlq", tmp_path / f"{name}.log")
        made.env.update(EXACTLY_ONCE)
        made.env["BIZEVENTS_TRANSACTIONS__TRANSACTION_TIMEOUT_S"] = "120"  # no abort by time
        made.env["BIZEVENTS_TRANSLATE__COMMIT_INTERVAL_S"] = "4"  # a transaction open long
        return made.start()

    def owns(worker: txw.Worker) -> list[int]:
        """The virtual partitions of the member's last rebuild."""
        found: list[int] = []
        for line in worker.log.read_text().splitlines():
            if '"assembling"' in line:
                found = json.loads(line)["partitions"]
        return found

    with txw.capturing(db, tmp_path):
        first, second = member("a"), member("b")
        load.start()
        try:
            wait_for(lambda: len(owns(first)) == 2 and len(owns(second)) == 2, 120, "a share each")
            copies = 0
            for _ in range(3):  # a stop that met no open transaction of events: again
                wait_for(partial(published_more, ids, len(ids("read_uncommitted")) + 20), 90, "-")
                assert first.process is not None
                first.process.send_signal(signal.SIGSTOP)
                try:
                    wait_for(lambda: len(owns(second)) == 4, 90, "the second member taking all")
                    # it publishes the partitions' events again, from their checkpoints
                    wait_for(
                        partial(published_more, ids, len(ids("read_uncommitted")) + 20), 90, "-"
                    )
                finally:
                    first.process.send_signal(signal.SIGCONT)
                wait_for(lambda: len(owns(first)) == 2 and len(owns(second)) == 2, 120, "shared")
                read = ids("read_uncommitted")
                copies = len(read) - len(set(read))
                if copies:
                    break
            assert copies > 0, "no stop met an open transaction of events in 3 tries"
            committed = load.all_committed()
            assert first.alive(), first.tail()
            assert second.alive(), second.tail()
        finally:
            load.stop()
            resume_and_stop(first)
            resume_and_stop(second)
    load.assert_once(committed, f" ({copies} copies)")
