"""The transaction worker against a broker that stops answering longer than it waits for
an acknowledgement: it reads again from its checkpoints instead of exiting.

The broker is this test's own (a ``SIGSTOP`` pause of the session broker would stop the
other tests); PostgreSQL and the schema registry are the session's.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import psycopg2
import pytest

from bizevents.devstack import Endpoints
from tests.capture.core.test_sink import DedicatedBroker
from tests.integration.test_transaction_worker import (
    Reader,
    Worker,
    _check,
    _ids,
    capturing,
    place,
    store_db,
    truth,
)

pytestmark = pytest.mark.integration

#: The worker's request timeout in this test, and the pause: several timeouts long.
TIMEOUT_S = 2.0
PAUSE_S = 8.0
#: The worker's stop timeout in this test, and how soon it must have exited: its turn
#: and then its clients have the stop timeout each.
STOP_TIMEOUT_S = 3.0
STOPPED_WITHIN_S = 15.0


def _stopped(worker: Worker) -> int:
    """SIGTERM, and the worker's exit code within ``STOPPED_WITHIN_S``."""
    assert worker.process is not None
    worker.process.send_signal(signal.SIGTERM)
    try:
        return worker.process.wait(STOPPED_WITHIN_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"not stopped {STOPPED_WITHIN_S} s after SIGTERM: {worker.tail()}")


def test_a_broker_pause_past_the_request_timeout_is_survived_and_a_stop_is_bounded(
    bizevents_stack: Endpoints, tmp_path: Path
) -> None:
    """Orders placed while the broker is paused for four request timeouts: the worker
    stays up, logs that it reads again from its checkpoints, and every order is placed
    once (one id) with its items and true total. Then, the broker paused again, a
    SIGTERM stops it within its stop timeout, exit 0."""
    broker = DedicatedBroker(tmp_path / "broker")
    try:
        endpoints = replace(bizevents_stack, bootstrap_servers=broker.start())
        with store_db(endpoints) as db:
            customer, products = _ids(db)
            group = f"tx-outage-{uuid.uuid4().hex[:8]}"
            worker = Worker(db, group, f"{group}.dlq", tmp_path / "worker.log")
            worker.env["BIZEVENTS_TRANSACTIONS__REQUEST_TIMEOUT_S"] = str(TIMEOUT_S)
            worker.env["BIZEVENTS_TRANSACTIONS__STOP_TIMEOUT_S"] = str(STOP_TIMEOUT_S)
            reader = Reader(db)
            orders: list[int] = []
            writing = threading.Event()
            writing.set()

            def write() -> None:  # orders all along: the worker has sends out at the pause
                conn = psycopg2.connect(db.endpoints.postgres_dsn)  # one transaction each
                try:
                    with conn.cursor() as cur:
                        n = 0
                        while writing.is_set():
                            orders.append(place(cur, customer, [(products[n % 3], n % 5 + 1)]))
                            conn.commit()
                            n += 1
                            time.sleep(0.02)
                finally:
                    conn.close()

            with capturing(db, tmp_path) as run:
                worker.start()
                try:
                    with db.conn.cursor() as cur:
                        cur.execute("BEGIN")
                        first = place(cur, customer, [(products[0], 1)])
                        cur.execute("COMMIT")
                    reader.wait({first}, worker)  # the worker runs and publishes
                    writer = threading.Thread(target=write)
                    writer.start()
                    try:
                        time.sleep(1.0)
                        broker.pause()
                        time.sleep(PAUSE_S)
                        broker.resume()
                        time.sleep(3.0)
                    finally:
                        writing.clear()
                        writer.join(30)
                    run.wait_acked(db.wal_lsn())
                    placed = {first, *orders}
                    events = reader.wait(placed, worker, timeout=120)
                    assert worker.alive(), worker.tail()
                    _check(events, truth(db, sorted(placed)))
                    assert "reading again from the checkpoints" in worker.log.read_text()
                    # stopped while the broker does not answer: it exits within its
                    # stop timeout (each of its clients would wait for the broker)
                    broker.pause()
                    try:
                        code = _stopped(worker)
                    finally:
                        broker.resume()
                    assert code == 0, worker.tail()
                    assert "Traceback" not in worker.log.read_text()
                finally:
                    reader.close()
                    if worker.alive():
                        worker.signal(signal.SIGTERM)
    finally:
        broker.close()


def test_a_stop_while_the_group_holds_the_join_ends_at_once(
    bizevents_stack: Endpoints, tmp_path: Path
) -> None:
    """Joining the group waits until the group gives the member its share, which a
    rebalance holds while another member has not rejoined: here a member that stopped
    polling (its rebalance timeout minutes long). A SIGTERM meanwhile stops the worker
    within seconds, exit 0: it does not wait for a share it would give back at once."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    from bizevents.plumbing.kafka import ensure_topics

    with store_db(bizevents_stack) as db, capturing(db, tmp_path):
        group = f"tx-join-{uuid.uuid4().hex[:8]}"
        bootstrap = db.endpoints.bootstrap_servers
        ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), [f"{group}.assembly"], 4)
        holder = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{group}.assemble",
                "session.timeout.ms": 30_000,
                "max.poll.interval.ms": 300_000,  # its rebalance timeout
                "partition.assignment.strategy": "roundrobin",
            }
        )
        given: list[int] = []
        holder.subscribe(
            [f"{group}.assembly"], on_assign=lambda c, tps: given.extend(tp.partition for tp in tps)
        )
        try:
            deadline = time.monotonic() + 60
            while not given and time.monotonic() < deadline:
                holder.poll(0.2)
            assert given, "the holding member was never given the partitions"
            # from here on it does not poll: a rebalance waits for it
            worker = Worker(db, group, f"{group}.dlq", tmp_path / "worker.log")
            worker.env["BIZEVENTS_TRANSACTIONS__STOP_TIMEOUT_S"] = str(STOP_TIMEOUT_S)
            worker.start()
            try:
                deadline = time.monotonic() + 60
                while "translating transactions" not in worker.log.read_text():
                    assert worker.alive() and time.monotonic() < deadline, worker.tail()
                    time.sleep(0.2)
                time.sleep(5.0)  # asking to join, held by the rebalance
                assert '"assembling"' not in worker.log.read_text(), (
                    "the group gave the worker its share: the join was not held",
                    worker.tail(),
                )
                code = _stopped(worker)
                assert code == 0, worker.tail()
                assert "Traceback" not in worker.log.read_text()
            finally:
                if worker.alive():
                    assert worker.process is not None
                    worker.process.kill()
        finally:
            holder.close()


def _assembling(worker: Worker, times: int, within_s: float = 60.0) -> None:
    """Wait until ``worker`` was given a share ``times`` times (its "assembling" lines)."""
    deadline = time.monotonic() + within_s
    while worker.log.read_text().count('"assembling"') < times:
        assert worker.alive(), worker.tail()
        assert time.monotonic() < deadline, (
            f"not given a share {times} times within {within_s:.0f} s",
            worker.tail(),
        )
        time.sleep(0.2)


#: The group's session timeout and heartbeat interval in the leave test: a heartbeat
#: seldom enough that the leader stops before it learns of the rebalance.
SESSION_S = 9.0
HEARTBEAT_S = 3.0


def test_a_stop_while_the_group_rebalances_leaves_it_able_to_form(
    bizevents_stack: Endpoints, tmp_path: Path
) -> None:
    """The embedded broker keeps a member that leaves a rebalancing group as the group's
    leader for ever, and gives no later member a share (docs/broker.md; the fault suite
    lost a transaction group so, finding 8 of docs/reliability.md). The group's leader,
    a worker, is stopped just after a third member asked to join, before its next
    heartbeat would tell it of the rebalance; once the other members are gone, a new
    worker gets its share: the stopped one did not leave (``stay_in_group``), and the
    broker dropped it, with its leadership, after the session timeout. Against a worker
    that leaves on stop, the new one waited without a share (in most runs: the leave must
    come before the leader's next heartbeat)."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    from bizevents.plumbing.kafka import ensure_topics

    with store_db(bizevents_stack) as db, capturing(db, tmp_path):
        group = f"tx-lead-{uuid.uuid4().hex[:8]}"
        bootstrap = db.endpoints.bootstrap_servers
        ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), [f"{group}.assembly"], 4)
        timing = {
            "BIZEVENTS_TRANSLATE__SESSION_TIMEOUT_S": str(SESSION_S),
            "BIZEVENTS_TRANSLATE__HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
            "BIZEVENTS_TRANSACTIONS__STOP_TIMEOUT_S": str(STOP_TIMEOUT_S),
        }

        def member() -> tuple[Consumer, list[int]]:
            consumer = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"{group}.assemble",
                    "session.timeout.ms": int(SESSION_S * 1000),  # the group takes the last
                    "heartbeat.interval.ms": int(HEARTBEAT_S * 1000),
                    "partition.assignment.strategy": "roundrobin",
                }
            )
            given: list[int] = []
            consumer.subscribe(
                [f"{group}.assembly"],
                on_assign=lambda c, tps: given.extend(tp.partition for tp in tps),
            )
            return consumer, given

        leader = Worker(db, group, f"{group}.dlq", tmp_path / "leader.log")
        leader.env.update(timing)
        leader.env["BIZEVENTS_LOG_LEVEL"] = "DEBUG"  # its heartbeats, to stop it between two
        leader.start()
        second = joiner = None
        try:
            _assembling(leader, 1)  # alone: the group's first member, its leader
            second, given = member()  # a rebalance: the leader's generation is past 0
            deadline = time.monotonic() + 60
            while not given and time.monotonic() < deadline:
                second.poll(0.2)
            assert given, "the second member was never given partitions"
            beat = f'"Heartbeat: {group}.assemble['
            beats = leader.log.read_text().count(beat)
            deadline = time.monotonic() + 30
            while leader.log.read_text().count(beat) == beats:
                assert time.monotonic() < deadline, leader.tail()
                time.sleep(0.02)
            # just after a heartbeat: a third member asks to join, and the leader stops
            joiner, _ = member()
            until = time.monotonic() + 0.3
            while time.monotonic() < until:
                joiner.poll(0.05)
            assert _stopped(leader) == 0, leader.tail()
        finally:
            if leader.alive():
                assert leader.process is not None
                leader.process.kill()
            for consumer in (second, joiner):
                if consumer is not None:
                    consumer.close()
        fresh = Worker(db, group, f"{group}.dlq", tmp_path / "fresh.log")
        fresh.env.update(timing)
        fresh.start()
        try:
            _assembling(fresh, 1)
        finally:
            if fresh.alive():
                fresh.signal(signal.SIGTERM)
