"""Start-up's reads and topic creation on a three-node Apache Kafka cluster while the
whole cluster restarts: what the replay (and the workers) prepare before any task runs
waits for the cluster, ``broker_wait_s`` at most, instead of exiting on the first
``_TRANSPORT`` (the fault suite's runs S1 and L1 in docs/reliability.md)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bizevents.contracts.technical import AutoDecoder
from bizevents.devstack import DevStack
from bizevents.devstack.kafkanode import KafkaNode
from bizevents.plumbing.kafka import ensure_topics, read_latest
from bizevents.replay.plan import Planner
from bizevents.settings import DevSettings
from bizevents.translators.provenance import newest_changes

pytestmark = pytest.mark.integration

NODES = 3
#: What start-up is given to wait (the fault suite's broker_wait_s on three nodes).
WAIT_S = 180.0


@dataclass
class Cluster:
    """A three-node Kafka cluster of the test's own, whose nodes the test stops and starts."""

    stack: DevStack
    dev: DevSettings
    bootstrap: str
    pids: dict[int, int] = field(default_factory=dict)

    def stop_all(self, how: signal.Signals = signal.SIGTERM) -> None:
        """Signal every node at once, wait for each, and SIGKILL any left after a minute.
        SIGTERM is a clean stop, which waits for the quorum; the test's end sends SIGKILL
        (the state goes: a clean stop of nodes just restarted waited the whole minute)."""
        for pid in self.pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, how)
        for pid in self.pids.values():
            deadline = time.monotonic() + 60
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def start_all(self) -> None:
        for node in sorted(self.pids):
            self.pids[node] = KafkaNode(node, NODES).start(self.stack.state_dir, self.dev).pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # the nodes the test restarted are its children
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    dev = DevSettings(broker_port=0, broker="kafka", brokers=NODES)
    services = tuple(KafkaNode(n, NODES) for n in range(1, NODES + 1))
    stack = DevStack(tmp_path / "stack", dev, services=services, optional=())
    stack.up()
    records = json.loads(stack.state_file.read_text())["services"]
    found = Cluster(stack, dev, str(records["broker"]["endpoint"]))
    for n in range(1, NODES + 1):
        found.pids[n] = int(records["broker" if n == 1 else f"broker-{n}"]["pid"])
    try:
        yield found
    finally:
        found.stop_all(signal.SIGKILL)
        stack.down(purge=True)


def _replay_topics(kafka: dict[str, str]) -> None:
    admin = AdminClient({**kafka, "log.connection.close": False})
    found = ensure_topics(admin, ["orders.replay"], 2, timeout_s=5, wait_s=WAIT_S)
    assert found == {"orders.replay": 2}


def _replay_plan(kafka: dict[str, str]) -> None:
    spans = Planner(kafka, timeout_s=5, wait_s=WAIT_S).spans("orders", None, None)
    assert sum(s.end - s.start for s in spans) == 30


def _latest(kafka: dict[str, str]) -> None:
    latest = read_latest(kafka, "orders", "test-latest", timeout_s=5, wait_s=WAIT_S)
    assert latest == {f"k{n}".encode(): f"v{n}".encode() for n in range(30)}


def _provenance(kafka: dict[str, str]) -> None:
    # the records are no change events: the check reads the ends and finds none
    found = newest_changes(kafka, ["orders"], AutoDecoder(), timeout=5, wait_s=WAIT_S)
    assert found == {"orders": []}


#: Start-up's reads: the replay's topic creation and plan, a compacted topic's latest
#: values (capture's offsets, the workers' promotions), the transaction worker's check
#: of the newest changes.
READS = {
    "replay-topics": _replay_topics,
    "replay-plan": _replay_plan,
    "read-latest": _latest,
    "provenance": _provenance,
}


def test_start_up_reads_wait_for_a_cluster_restarting(cluster: Cluster) -> None:
    """Every read meets the cluster down, then one still electing its leaders: all at
    once, through one restart (a restart each took four minutes of the suite). Each
    answers as on a cluster that never stopped, and again once it settled."""
    kafka = {"bootstrap.servers": cluster.bootstrap}
    admin = AdminClient({**kafka, "log.connection.close": False})
    admin.create_topics([NewTopic("orders", 3)])["orders"].result(60)
    producer = Producer({**kafka, "acks": "all"})
    for n in range(30):
        producer.produce("orders", f"v{n}".encode(), f"k{n}".encode())
    assert producer.flush(60) == 0
    del producer  # its threads would go on calling the stopped nodes

    failed: dict[str, BaseException] = {}
    took: dict[str, float] = {}

    def timed(name: str) -> None:
        started = time.monotonic()
        try:
            READS[name](kafka)
        except BaseException as exc:  # the test's thread reports it
            failed[name] = exc
        took[name] = time.monotonic() - started

    cluster.stop_all()
    restarted = threading.Timer(8.0, cluster.start_all)
    restarted.start()
    reads = [threading.Thread(target=timed, args=(name,)) for name in READS]
    try:
        for read in reads:
            read.start()
        for read in reads:
            read.join(WAIT_S + 60)
    finally:
        restarted.join()
    assert failed == {}
    assert sorted(took) == sorted(READS)
    assert all(seconds > 5 for seconds in took.values()), took  # each met the cluster down
    for read_settled in READS.values():
        read_settled(kafka)
