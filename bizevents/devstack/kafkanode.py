"""Apache Kafka as the dev stack's broker: one KRaft node, or a cluster of three.

Each node is broker and controller in one JVM (``kafka.Kafka server.properties``), on
free loopback ports, its data on disk in the state folder (``<state>/kafka/node-N``),
formatted once by ``kafka.tools.StorageTool``: ``dev down`` then ``dev up`` keeps the
topics. A cluster's plan (its id, each node's ports) is kept in ``kafka/cluster.json``
so a node restarted alone finds its peers. Each node is a service of its own in the
stack's state file (``broker``, ``broker-2``, ...); every record's endpoint is the whole
cluster's bootstrap list, so clients reach the cluster while any node lives.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bizevents.devstack.files import private_dir
from bizevents.devstack.kafkajars import classpath
from bizevents.devstack.processes import (
    StackError,
    claim_port,
    free_port,
    port_is_free,
    run_once,
    spawn,
    wait_until,
)
from bizevents.devstack.services import Broker, Postgres, Registry, Service, Started, _tcp_open
from bizevents.settings import DevSettings

#: Settings every node gets; the replication ones depend on the cluster's size.
_BROKER_SETTINGS = {
    # a new group forms at once (Kafka waits 3 s by default for more members)
    "group.initial.rebalance.delay.ms": "0",
    # as the embedded broker's auto-created topics, so tests see the same counts
    "num.partitions": "4",
    # compaction runs soon after a segment rolls (tests roll them with segment.ms)
    "log.cleaner.backoff.ms": "1000",
    # a killed worker's open transaction is aborted soon after its timeout (10 s by
    # default), so read_committed readers wait for it that long, not 20 s
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "auto.create.topics.enable": "true",
    # a technical record is a whole row: the dev stack takes records of up to 10 MB, as a
    # production cluster is set up for its widest table (Kafka's default is 1 MiB)
    "message.max.bytes": "10485760",
    "replica.fetch.max.bytes": "10485760",
}

_LOG4J = """\
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
"""


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not Path(found).is_file():
        raise StackError(
            "Apache Kafka needs a Java 17 runtime and `java` is not on the PATH; install it "
            "(`apt-get install openjdk-17-jre-headless`; in a source checkout, scripts/setup) "
            "or use --broker tansu"
        )
    return found


@dataclass(frozen=True, slots=True)
class NodePorts:
    client: int
    controller: int


def _plan_file(state_dir: Path) -> Path:
    return state_dir / "kafka" / "cluster.json"


def _new_cluster_id() -> str:
    """Kafka's own form of a cluster id: 16 random bytes, URL-safe base64, no padding,
    and (as Kafka's ``Uuid.randomUuid``) never starting with ``-``, which the storage
    tool would read as an option (1 start in 64 failed)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _plan(state_dir: Path, dev: DevSettings, nodes: int, node: int) -> tuple[str, list[NodePorts]]:
    """The cluster's id and ports: the kept plan while this node's ports are free, else
    new ports (for node 1 only, the one that starts a cluster)."""
    path = _plan_file(state_dir)
    cluster_id = _new_cluster_id()
    ports: list[NodePorts] = []
    try:
        raw: dict[str, Any] = json.loads(path.read_text())
        cluster_id = str(raw["cluster_id"])
        ports = [NodePorts(int(p["client"]), int(p["controller"])) for p in raw["nodes"]]
    except (OSError, ValueError, KeyError, TypeError):
        ports = []
    if ports and len(ports) != nodes:
        raise StackError(
            f"the state folder {state_dir} holds a Kafka cluster of {len(ports)} node(s), "
            f"not {nodes}; `bizevents dev down --purge` first to start another"
        )
    mine = ports[node - 1] if ports else None
    if (
        mine is not None
        and all(port_is_free(dev.host, p) for p in (mine.client, mine.controller))
        and dev.broker_port in (0, mine.client - node + 1)
    ):
        return cluster_id, ports
    if node != 1:
        raise StackError(
            f"the Kafka node {node} cannot take its ports again (another process holds them); "
            "run `bizevents dev down` and `bizevents dev up` to start the cluster on new ones"
        )
    ports = []
    for n in range(1, nodes + 1):
        wanted = 0 if dev.broker_port == 0 else dev.broker_port + n - 1
        client = claim_port(dev.host, wanted, f"Kafka node {n}", "BIZEVENTS_DEV__BROKER_PORT")
        controller = free_port(dev.host)
        ports.append(NodePorts(client, controller))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "cluster_id": cluster_id,
                "nodes": [{"client": p.client, "controller": p.controller} for p in ports],
            }
        )
    )
    return cluster_id, ports


class KafkaNode:
    """Node ``node`` of an Apache Kafka cluster of ``nodes`` (KRaft, combined roles)."""

    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM
    #: ``down`` signals every node before it waits for any (see DevStack.down).
    stops_together: ClassVar[bool] = True

    def __init__(self, node: int = 1, nodes: int = 1):
        self.node = node
        self.nodes = nodes
        # the first node keeps the name the stack and its readers know the broker by
        self.name = "broker" if node == 1 else f"broker-{node}"

    def _properties(self, dev: DevSettings, data: Path, cluster: list[NodePorts]) -> dict[str, str]:
        me = cluster[self.node - 1]
        replicas = str(min(3, self.nodes))
        in_sync = str(2 if self.nodes >= 3 else 1)
        voters = ",".join(f"{n}@{dev.host}:{p.controller}" for n, p in enumerate(cluster, start=1))
        return {
            "process.roles": "broker,controller",
            "node.id": str(self.node),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{dev.host}:{me.client},CONTROLLER://{dev.host}:{me.controller}",
            "advertised.listeners": f"PLAINTEXT://{dev.host}:{me.client}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data),
            "default.replication.factor": replicas,
            "min.insync.replicas": in_sync,
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": in_sync,
            **_BROKER_SETTINGS,
        }

    def start(self, state_dir: Path, dev: DevSettings) -> Started:
        jars = os.pathsep.join(classpath())
        runtime = java()
        cluster_id, cluster = _plan(state_dir, dev, self.nodes, self.node)
        root = state_dir / "kafka" / f"node-{self.node}"
        data = root / "data"
        private_dir(root)
        config = root / "server.properties"
        config.write_text(
            "".join(f"{k}={v}\n" for k, v in self._properties(dev, data, cluster).items())
        )
        log4j = root / "log4j2.properties"
        log4j.write_text(_LOG4J)
        jvm = [runtime, "-Xms256m", "-Xmx1g", f"-Dlog4j2.configurationFile={log4j}", "-cp", jars]
        if not (data / "meta.properties").is_file():
            fmt = ["format", "--ignore-formatted", "-t", cluster_id, "-c", str(config)]
            run_once(
                [*jvm, "kafka.tools.StorageTool", *fmt],
                f"formatting the Kafka node {self.node}'s storage failed",
            )
        log = state_dir / "logs" / f"{self.name}.log"
        proc = spawn([*jvm, "kafka.Kafka", str(config)], log, cwd=root)
        me = cluster[self.node - 1]
        bootstrap = ",".join(f"{dev.host}:{p.client}" for p in cluster)
        started = Started.spawned(
            proc.pid,
            me.client,
            bootstrap,
            log,
            {
                "kind": "kafka",
                "nodes": str(self.nodes),
                "listener": f"{dev.host}:{me.client}",
                "controller": f"{dev.host}:{me.controller}",
            },
        )
        what = f"Kafka node {self.node}"
        # A node's broker answers only once a quorum of controllers runs: the nodes of
        # a new cluster start one after another, and the last one waits for them all.
        wait_until(lambda: _tcp_open(dev.host, me.controller), what, proc, log)
        peers = [p for p in cluster if p is not me]
        if all(_tcp_open(dev.host, p.controller) for p in peers):
            wait_until(lambda: self._cluster_answers(started), what, proc, log, timeout=90)
        return started

    def _cluster_answers(self, started: Started) -> bool:
        """Every node of the cluster is registered and this one answers."""
        return _answers(started.extra["listener"], self.nodes)

    def healthy(self, started: Started) -> bool:
        return _answers(started.extra.get("listener", started.endpoint), 1)

    def purge(self, state_dir: Path) -> None:
        """Its data lives in the state folder."""

    def current(self, started: Started) -> Started:
        return started


def _answers(listener: str, brokers: int) -> bool:
    from confluent_kafka.admin import AdminClient

    host, _, port = listener.rpartition(":")
    if not _tcp_open(host, int(port)):
        return False
    admin = AdminClient({"bootstrap.servers": listener, "log_level": 0})
    try:
        meta = admin.list_topics(timeout=2)
    except Exception:  # librdkafka raises KafkaException for any failure here
        return False
    return len(meta.brokers) >= brokers


def recorded_broker(started: Started | None) -> tuple[str, int] | None:
    """The broker kind and node count a stack's record names (Tansu's records have none)."""
    if started is None:
        return None
    return started.extra.get("kind", "tansu"), int(started.extra.get("nodes", "1"))


def check_broker(dev: DevSettings, broker: Started | None) -> None:
    """A stack keeps its broker until ``dev down``: asking ``up`` for another broker than
    the recorded one is a :class:`StackError`, not a second broker beside the first."""
    recorded = recorded_broker(broker)
    asked = (dev.broker, dev.brokers if dev.broker == "kafka" else 1)
    if recorded is not None and {"broker", "brokers"} & dev.model_fields_set and recorded != asked:
        raise StackError(
            f"the stack runs {_describe(*recorded)}, not {_describe(*asked)}; "
            "run `bizevents dev down` first to change its broker"
        )


def remembered_cluster(state_dir: Path) -> int | None:
    """The node count of the Kafka cluster whose data the state folder keeps, if any."""
    try:
        return len(json.loads(_plan_file(state_dir).read_text())["nodes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stack_services(
    dev: DevSettings, broker: Started | None, state_dir: Path
) -> tuple[Service, ...]:
    """The stack's required services: the broker a running (or recorded) stack has, else
    the one the settings ask for, else the Kafka cluster whose data the state folder
    keeps (so ``dev down`` then ``dev up`` brings its topics back); then the schema
    registry and PostgreSQL."""
    remembered = remembered_cluster(state_dir)
    if {"broker", "brokers"} & dev.model_fields_set or remembered is None:
        asked = (dev.broker, dev.brokers)
    else:
        asked = ("kafka", remembered)
    kind, nodes = recorded_broker(broker) or asked
    if kind == "tansu":
        if nodes != 1:
            raise StackError("Tansu runs as one broker: --brokers needs --broker kafka")
        brokers: tuple[Service, ...] = (Broker(),)
    else:
        brokers = tuple(KafkaNode(n, nodes) for n in range(1, nodes + 1))
    return (*brokers, Registry(), Postgres())


def _describe(kind: str, nodes: int) -> str:
    return "Tansu" if kind == "tansu" else f"Apache Kafka ({nodes} node{'s' if nodes > 1 else ''})"
