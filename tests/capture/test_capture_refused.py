"""Records Apache Kafka refuses for good (real PostgreSQL, Kafka and registry): capture
never retries them forever. A keyless record cannot be on a compacted topic, so the
dead-letter topic is a log (``cleanup.policy=delete``), a TRUNCATE is skipped by default
(as Debezium's ``skipped.operations=t``), and a record the broker refuses anyway
becomes one log sentence and a dead letter while capture goes on."""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog
from confluent_kafka.admin import AdminClient, ConfigResource

from bizevents.capture.config import CaptureConfig
from bizevents.contracts.envelope import ChangeEvent
from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import Db, capture_endpoints, database, in_process, read_topic
from tests.capture.mysql_helpers import in_process as in_process_mysql
from tests.capture.mysql_helpers import mysql_database
from tests.compaction import kept

pytestmark = pytest.mark.integration

_HUGE = "(repeat('9', 5000))::numeric"  # more digits than Python converts to int


@pytest.fixture
def db(bizevents_stack_on: Callable[[Any], Endpoints]) -> Iterator[Db]:
    with database(bizevents_stack_on("kafka")) as made:  # Tansu checks no record's key
        yield made


def _ids(db: Db, table: str) -> list[int]:
    return sorted(
        r.decoded.after["id"]
        for r in read_topic(db.endpoints, db.topic(table))
        if isinstance(r.decoded, ChangeEvent) and r.decoded.after
    )


def _dead_letters(bootstrap: str, topic: str) -> list[dict[str, bytes]]:
    return [dict(r.headers) for r in kept(bootstrap, topic)]


def _cleanup_policy(db: Db, topic: str) -> str:
    admin = AdminClient({"bootstrap.servers": db.endpoints.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    return str(configs["cleanup.policy"].value)


def test_a_snapshot_dead_letter_without_a_key_is_taken(db: Db, tmp_path: Path) -> None:
    """A snapshot row that does not convert has no key to park by: its dead letter is
    keyless, which the dead-letter topic takes because it is not compacted."""
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, n numeric)")
    db.sql(f"INSERT INTO {s}.t VALUES (1, {_HUGE}), (2, 1.5)")
    config = db.config(["t"])  # on_conversion_error = "dead-letter"
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot(timeout=30)
        db.sql(f"INSERT INTO {s}.t VALUES (3, 2.5)")
        run.wait_acked(db.wal_lsn(), timeout=30)
        run.stop()
    assert _cleanup_policy(db, config.dlq_topic) == "delete"
    assert _ids(db, "t") == [2, 3]
    (dead,) = _dead_letters(db.endpoints.bootstrap_servers, config.dlq_topic)
    assert dead["bizevents.source.position"] == b"snapshot"


def _truncate_between_two_inserts(
    db: Db, config: CaptureConfig, tmp_path: Path
) -> list[MutableMapping[str, Any]]:
    """Table ``t`` gets 1, a TRUNCATE, then 2, under capture; what capture logged."""
    s = db.schema
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY)")
    with (
        structlog.testing.capture_logs() as logs,
        in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run,
    ):
        run.wait_snapshot(timeout=30)
        db.sql(f"INSERT INTO {s}.t VALUES (1)")
        db.sql(f"TRUNCATE {s}.t")
        db.sql(f"INSERT INTO {s}.t VALUES (2)")
        run.wait_acked(db.wal_lsn(), timeout=30)
        run.stop()
    assert _ids(db, "t") == [1, 2]
    return logs


def test_a_truncate_is_skipped_by_default_and_capture_goes_on(db: Db, tmp_path: Path) -> None:
    config = db.config(["t"], partitions=2)
    logs = _truncate_between_two_inserts(db, config, tmp_path)
    records = read_topic(db.endpoints, db.topic("t"))
    assert not [r for r in records if isinstance(r.decoded, ChangeEvent) and r.decoded.op == "t"]
    assert [e["event"] for e in logs if "TRUNCATE" in e["event"]] == [
        "TRUNCATE not written (truncate_events = false)"
    ]


def test_a_record_the_broker_refuses_becomes_a_dead_letter(db: Db, tmp_path: Path) -> None:
    """``truncate_events = true`` on a compacted topic: Kafka refuses each keyless
    truncate event for good; each is said once and dead-lettered, and capture goes on."""
    config = db.config(["t"], partitions=2, truncate_events=True)
    logs = _truncate_between_two_inserts(db, config, tmp_path)
    refused = [e for e in logs if e["event"].startswith("Kafka refused a record for good")]
    assert len(refused) == 2  # one truncate event per partition
    assert all(e["topic"] == db.topic("t") for e in refused)
    dead = _dead_letters(db.endpoints.bootstrap_servers, config.dlq_topic)
    assert len(dead) == 2
    assert {d["bizevents.source.topic"] for d in dead} == {db.topic("t").encode()}
    assert all(b"INVALID_RECORD" in d["bizevents.dlq.error"] for d in dead)


@pytest.mark.mysql
def test_a_mariadb_record_the_broker_refuses_becomes_a_dead_letter(
    bizevents_mysql: str, bizevents_stack_on: Callable[[Any], Endpoints], tmp_path: Path
) -> None:
    """The same on MariaDB's binlog: each refused truncate event dead-lettered, the rows
    around it on the topic."""
    with mysql_database(bizevents_mysql, bizevents_stack_on("kafka")) as my:
        my.sql("CREATE TABLE t (id INT PRIMARY KEY)")
        config = my.config(["t"], partitions=2, truncate_events=True)
        with in_process_mysql(config, my.capture_endpoints(tmp_path)) as run:
            run.wait_snapshot()
            my.sql("INSERT INTO t VALUES (1)")
            my.sql(f"TRUNCATE TABLE {my.name}.t")
            my.sql("INSERT INTO t VALUES (2)")
            run.wait_position(my.binlog_end())
            run.stop()
        ids = sorted(
            r.decoded.after["id"]
            for r in read_topic(my.endpoints, my.topic("t"))
            if isinstance(r.decoded, ChangeEvent) and r.decoded.after
        )
        assert ids == [1, 2]
        dead = _dead_letters(my.endpoints.bootstrap_servers, config.dlq_topic)
        assert len(dead) == 2
        assert all(b"INVALID_RECORD" in d["bizevents.dlq.error"] for d in dead)
