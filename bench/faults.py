"""The fault suite: the store path under kills, a paused broker and a database restart.

Starts a private embedded stack (Tansu, the registry, PostgreSQL on free ports, and
MariaDB with ``--source mysql``), the store's schema in the source database,
``bizevents capture postgres`` (or ``capture mysql``) on the store's four tables, one
``bizevents translate`` worker (customers@1, products@1, orders@2), two
``bizevents translate --transactions`` workers in one group (orders@3, whole
transactions: docs/transactions.md), a consumer built with the consumer kit
(bench/faultsuite/consumer.py: the order topics, per-order state in PostgreSQL) and the
store's load generator (``bizevents_store.load.StoreLoad``, in a thread of this
process, reconnecting when the database goes away). Then, on a seeded random schedule:

- SIGKILL of capture, of the worker, of one of the transaction workers, of the
  consumer and of a ``bizevents replay`` run (orders@2 to the ``.replay`` topics;
  rerun with the same ``--run-id``), each restarted at once;
- SIGTERM of one of the transaction workers, started again at once: it stops without
  leaving its groups and joins them again as a new member, a rebalance (once the broker
  dropped the stopped member) while transactions are in flight;
- long transactions (one order of thousands of items), each followed at once by a
  rebalance of the transaction workers while they read it: a third member joins the
  first time, a member stopped (SIGTERM) and started again after that;
- SIGSTOP of the broker for 30 s (``--short``: 5 s), then SIGCONT (it keeps its data
  only in memory, so it is never restarted);
- a restart of the source database: ``pg_ctl restart -m fast`` of PostgreSQL as the
  devstack's server user, or SIGTERM of MariaDB and the devstack starting it again on
  the same port;
- MariaDB only: ``KILL`` of capture's binlog connection (the session whose command is
  ``Binlog Dump``) from another session;
- ``--broker kafka --brokers 3`` (Apache Kafka, three nodes or more): SIGKILL of the node
  leading most partitions of the orders' technical and business topics, restarted from
  its disk (``--long``: twice), and one restart of the whole cluster.

``--by-partition`` runs the transaction workers with ``transactions.by_partition``
(members own technical partitions, docs/transactions.md) over a capture routing the
tables orders@3 reads by the keys it declares, and the load places and moves on two
orders per transaction, so most of them cross partitions; the summary prints the share
that does (from END's ``partition_counts``) and the records forwarded through the
exchange topic.

A process that exits on its own is restarted too, as a supervisor would, and counted
as ``unexpected_exits`` with the tail of its log: that is a defect to report.

The truth is the database's own history. PostgreSQL: a second logical slot (pgoutput,
the same publication) is created before the load starts and peeked at the end, which
gives every committed change with its LSN in commit order. MariaDB: the binlog, read
from its first file to its end by a replica of the suite's own. Once capture confirmed
(PostgreSQL) or stored (MariaDB) the final position, the groups committed every record
and the replay finished, the suite counts:

- ``lost``: committed changes missing from the technical topics, business events
  missing from the business topics (the expected ones are computed here by the same
  ``Pipeline`` the worker runs, over the technical records), orders@3's events missing
  (the expected ones assembled here from the technical and transaction topics and
  translated by the same ``TransactionCore``: one id per event, so one OrderPlaced per
  order), replayed events missing from the ``.replay`` topics (the records of the
  replay's planned ranges), and event ids of the order topics the consumer never
  applied;
- ``duplicated_ids``: event ids seen more than once; each duplicate must carry the same
  content (lineage aside: a re-sent change sits at another offset) — else it counts in
  ``differing_duplicates`` (so does a repeat the consumer skipped whose content differs
  from what it applied);
- ``reordered``: per key, a change or an event that arrives after a later one of the
  same key without being a re-sent copy of one already seen (a restart may re-send a
  suffix; that is allowed, a new record out of order is not); for the consumer, per
  key and translator, an application out of commit order;
- ``applied_twice``: event ids the consumer applied twice at one rank (its state
  counted an event twice);
- each long transaction's order must be placed by orders@3 with every item and its
  total (``tx_wrong`` in the details).

Prints ``lost=0 duplicated_ids=N reordered=0 ...`` and exits 1 when anything was
lost, reordered, duplicated with other content, applied twice, or a component exited
on its own.

    .venv/bin/python bench/faults.py --short --seed 1                 # ~1-2 minutes
    .venv/bin/python bench/faults.py --long --seed 7                  # 32 kills, 30 s pause
    .venv/bin/python bench/faults.py --short --source mysql --seed 1  # MariaDB capture
    .venv/bin/python bench/faults.py --long --broker kafka --brokers 3 --exactly-once
    .venv/bin/python bench/faults.py --long --by-partition             # members own partitions
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import kit  # noqa: E402
from bench.faultsuite.consumer import Applied, check_applied, create_tables, order_topics  # noqa: E402
from bench.faultsuite.processes import Load, Supervised, alive, log, tail  # noqa: E402
from bench.faultsuite.report import Report, check_events, missing_sources  # noqa: E402
from bench.faultsuite.topics import (  # noqa: E402
    Rec,
    committed,
    content_of,
    end_offsets,
    read_topics,
    schema_lookup,
)
from bench.faultsuite.truth import (  # noqa: E402
    binlog_history,
    change_identity,
    gtid_seq,
    history,
    missing_neighbours,
    order_breaks,
)
from bench.translate_tx import crossing  # noqa: E402
from bizevents.cli.replay import SPARK_MISSING  # noqa: E402

__all__ = ["Applied", "Report", "check_applied", "gtid_seq", "main", "order_breaks"]

TABLES = ("store.customers", "store.products", "store.orders", "store.order_items")
TRANSLATORS = {"customers": 1, "products": 1, "orders": 2}
REPLAY_TRANSLATOR = "orders@2"
#: The transaction workers' translator (whole transactions: docs/transactions.md).
TX_TRANSLATOR = ("orders", 3)
TX_TABLES = ("store.orders", "store.order_items")
#: --by-partition: the least share of orders@3's transactions across partitions (issue 40)
CROSSING_AT_LEAST = 1 / 3


@dataclass(frozen=True)
class Mode:
    name: str
    load_seconds: float  # the faults happen while the load runs
    capture_kills: int
    worker_kills: int
    replay_kills: int
    pause_s: float
    steps_per_s: float
    #: SIGKILLs of one of the two transaction workers, and graceful stops (SIGTERM, then
    #: a start again: a rebalance of their groups) while transactions are in flight
    tx_kills: int = 0
    tx_leaves: int = 0
    #: MariaDB source only: ``KILL`` of capture's binlog connection (its ``Binlog Dump``
    #: session) from another session
    binlog_kills: int = 0
    #: SIGKILLs of the consumer-kit consumer (bench/faultsuite/consumer.py)
    consumer_kills: int = 0
    #: long transactions (one order of ``long_tx_items`` items), each followed at once
    #: by a rebalance of the transaction workers: the first by a third member joining,
    #: the others by a member leaving and joining again
    long_txs: int = 0
    long_tx_items: int = 0


SHORT = Mode(
    "short",
    45.0,
    1,
    1,
    1,
    5.0,
    40.0,
    tx_kills=1,
    tx_leaves=1,
    binlog_kills=1,
    consumer_kills=2,
    long_txs=2,
    long_tx_items=2_000,
)
LONG = Mode(
    "long",
    200.0,
    9,
    8,
    3,
    30.0,
    40.0,
    tx_kills=6,
    tx_leaves=2,
    binlog_kills=3,
    consumer_kills=6,
    long_txs=4,
    long_tx_items=5_000,
)
#: The source databases the suite captures from (``--source``).
SOURCES = ("postgres", "mysql")


# -- the run ------------------------------------------------------------------------------


class Faults:
    def __init__(
        self,
        mode: Mode,
        seed: int,
        work: Path,
        source: str = "postgres",
        broker: str = "tansu",
        brokers: int = 1,
        exactly_once: bool = False,
        by_partition: bool = False,
    ) -> None:
        self.mode = mode
        self.by_partition = by_partition
        #: --by-partition: orders@3's transactions across partitions, of how many
        self.crossing = (0, 0)
        #: --by-partition: the records forwarded through the exchange topic
        self.forwarded = 0
        self.source = source
        self.broker = broker
        self.brokers = brokers
        self.exactly_once = exactly_once
        #: Kafka only: the pid of each node (1..brokers), as restarted
        self.node_pids: dict[int, int] = {}
        self.broker_kills = 0
        self.cluster_restarts = 0
        #: --exactly-once: (event id, source record) pairs a worker published twice
        self.duplicates = 0
        self.rng = random.Random(seed)
        self.seed = seed
        self.work = work
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        tag = uuid.uuid4().hex[:6]
        self.server = f"faults{tag}"
        self.slot = f"faults_{tag}"
        self.witness = f"faults_{tag}_witness"
        self.group = f"faults-{tag}"
        self.run_id = f"faults-{tag}"
        self.dead_letter = f"faults.dead-letter.{tag}"
        self.tx_group = f"faults-tx-{tag}"
        self.consumer_group = f"faults-consumer-{tag}"
        self.consumer_schema = f"faults_consumer_{tag}"
        self.report = Report()
        self.broker_pauses = 0
        self.db_restarts = 0
        self.binlog_kills = 0
        self.tx_joins = 0
        #: the long transactions' orders: order id -> (items, total)
        self.long_orders: dict[int, tuple[int, Any]] = {}
        #: the replay's (ranges done, planned) at its last kill
        self.replay_done_at_kill = (0, 0)
        self.load: Load | None = None

    # the stack ---------------------------------------------------------------------------

    def start_stack(self) -> None:
        from bizevents.devstack import DevStack
        from bizevents.devstack.services import postgres_bin_dir
        from bizevents.settings import DevSettings

        mysql = self.source == "mysql"
        dev = DevSettings(
            broker_port=0,
            registry_port=0,
            postgres_port=0,
            mysql=mysql,
            mysql_port=0,
            broker=self.broker,  # type: ignore[arg-type]
            brokers=self.brokers,
        )
        self.dev = dev
        self.stack = DevStack(self.work / "stack", dev)
        self.stack.up()
        self.endpoints = self.stack.endpoints()
        records = json.loads(self.stack.state_file.read_text())["services"]
        self.broker_pid = int(records["broker"]["pid"])
        if self.broker == "kafka":
            for n in range(1, self.brokers + 1):
                self.node_pids[n] = int(records["broker" if n == 1 else f"broker-{n}"]["pid"])
        if mysql:
            self.mysql_pid = int(records["mysql"]["pid"])
            self.mysql_port = int(records["mysql"]["port"])
            self.mysql_dsn = str(records["mysql"]["extra"]["dsn"])
        self.pg_data = Path(records["postgres"]["extra"]["data_dir"])
        self.pg_ctl = str(postgres_bin_dir(dev) / "pg_ctl")
        self.pg_user = "postgres" if os.geteuid() == 0 else None

    def pg_ctl_run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.pg_ctl, *args, "-D", str(self.pg_data), "-w", "-t", "180"],
            user=self.pg_user,
            cwd=self.pg_data.parent,
            capture_output=True,
            text=True,
            check=False,
        )

    def stop_stack(self) -> None:
        # the nodes the suite restarted are its own children, not the stack's
        self.stop_nodes(list(self.node_pids))
        # after a restart the postmaster is pg_ctl's, not the one the stack recorded
        self.pg_ctl_run("stop", "-m", "fast")
        # the services' logs (the broker's among them) stay with the run's (--keep)
        logs = self.work / "stack" / "logs"
        if logs.is_dir():
            shutil.copytree(logs, self.work / "logs" / "stack", dirs_exist_ok=True)
        self.stack.down(purge=True)

    # the components ----------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": self.endpoints.bootstrap_servers,
            "BIZEVENTS_REGISTRY__URL": self.endpoints.registry_url,
            "BIZEVENTS_DATABASE__POSTGRES_DSN": self.endpoints.postgres_dsn,
            "BIZEVENTS_TRANSLATORS": json.dumps(TRANSLATORS),
            "BIZEVENTS_TRANSLATE__TOPIC_PREFIX": self.server,
            "BIZEVENTS_TRANSLATE__GROUP_ID": self.group,
            "BIZEVENTS_TRANSLATE__DEAD_LETTER_TOPIC": self.dead_letter,
            "BIZEVENTS_STATE_DIR": str(self.work / "state"),
            "BIZEVENTS_LOG_FORMAT": "json",
            **(
                {
                    "BIZEVENTS_TRANSLATE__PROCESSING_GUARANTEE": "exactly_once",
                    # the long mode's pause and the cluster's restart can come back to
                    # back (85 s seen): a block open across both is aborted by the broker
                    # past the timeout and the row worker exits 1, by design (60 s by
                    # default); the suite looks for loss and doubles, not for that exit
                    "BIZEVENTS_TRANSLATE__TRANSACTION_TIMEOUT_S": "180",
                }
                if self.exactly_once
                else {}
            ),
            # a worker restarted while the whole cluster restarts waits for it: three
            # nodes took up to 102 s on the shared 2-core machine (45 s by default)
            **({"BIZEVENTS_TRANSLATE__BROKER_WAIT_S": "180"} if self.brokers >= 3 else {}),
        }

    # the broker's nodes (Apache Kafka) ---------------------------------------------------

    def leader(self) -> int:
        """The node that leads the most partitions of the orders' technical topic and of
        the order-placed business topic (the one whose loss moves most)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.endpoints.bootstrap_servers})
        wanted = [f"{self.server}.store.orders", "store.order-placed"]
        found = admin.list_topics(timeout=30).topics
        leaders = Counter(
            p.leader
            for topic in wanted
            if topic in found
            for p in found[topic].partitions.values()
            if p.leader in self.node_pids
        )
        return leaders.most_common(1)[0][0] if leaders else 1

    def start_node(self, node: int) -> None:
        from bizevents.devstack.kafkanode import KafkaNode

        started = KafkaNode(node, self.brokers).start(self.stack.state_dir, self.dev)
        self.node_pids[node] = started.pid
        if node == 1:
            self.broker_pid = started.pid

    def stop_nodes(self, nodes: list[int], sig: int = signal.SIGTERM) -> None:
        """Signal every node first, then wait for each (a node's clean stop waits for
        the controllers' quorum)."""
        for node in nodes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.node_pids[node], sig)
        for node in nodes:
            deadline = time.monotonic() + 60
            while alive(self.node_pids[node]) and time.monotonic() < deadline:
                time.sleep(0.2)
            if alive(self.node_pids[node]):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.node_pids[node], signal.SIGKILL)

    def components(self) -> None:
        from bizevents.capture.config import CaptureConfig
        from tests.capture.capture_helpers import write_config

        if self.source == "mysql":
            config = CaptureConfig(
                server=self.server,
                tables=TABLES,
                partitions=3,
                snapshot="never",
                routing=self.routing(),
            )
            config_file = write_config(self.work / "capture.toml", config)
            # written apart: the settings model masks a DSN (it holds the password)
            with open(config_file, "a") as out:
                out.write(f"dsn = {json.dumps(self.mysql_dsn)}\n")
        else:
            config = CaptureConfig(
                server=self.server,
                tables=TABLES,
                slot=self.slot,
                publication=self.slot,
                partitions=3,
                snapshot="never",
                heartbeat_interval_s=1.0,
                state_dir=self.work / "capture-state",
                routing=self.routing(),
            )
            config_file = write_config(self.work / "capture.toml", config)
        self.capture_config = config
        cli = [sys.executable, "-m", "bizevents"]
        self.capture = Supervised(
            "capture",
            [*cli, "capture", self.source, str(config_file)],
            self.env(),
            self.logs,
        )
        self.worker = Supervised("worker", [*cli, "translate"], self.env(), self.logs)
        name, version = TX_TRANSLATOR
        tx_env = {
            **self.env(),
            "BIZEVENTS_TRANSLATORS": json.dumps({name: version}),
            "BIZEVENTS_TRANSACTIONS__GROUP_ID": self.tx_group,
            "BIZEVENTS_TRANSLATE__DEAD_LETTER_TOPIC": f"{self.dead_letter}.tx",
            **({"BIZEVENTS_TRANSACTIONS__BY_PARTITION": "true"} if self.by_partition else {}),
        }
        self.tx_workers = [
            Supervised(f"txworker{n}", [*cli, "translate", "--transactions"], tx_env, self.logs)
            for n in (1, 2)
        ]
        self.replay = Supervised(
            "replay",
            [
                *cli,
                "replay",
                "--topics",
                f"{self.server}.store.orders",
                "--translator",
                REPLAY_TRANSLATOR,
                "--to",
                "replay",
                "--run-id",
                self.run_id,
                "--slice-size",
                "10",
                "--master",
                "local[1]",
                "--no-progress",
            ],
            self.env(),
            self.logs,
            one_shot=True,
        )

        self.consumer = Supervised(
            "consumer",
            [
                sys.executable,
                str(ROOT / "bench" / "faultsuite" / "consumer.py"),
                "--dsn",
                self.endpoints.postgres_dsn,
                "--schema",
                self.consumer_schema,
                "--group",
                self.consumer_group,
                "--bootstrap",
                self.endpoints.bootstrap_servers,
                "--registry",
                self.endpoints.registry_url,
                "--topics",
                ",".join(order_topics()),
            ],
            self.env(),
            self.logs,
        )

    def routing(self) -> dict[str, tuple[str, ...]]:
        """Capture's routing: with --by-partition each table orders@3 reads by the
        business key it declares (``keys=``), which the members by partition need;
        else none."""
        if not self.by_partition:
            return {}
        from bizevents.translators.registry import discover
        from bizevents.translators.transaction_api import TransactionTranslator

        translator = discover().resolve("{}@{}".format(*TX_TRANSLATOR))
        assert isinstance(translator, TransactionTranslator)
        return {table: translator.key_columns(table) for table in TX_TABLES}

    def supervised(self) -> list[Supervised]:
        return [self.capture, self.worker, self.replay, *self.tx_workers, self.consumer]

    def supervise(self) -> None:
        for component in self.supervised():
            component.supervise()
        if self.load is not None and self.load.error is not None:
            raise RuntimeError(f"the load failed: {self.load.error!r}")

    def sleep(self, seconds: float) -> None:
        """Wait while supervising the components."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self.supervise()
            time.sleep(min(0.1, max(0.0, until - time.monotonic())))

    def wait(self, check: Callable[[], bool], what: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                log(f"gave up waiting for {what} after {timeout:.0f} s")
                return False
            self.sleep(0.5)
        return True

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        import psycopg2

        for attempt in range(60):
            try:
                conn = psycopg2.connect(self.endpoints.postgres_dsn, connect_timeout=5)
                break
            except psycopg2.OperationalError:
                if attempt == 59:
                    raise
                self.sleep(1)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(statement, params)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    # the faults --------------------------------------------------------------------------

    def schedule(self) -> list[tuple[float, str]]:
        """``(seconds after the load started, action)``, seeded."""
        m = self.mode
        span = (5.0, m.load_seconds - 5.0)
        plan = [(self.rng.uniform(*span), "kill capture") for _ in range(m.capture_kills)]
        plan += [(self.rng.uniform(*span), "kill worker") for _ in range(m.worker_kills)]
        plan += [(self.rng.uniform(*span), "kill txworker") for _ in range(m.tx_kills)]
        plan += [(self.rng.uniform(*span), "txworker leaves") for _ in range(m.tx_leaves)]
        plan += [(self.rng.uniform(*span), "kill consumer") for _ in range(m.consumer_kills)]
        plan += [(self.rng.uniform(10.0, span[1]), "long transaction") for _ in range(m.long_txs)]
        plan.append((self.rng.uniform(*span), "pause broker"))
        if self.broker == "kafka" and self.brokers >= 3:
            kills = 2 if m.name == "long" else 1
            plan += [(self.rng.uniform(*span), "kill broker") for _ in range(kills)]
            plan.append((self.rng.uniform(*span), "restart cluster"))
        plan.append((self.rng.uniform(*span), "restart database"))
        if self.source == "mysql":
            plan += [(self.rng.uniform(*span), "kill binlog") for _ in range(m.binlog_kills)]
        # the replay starts early, and each kill waits until the replay made progress
        # since its last start (see "kill replay"): a run takes seconds, so a kill at a
        # planned time alone would find it finished
        at = self.rng.uniform(3.0, 8.0)
        plan.append((at, "start replay"))
        for _ in range(m.replay_kills):
            at += self.rng.uniform(0.5, 2.0)
            plan.append((at, "kill replay"))
        return sorted(plan)

    def act(self, action: str) -> None:
        if action == "kill capture":
            self.capture.kill()
        elif action == "kill worker":
            self.worker.kill()
        elif action == "kill txworker":
            self.rng.choice(self.tx_workers).kill()
        elif action == "long transaction":
            self.long_transaction()
        elif action == "kill consumer":
            self.consumer.kill()
        elif action == "txworker leaves":
            self.rng.choice(self.tx_workers).leave()
        elif action == "start replay":
            self.replay.start()
        elif action == "kill replay":
            # a kill lands while the replay writes: once it has finished a range since it
            # (re)started and still has ranges left
            self.wait_replay_mid_run()
            log(f"replay before its kill: {self.replay_progress()}")
            if self.replay.kill():
                self.replay_done_at_kill = self.replay_ranges_done()
            else:
                log("the replay had already finished: kill skipped")
        elif action == "pause broker":
            log(f"SIGSTOP broker for {self.mode.pause_s:.0f} s")
            os.kill(self.broker_pid, signal.SIGSTOP)
            try:
                self.sleep(self.mode.pause_s)
            finally:
                os.kill(self.broker_pid, signal.SIGCONT)
            self.broker_pauses += 1
            log("SIGCONT broker")
        elif action == "kill broker":
            node = self.leader()
            log(f"SIGKILL of Kafka node {node} (leads the orders' partitions)")
            self.stop_nodes([node], signal.SIGKILL)
            self.broker_kills += 1
            self.sleep(5.0)
            self.start_node(node)  # from its disk
            log(f"Kafka node {node} restarted from its disk")
        elif action == "restart cluster":
            log("restart of the whole Kafka cluster (SIGTERM of every node)")
            nodes = sorted(self.node_pids)
            self.stop_nodes(nodes)
            for node in nodes:
                self.start_node(node)
            self.cluster_restarts += 1
            log("Kafka cluster restarted")
        elif action == "restart database" and self.source == "mysql":
            self.restart_mariadb()
        elif action == "kill binlog":
            self.kill_binlog_connection()
        elif action == "restart database":
            log("pg_ctl restart -m fast")
            # the server's user writes the log: next to the cluster, not in our folder
            server_log = self.pg_data.parent / "restart.log"
            done = self.pg_ctl_run("restart", "-m", "fast", "-l", str(server_log))
            if done.returncode != 0:
                raise RuntimeError(f"pg_ctl restart failed: {done.stdout}{done.stderr}")
            self.db_restarts += 1
            log("PostgreSQL restarted")

    def long_transaction(self) -> None:
        """One order of ``long_tx_items`` items in one transaction, then at once a
        rebalance of the transaction workers' groups while they read it (capture writes
        its changes after the commit): a third member joins the first time, a member
        leaves and joins again after that."""
        from bizevents.capture.mariadb import queries as my

        items = self.mode.long_tx_items
        if self.source == "mysql":
            conn = my.connect(self.mysql_dsn, autocommit=False)
        else:
            import psycopg2

            conn = psycopg2.connect(self.endpoints.postgres_dsn)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT id FROM store.customers ORDER BY id LIMIT 1")
                customer = cur.fetchone()[0]
                cur.execute("SELECT id, price FROM store.products ORDER BY id LIMIT 1")
                product, price = cur.fetchone()
                cur.execute(
                    "INSERT INTO store.orders (customer_id, total) VALUES (%s, 0) RETURNING id",
                    (customer,),
                )
                order = int(cur.fetchone()[0])
                cur.executemany(
                    "INSERT INTO store.order_items (order_id, line_no, product_id, quantity, "
                    "unit_price) VALUES (%s, %s, %s, 1, %s)",
                    [(order, n, product, price) for n in range(1, items + 1)],
                )
                cur.execute(
                    "UPDATE store.orders SET total = %s WHERE id = %s", (price * items, order)
                )
            conn.commit()
        finally:
            conn.close()
        self.long_orders[order] = (items, price * items)
        if len(self.tx_workers) == 2:
            member = self.tx_workers[0]
            joining = Supervised("txworker3", member.argv, member.env, self.logs)
            self.tx_workers.append(joining)
            joining.start()
            self.tx_joins += 1
            log(f"order {order} with {items} items committed; txworker3 joins the group")
        else:
            log(f"order {order} with {items} items committed; a member stops and starts again")
            self.rng.choice(self.tx_workers).leave()

    def mysql_sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        """One statement on the MariaDB source, retried while it restarts."""
        import pymysql

        from bizevents.capture.mariadb import queries as my

        for attempt in range(120):
            try:
                conn = my.connect(self.mysql_dsn)
                break
            except pymysql.err.OperationalError:
                if attempt == 119:
                    raise
                self.sleep(1)
        try:
            with conn.cursor() as cur:
                cur.execute(statement, params)
                return list(cur.fetchall()) if cur.description else []
        finally:
            conn.close()

    def restart_mariadb(self) -> None:
        """SIGTERM (mariadbd's clean shutdown), then the devstack starts it again on the
        same port and data folder: capture and the load see their sessions end."""
        from bizevents.devstack import DevStack
        from bizevents.devstack.services import OPTIONAL_SERVICES
        from bizevents.settings import DevSettings

        log("MariaDB restart: SIGTERM")
        os.kill(self.mysql_pid, signal.SIGTERM)
        deadline = time.monotonic() + 120
        while alive(self.mysql_pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"MariaDB (pid {self.mysql_pid}) did not stop in 120 s")
            self.sleep(0.2)
        dev = DevSettings(mysql=True, mysql_port=self.mysql_port)
        stack = DevStack(self.work / "stack", dev, services=(), optional=OPTIONAL_SERVICES)
        stack.up()
        records = json.loads(stack.state_file.read_text())["services"]
        self.mysql_pid = int(records["mysql"]["pid"])
        self.db_restarts += 1
        log("MariaDB restarted")

    def kill_binlog_connection(self) -> None:
        """``KILL`` of capture's replication session, found by its ``Binlog Dump`` command."""
        deadline = time.monotonic() + 30  # capture may be reconnecting after a fault
        while not (
            ids := self.mysql_sql(
                "SELECT id FROM information_schema.processlist WHERE command = 'Binlog Dump'"
            )
        ):
            if time.monotonic() > deadline:
                log("no binlog connection to kill in 30 s")
                return
            self.sleep(0.5)
        for (session,) in ids:
            with contextlib.suppress(Exception):  # it may have ended meanwhile
                self.mysql_sql(f"KILL {int(session)}")
            self.binlog_kills += 1
            log(f"KILL {session}: capture's binlog connection")

    def replay_ranges_done(self) -> tuple[int, int]:
        """The replay's ranges done and planned (0, 0 before its plan)."""
        from bizevents.replay.exceptions import RunStateError
        from bizevents.replay.state import RunState

        try:
            state = RunState.load(self.work / "state", self.run_id)
        except RunStateError:
            return 0, 0
        return (0, 0) if state is None else (len(state.done), len(state.ranges))

    def wait_replay_mid_run(self, timeout: float = 90.0) -> None:
        """Until the replay finished a range since its last kill (or start) and has ranges
        left, or finished; looked at every 50 ms (its ranges take a fraction of a second)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.replay.done:
            done, planned = self.replay_ranges_done()
            if self.replay_done_at_kill[0] < done < planned:
                return
            self.supervise()
            time.sleep(0.05)
        if not self.replay.done:
            log(f"gave up waiting for the replay to be mid-run after {timeout:.0f} s")

    def replay_progress(self) -> str:
        from bizevents.replay.exceptions import RunStateError
        from bizevents.replay.state import RunState

        try:
            state = RunState.load(self.work / "state", self.run_id)
        except RunStateError as exc:
            return str(exc)
        if state is None:
            return "no plan yet"
        return f"{len(state.done)} of {len(state.ranges)} ranges done"

    # the run -----------------------------------------------------------------------------

    def run(self) -> Report:
        self.components()
        if self.source == "mysql":
            self.load = self.start_mysql()
        else:
            self.load = self.start_postgres()
        # the worker refuses technical topics that do not exist yet: wait for capture's
        topics = [f"{self.server}.{t}" for t in TABLES if t != "store.order_items"]
        tx_topics = [f"{self.server}.{t}" for t in TX_TABLES] + [f"{self.server}.transaction"]
        self.wait(lambda: self._topics_exist([*topics, *tx_topics]), "the technical topics", 180)
        self.worker.start()
        for tx_worker in self.tx_workers:
            tx_worker.start()
        self.start_consumer()
        started = time.monotonic()
        for at, action in self.schedule():
            self.sleep(started + at - time.monotonic())
            self.act(action)
        self.sleep(started + self.mode.load_seconds - time.monotonic())
        self.load.stopping.set()
        self.load.join(60)
        log(f"load stopped: {self.load.steps} steps, {self.load.failed_steps} failed")
        return self.verify(topics)

    def start_consumer(self) -> None:
        """The consumer's tables in PostgreSQL (its state), then the consumer."""
        import psycopg2

        conn = psycopg2.connect(self.endpoints.postgres_dsn)
        create_tables(conn, self.consumer_schema)
        conn.close()
        self.consumer.start()

    def start_postgres(self) -> Load:
        """The store's schema, capture's slot, the witness slot after it, then the load."""
        import psycopg2
        from bizevents_store.load import create_schema

        conn = psycopg2.connect(self.endpoints.postgres_dsn)
        create_schema(conn)
        conn.close()
        self.capture.start()
        # the witness slot must start after capture's, and the load after both
        created = self.wait(
            lambda: (
                bool(
                    self.sql(
                        "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)
                    )
                )
                and bool(self.sql("SELECT 1 FROM pg_publication WHERE pubname = %s", (self.slot,)))
            ),
            "capture's slot",
            180,
        )
        if not created:
            raise RuntimeError(f"capture created no slot: {tail(self.capture.log_file)}")
        self.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.witness,))
        dsn = self.endpoints.postgres_dsn
        load = Load(
            lambda: psycopg2.connect(dsn, connect_timeout=5),
            (psycopg2.OperationalError, psycopg2.InterfaceError),
            self.seed,
            self.mode.steps_per_s,
            orders_per_transaction=2 if self.by_partition else 1,
        )
        load.start()
        return load

    def start_mysql(self) -> Load:
        """The store's schema on MariaDB, capture streaming, then the load. The binlog is
        the witness: it holds every committed change from its first file on."""
        import pymysql
        from bizevents_store.load import create_schema

        from bizevents.capture.mariadb import queries as my

        conn = my.connect(self.mysql_dsn, autocommit=False)
        create_schema(conn, "mysql")
        conn.close()
        self.capture.start()
        streaming = self.wait(
            lambda: '"streaming"' in tail(self.capture.log_file, 100_000),
            "capture's binlog stream",
            180,
        )
        if not streaming:
            raise RuntimeError(f"capture did not stream: {tail(self.capture.log_file)}")
        dsn = self.mysql_dsn
        load = Load(
            lambda: my.connect(dsn, autocommit=False),
            (pymysql.err.OperationalError, pymysql.err.InterfaceError),
            self.seed,
            self.mode.steps_per_s,
            orders_per_transaction=2 if self.by_partition else 1,
        )
        load.start()
        return load

    def _topics_exist(self, topics: list[str]) -> bool:
        from confluent_kafka.admin import AdminClient

        found = AdminClient({"bootstrap.servers": self.endpoints.bootstrap_servers}).list_topics(
            timeout=10
        )
        return all(t in found.topics for t in topics)

    def confirmed_check(self) -> Callable[[], bool]:
        """Whether capture confirmed (PostgreSQL) or stored (MariaDB) the source's end."""
        from bizevents.capture.postgres.messages import parse_lsn

        if self.source == "mysql":
            from bizevents.capture.core.state import StateStore

            final_gtid = gtid_seq(self.mysql_sql("SELECT @@gtid_binlog_pos")[0][0])
            store = StateStore(
                {"bootstrap.servers": self.endpoints.bootstrap_servers},
                self.capture_config.offsets_topic_name,
                self.capture_config.server,
            )

            def stored() -> bool:
                position = store.read(store.position_key()) or {}
                return gtid_seq(position.get("gtid")) >= final_gtid

            return stored
        final = parse_lsn(self.sql("SELECT pg_current_wal_insert_lsn()::text")[0][0])

        def confirmed() -> bool:
            rows = self.sql(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                (self.slot,),
            )
            return bool(rows and rows[0][0] and parse_lsn(rows[0][0]) >= final)

        return confirmed

    def truth(self) -> list[tuple[Any, str, str]]:
        """Every committed change of the store since the witness began, in commit order."""
        if self.source == "mysql":
            return binlog_history(self.mysql_dsn, "store")
        return history(self._conn(), self.witness, self.slot)

    def verify(self, worker_topics: list[str]) -> Report:
        from bizevents.contracts.business import (
            HEADER_DLQ_REASON,
            HEADER_EVENT_ID,
            HEADER_SOURCE_OFFSET,
            HEADER_SOURCE_PARTITION,
            HEADER_SOURCE_TOPIC,
            HEADER_TRANSLATOR,
        )
        from bizevents.contracts.envelope import ChangeEvent
        from bizevents.contracts.exceptions import Coordinates
        from bizevents.contracts.technical import AutoDecoder
        from bizevents.replay.diff import ContentSerializer
        from bizevents.replay.state import RunState
        from bizevents.translators.pipeline import Pipeline, SourceRecord
        from bizevents.translators.registry import discover

        report = self.report
        bootstrap = self.endpoints.bootstrap_servers
        log("waiting for capture to confirm the last change")
        if not self.wait(self.confirmed_check(), "capture's confirmation", 180):
            # nothing may be missing, but a restart would re-send all since: a defect
            report.unconfirmed = 1
            report.details.append(
                "capture did not confirm (PostgreSQL) or store (MariaDB) the source's last "
                "position in 180 s"
            )
        tech_topics = [f"{self.server}.{t}" for t in TABLES]
        tech = read_topics(bootstrap, tech_topics)
        worker_ends = {k: v for k, v in end_offsets(tech).items() if k[0] in worker_topics}

        def caught_up() -> bool:
            try:
                got = committed(bootstrap, self.group, worker_ends)
            except Exception as exc:  # librdkafka raises KafkaException for a failed fetch
                log(f"committed offsets: {exc}")
                return False
            return all(got.get(k, -1) >= end for k, end in worker_ends.items())

        log("waiting for the worker to commit every technical record")
        if not self.wait(caught_up, "the worker's commits", 300):
            report.details.append("the worker did not commit every technical record in 300 s")
        log("waiting for the transaction workers to commit every part")
        if not self.wait_transactions(tech):
            report.details.append("the transaction workers did not commit every part in time")
        log("waiting for the replay to finish")
        if not self.wait(lambda: self.replay.done, "the replay", 600):
            report.details.append("the replay did not finish")

        # the technical topics against the database's history
        truth = self.truth()
        index = {(table, lsn): n for n, (lsn, table, _op) in enumerate(truth)}
        schema_text = schema_lookup(self.endpoints.registry_url)
        decoder = AutoDecoder(schema_text)
        seen: Counter[tuple[str, int]] = Counter()
        places: dict[tuple[str, int], list[str]] = defaultdict(list)
        tech_index: dict[tuple[str, int, int], int] = {}
        sequences: dict[Any, list[tuple[int, Any]]] = defaultdict(list)
        for r in sorted(tech, key=lambda r: (r.topic, r.partition, r.offset)):
            if r.value is None:
                continue  # a tombstone follows its delete
            decoded = decoder.decode(
                r.key, r.value, Coordinates(r.topic, r.partition, r.offset), []
            )
            if not isinstance(decoded, ChangeEvent):
                continue
            position = change_identity(decoded.source)
            if position is None:
                continue
            ident = (decoded.source.qualified_table, position)
            n = index.get(ident)
            if n is None:
                report.tech_unknown += 1
                continue
            seen[ident] += 1
            places[ident].append(f"{r.partition}@{r.offset}")
            tech_index[(r.topic, r.partition, r.offset)] = n
            sequences[(r.topic, r.key)].append((n, ident))
        missing = [i for i in index if i not in seen]
        report.tech_missing = len(missing)
        report.tech_duplicates = sum(c - 1 for c in seen.values())
        breaks = order_breaks(sequences)
        report.reordered += len(breaks)
        report.details += [f"technical reordered: {b}" for b in breaks[:5]]
        report.details += [f"technical missing: {t} at {at}" for t, at in missing[:5]]
        report.details += [
            missing_neighbours(truth, seen, places, index[ident]) for ident in missing[:5]
        ]
        report.details.append(
            f"technical: {len(truth)} committed changes, {len(missing)} missing, "
            f"{report.tech_duplicates} re-sent copies, {report.tech_unknown} from before the "
            "witness"
        )

        # business events: what the worker's own pipeline makes of the technical records
        registry = discover()
        live = Pipeline(
            [registry.resolve(f"{n}@{v}") for n, v in TRANSLATORS.items()],
            decoder,
            ContentSerializer(),
        )
        sources = [SourceRecord(r.topic, r.partition, r.offset, r.key, r.value) for r in tech]
        result = live.process(sources)
        expected = {o.event_id for o in result.records if o.event_id}
        business = sorted({o.topic for o in result.records if o.event_id})
        report.events_expected = len(expected)
        tx_ref = "{}@{}".format(*TX_TRANSLATOR).encode()
        published = read_topics(bootstrap, business)  # read_committed
        if self.exactly_once:
            copies: dict[tuple[bytes, ...], list[Rec]] = defaultdict(list)
            for r in published:
                pair = (
                    r.headers.get(HEADER_EVENT_ID, b""),
                    r.headers.get(HEADER_TRANSLATOR, b""),  # orders@3 shares orders@2's ids
                    r.headers.get(HEADER_SOURCE_TOPIC, b""),
                    r.headers.get(HEADER_SOURCE_PARTITION, b""),
                    r.headers.get(HEADER_SOURCE_OFFSET, b""),
                )
                copies[pair].append(r)
            twice = [pair for pair, found in copies.items() if len(found) > 1]
            self.duplicates = len(twice)
            report.details += [
                "read_committed twice: {} by {} from {}[{}]@{} (copies at {})".format(
                    *(part.decode(errors="replace") for part in pair),
                    ", ".join(
                        f"{r.topic}[{r.partition}]@{r.offset} "
                        + time.strftime("%H:%M:%S", time.gmtime(r.timestamp / 1000))
                        for r in copies[pair]
                    ),
                )
                for pair in twice[:10]
            ]
        rows = [r for r in published if r.headers.get(HEADER_TRANSLATOR) != tx_ref]
        report.events_missing = check_events(
            "business", expected, rows, tech_index, schema_text, report
        )
        if report.events_missing:
            found = {r.headers.get(HEADER_EVENT_ID, b"").decode() for r in rows}
            report.details += missing_sources(
                [o for o in result.records if o.event_id and o.event_id not in found],
                bootstrap,
                self.group,
                business,
            )
        # orders@3's events (same ids as orders@2's where they stem from the same change,
        # other content: checked apart) against what the assembly makes of the topics
        expected_tx = self.expected_transactions(tech, decoder, schema_text)
        report.tx_expected = len(expected_tx)
        report.tx_missing = check_events(
            "transactions",
            expected_tx,
            [r for r in published if r.headers.get(HEADER_TRANSLATOR) == tx_ref],
            tech_index,
            schema_text,
            report,
        )
        self.check_long_orders(
            [r for r in published if r.headers.get(HEADER_TRANSLATOR) == tx_ref], schema_text
        )
        if self.by_partition:
            self.exchange_figures(schema_text)
        # capture's too: a change it dead-letters is missing from the technical topics
        dead = read_topics(
            bootstrap,
            [self.dead_letter, f"{self.dead_letter}.tx", self.capture_config.dlq_topic],
        )
        report.dead_letters = len(dead)
        reasons = Counter(
            (r.topic, r.headers.get(HEADER_DLQ_REASON, b"?").decode(errors="replace")[:300])
            for r in dead
        )
        report.details += [f"dead letter x{n} on {t}: {why}" for (t, why), n in reasons.items()]
        self.dead_transactions([r for r in dead if r.topic.endswith(".tx")], schema_text)
        self.check_consumer(published, tech_index)

        # the replay: the records of the ranges it planned, through orders@2
        state = RunState.load(self.work / "state", self.run_id)
        if state is not None:
            planned = [
                s
                for s in sources
                if any(
                    s.topic == g.topic
                    and s.partition == g.partition
                    and g.start <= s.offset < g.end
                    for g in state.ranges
                )
            ]
            replayed = Pipeline([registry.resolve(REPLAY_TRANSLATOR)], decoder, ContentSerializer())
            out = replayed.process(planned).records
            expected_replay = {o.event_id for o in out if o.event_id}
            report.replay_expected = len(expected_replay)
            replay_topics = sorted({f"{o.topic}.replay" for o in out if o.event_id})
            report.replay_missing = check_events(
                "replay",
                expected_replay,
                read_topics(bootstrap, replay_topics),
                tech_index,
                schema_text,
                report,
            )
        else:
            report.details.append("the replay left no run state")
            report.replay_missing = 1
        self._conn().close()
        return report

    def check_long_orders(self, tx_events: list[Rec], schema_text: Callable[[int], str]) -> None:
        """Each long transaction's order placed by orders@3 with every item and its total."""
        from decimal import Decimal

        report = self.report
        found: dict[int, list[Any]] = defaultdict(list)
        for r in tx_events:
            data = content_of(r.value, schema_text)
            # an OrderPlaced (it has items), not a status change of the order
            if isinstance(data, dict) and "items" in data and data["order_id"] in self.long_orders:
                found[int(data["order_id"])].append(data)
        for order, (items, total) in self.long_orders.items():
            placed = found.get(order, [])
            right = [d for d in placed if len(d["items"]) == items and Decimal(d["total"]) == total]
            if not placed or len(right) != len(placed):
                report.tx_wrong += 1
                got = [(len(d["items"]), d["total"]) for d in placed]
                report.details.append(
                    f"transactions: order {order} ({items} items, total {total}) placed as {got}"
                )
        report.details.append(
            f"transactions: {len(self.long_orders)} long transactions ("
            f"{self.mode.long_tx_items} items each), {report.tx_wrong} placed wrong or not at all"
        )

    def dead_transactions(self, dead: list[Rec], schema_text: Callable[[int], str]) -> None:
        """Whether each transaction the transaction workers dead-lettered has an END on
        the transaction topic: with one, the suite expected its events and checked them;
        without, capture wrote none, and its orders@3 events are not checked."""
        from bizevents.contracts.technical.transaction import TransactionDecoder
        from bizevents.translators.txparking import HEADER_TX

        given_up = {r.headers.get(HEADER_TX, b"?").decode(errors="replace") for r in dead}
        if not given_up:
            return
        decoder = TransactionDecoder(schema_text)
        records = read_topics(self.endpoints.bootstrap_servers, [f"{self.server}.transaction"])
        ended = {
            d.id
            for d in (decoder.decode(r.value) for r in records if r.value is not None)
            if d.status == "END"
        }
        self.report.details.append(
            f"transactions dead-lettered: {len(given_up)}, with an END on the transaction "
            f"topic: {sorted(given_up & ended)}, without: {sorted(given_up - ended)}"
        )

    def exchange_figures(self, schema_text: Callable[[int], str]) -> None:
        """--by-partition: orders@3's transactions across partitions (END's
        ``partition_counts``), and the records forwarded through the exchange topic
        (``read_committed``), which show the exchange exercised, not bypassed."""
        from bizevents.contracts.technical.transaction import TransactionDecoder
        from bizevents.translators.settings import TransactionSettings

        bootstrap = self.endpoints.bootstrap_servers
        decoder = TransactionDecoder(schema_text)
        records = read_topics(bootstrap, [f"{self.server}.transaction"])
        decoded = [decoder.decode(r.value) for r in records if r.value is not None]
        self.crossing = crossing([d for d in decoded if d.status == "END"], TX_TABLES)
        exchange = TransactionSettings(group_id=self.tx_group).exchange()
        self.forwarded = len(read_topics(bootstrap, [exchange]))

    def check_consumer(self, published: list[Rec], tech_index: dict[Any, int]) -> None:
        """Once its group committed the order topics' ends: what the consumer applied."""
        from bizevents.contracts.business import HEADER_EVENT_ID

        report = self.report
        topics = set(order_topics())
        on_topics = [r for r in published if r.topic in topics]
        ends = end_offsets(on_topics)

        def caught_up() -> bool:
            try:
                got = committed(self.endpoints.bootstrap_servers, self.consumer_group, ends)
            except Exception as exc:  # librdkafka raises KafkaException for a failed fetch
                log(f"committed offsets of the consumer: {exc}")
                return False
            return all(got.get(k, -1) >= end for k, end in ends.items())

        log("waiting for the consumer to commit the order topics' ends")
        if not self.wait(caught_up, "the consumer's commits", 300):
            report.details.append("the consumer did not commit every order event in 300 s")
        ids = {r.headers.get(HEADER_EVENT_ID, b"").decode(): r for r in on_topics}
        found = check_applied(self._conn(), self.consumer_schema, ids, tech_index, order_breaks)
        report.consumer = found
        report.reordered += found.reordered
        report.differing_duplicates += found.differing_repeats
        report.details += found.details

    def wait_transactions(self, tech: list[Rec]) -> bool:
        """Until each stage of the transaction workers committed its input's end."""
        bootstrap = self.endpoints.bootstrap_servers
        sources = {f"{self.server}.{t}" for t in TX_TABLES} | {f"{self.server}.transaction"}
        ends = {k: v for k, v in end_offsets(tech).items() if k[0] in sources}
        tx_log = read_topics(bootstrap, [f"{self.server}.transaction"])
        ends.update(end_offsets(tx_log))

        from bizevents.plumbing.kafka import read_latest
        from bizevents.translators.settings import TransactionSettings

        settings = TransactionSettings(group_id=self.tx_group)
        state = settings.state()
        tx_topic = f"{self.server}.transaction"
        # by partition the virtual partitions are the technical ones, and a partition's
        # checkpoint names only its own partitions and the transaction topic
        count = (
            self.capture_config.partitions if self.by_partition else settings.assembly_partitions
        )

        def covers(v: int, tp: tuple[str, int]) -> bool:
            return not self.by_partition or tp[0] == tx_topic or tp[1] == v

        def caught_up() -> bool:
            """Every virtual partition's last checkpoint reads on past every input's end
            (a checkpoint is written only after its outputs were acknowledged)."""
            try:
                latest = read_latest({"bootstrap.servers": bootstrap}, state, "faults-reader")
            except Exception as exc:  # the broker may be paused by a fault
                log(f"checkpoints in {state}: {exc}")
                return False
            last: dict[bytes, dict[tuple[str, int], int]] = {}
            for key, value in latest.items():
                if key.startswith(b"assembly:") and value:
                    data = json.loads(value)
                    last[key] = {(str(t), int(p)): int(o) for t, p, o in data["offsets"]}
            wanted = {v: f"assembly:{v}".encode() for v in range(count)}
            return all(
                key in last
                and all(last[key].get(tp, -1) >= end for tp, end in ends.items() if covers(v, tp))
                for v, key in wanted.items()
            )

        return self.wait(caught_up, f"{self.tx_group} checkpoints", 300)

    def expected_transactions(
        self, tech: list[Rec], decoder: Any, schema_text: Callable[[int], str]
    ) -> set[str]:
        """orders@3's event ids over the technical topics, assembled here: every change
        of the tables it reads, then the transaction topic's records in commit order."""
        from bizevents.contracts.envelope import ChangeEvent
        from bizevents.contracts.exceptions import Coordinates, DecodeError
        from bizevents.contracts.technical.transaction import TransactionDecoder
        from bizevents.replay.diff import ContentSerializer
        from bizevents.translators.assembly import Assembler, AssemblyLimits, Part, Ready
        from bizevents.translators.pipeline import SourceRecord
        from bizevents.translators.registry import discover
        from bizevents.translators.transaction_api import TransactionTranslator
        from bizevents.translators.txcore import TransactionCore

        translator = discover().resolve("{}@{}".format(*TX_TRANSLATOR))
        assert isinstance(translator, TransactionTranslator)
        core = TransactionCore([translator], ContentSerializer())
        # Every change is fed before any END (the worker gets them interleaved, as they
        # come), so every transaction is open at once here: the live limits do not apply
        # (with MariaDB's GTIDs, which carry no commit position, max_wait gave up on all
        # but the first 1,000 transactions).
        unbounded = 10**9
        assembler = Assembler(
            core.reads,
            AssemblyLimits(max_open=unbounded, max_wait=unbounded, remembered=unbounded),
        )
        outcomes: list[Any] = []
        offset = 0
        read = {f"{self.server}.{t}" for t in TX_TABLES}
        changes = [r for r in tech if r.topic in read and r.value is not None]
        ends = read_topics(self.endpoints.bootstrap_servers, [f"{self.server}.transaction"])
        tx_decoder = TransactionDecoder(schema_text)
        for r in [*changes, *sorted(ends, key=lambda r: r.offset)]:
            where = Coordinates(r.topic, r.partition, r.offset)
            origin = SourceRecord(r.topic, r.partition, r.offset, r.key, r.value)
            try:
                if r.topic in read:
                    decoded = decoder.decode(r.key, r.value, where, [])
                    assert isinstance(decoded, ChangeEvent)
                    part = Part(offset, origin, change=decoded)
                else:
                    part = Part(offset, origin, record=tx_decoder.decode(r.value, where))
            except DecodeError:
                continue
            offset += 1
            outcomes += assembler.feed(part)
        outcomes += assembler.finish()[0]
        ready = [o for o in outcomes if isinstance(o, Ready)]
        return {o.event_id for o in core.process(ready).records if o.event_id}

    def _conn(self) -> Any:
        import psycopg2

        conn: Any = getattr(self, "_verify_conn", None)
        if conn is None or conn.closed:
            conn = psycopg2.connect(self.endpoints.postgres_dsn)
            conn.autocommit = True
            self._verify_conn = conn
        return conn

    def shutdown(self) -> None:
        if self.load is not None:
            self.load.stopping.set()
            self.load.join(60)
            self.load.error = None  # a failure of its own was reported already
        named = [getattr(self, n, None) for n in ("consumer", "replay", "worker", "capture")]
        for component in [*getattr(self, "tx_workers", []), *named]:
            if component is not None:
                component.stop()
        try:
            self.sql(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name IN (%s, %s) AND NOT active",
                (self.slot, self.witness),
            )
        except Exception as exc:  # the stack goes away next anyway
            log(f"dropping the slots: {exc}")


def exchanged(crossing: tuple[int, int], forwarded: int) -> str | None:
    """--by-partition: why the run did not exercise the exchange (too few of orders@3's
    transactions across partitions, or nothing forwarded), or ``None`` when it did."""
    crossed, of = crossing
    if crossed < of * CROSSING_AT_LEAST or not of:
        return f"only {crossed} of {of} orders@3 transactions across partitions (a third wanted)"
    if not forwarded:
        return "nothing was forwarded through the exchange topic"
    return None


def _interrupted(signum: int, frame: Any) -> None:
    """SIGTERM stops the suite as Ctrl-C does: ``main``'s ``finally`` stops every
    component it started and the stack. Before, a suite stopped by SIGTERM left its
    workers, transaction workers and consumer running, retrying a stack that was gone."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--short", action="store_true", help="a few faults (default)")
    length.add_argument("--long", action="store_true", help="20 kills, a 30 s broker pause")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--source",
        choices=SOURCES,
        default="postgres",
        help="the database captured: PostgreSQL (default) or MariaDB (binlog)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    kit.broker_option(parser, both=False)
    parser.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="Kafka's nodes; with 3 or more the suite also kills the leading node and "
        "restarts the whole cluster",
    )
    parser.add_argument(
        "--exactly-once",
        action="store_true",
        help='the workers with processing_guarantee = "exactly_once" (Kafka only); prints '
        "duplicates= as a read_committed reader counts them",
    )
    parser.add_argument(
        "--by-partition",
        action="store_true",
        help="the transaction workers with transactions.by_partition, capture routing "
        "orders@3's tables by its keys, two orders per transaction; prints the share of "
        "transactions across partitions and the records forwarded through the exchange",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        help="how long the load runs (the mode's faults in it; at least 25): the test "
        "suite's shorter run",
    )
    args = parser.parse_args(argv)
    if importlib.util.find_spec("pyspark") is None:  # the suite kills replays too
        parser.error(SPARK_MISSING)
    mode = LONG if args.long else SHORT
    if (args.brokers > 1 or args.exactly_once) and args.broker != "kafka":
        parser.error("--brokers and --exactly-once need --broker kafka")
    if not 1 <= args.brokers <= 5:
        parser.error(f"--brokers must be 1 to 5, not {args.brokers}")
    if args.seconds is not None:
        if args.seconds < 25:
            parser.error(f"--seconds must be at least 25 (room for the faults), not {args.seconds}")
        mode = replace(mode, load_seconds=args.seconds)
    signal.signal(signal.SIGTERM, _interrupted)
    work = Path(tempfile.mkdtemp(prefix="bizevents-faults-"))
    log(
        f"{mode.name} mode, {args.source}, {args.broker} ({args.brokers}), seed {args.seed}"
        f"{', by partition' if args.by_partition else ''}, work folder {work}"
    )
    faults = Faults(
        mode,
        args.seed,
        work,
        args.source,
        args.broker,
        args.brokers,
        args.exactly_once,
        args.by_partition,
    )
    started = time.monotonic()
    try:
        faults.start_stack()
        report = faults.run()
    except Exception as exc:  # the suite could not run: one sentence, the logs kept
        print(f"the fault suite could not run: {exc} (logs in {work})", file=sys.stderr)
        return 2
    finally:
        faults.shutdown()
        if hasattr(faults, "stack"):
            faults.stop_stack()
    load = faults.load
    assert load is not None
    exits = [e for c in faults.supervised() for e in c.unexpected]
    report.unexpected_exits = len(exits)
    tx_kills = sum(w.kills for w in faults.tx_workers)
    tx_leaves = sum(w.leaves for w in faults.tx_workers)
    kills = (
        faults.capture.kills
        + faults.worker.kills
        + faults.replay.kills
        + tx_kills
        + faults.consumer.kills
    )
    once = f" duplicates={faults.duplicates}" if args.exactly_once else ""
    print(report.line() + once, flush=True)
    print(
        f"  kills={kills} (capture {faults.capture.kills}, worker {faults.worker.kills}, "
        f"replay {faults.replay.kills}, transaction workers {tx_kills}, "
        f"consumer {faults.consumer.kills}) "
        f"transaction_worker_leaves={tx_leaves} transaction_worker_joins={faults.tx_joins} "
        f"long_transactions={len(faults.long_orders)} broker_pauses={faults.broker_pauses} "
        f"({mode.pause_s:.0f} s) {args.source}_restarts={faults.db_restarts} "
        f"binlog_kills={faults.binlog_kills} broker={args.broker} ({args.brokers}) "
        f"broker_kills={faults.broker_kills} cluster_restarts={faults.cluster_restarts} "
        f"load_steps={load.steps} "
        f"failed_steps={load.failed_steps} seconds={time.monotonic() - started:.0f}"
    )
    print(
        f"  events_expected={report.events_expected} replay_expected={report.replay_expected} "
        f"transaction_events_expected={report.tx_expected} "
        f"identical_duplicates={report.identical_duplicates} "
        f"same_content_duplicates={report.same_content_duplicates} "
        f"technical_copies={report.tech_duplicates} dead_letters={report.dead_letters}"
    )
    bypassed = exchanged(faults.crossing, faults.forwarded) if args.by_partition else None
    if args.by_partition:
        crossed, of = faults.crossing
        print(
            f"  crossing_share={crossed / max(of, 1):.2f} ({crossed} of {of} orders@3 "
            f"transactions across partitions) forwarded={faults.forwarded}"
        )
    if bypassed is not None:
        print(f"  the exchange was not exercised: {bypassed}")
    for detail in report.details:
        print(f"  {detail}")
    for exit_ in exits:
        print("  unexpected exit: " + exit_.replace("\n", "\n    "))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if report.ok() and not faults.duplicates and bypassed is None else 1


if __name__ == "__main__":
    sys.exit(main())
