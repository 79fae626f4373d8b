"""The planner's watermarks from Fetch answers, against the embedded broker (whose
ListOffsets is not exact for batches of several records; Apache Kafka's is, and the
planner asks it instead, docs/broker.md): right, and from about one answer per
partition, however much the partitions hold."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bizevents.devstack import Endpoints
from bizevents.replay.plan import Planner

PARTITIONS = 6
PER_PARTITION = 4_000


def test_watermarks_read_one_answer_per_partition(tansu: Endpoints) -> None:
    """A partition that has answered is paused: the planner read a sixth of a 300,000-record
    topic before, as partitions already answered kept the queue ahead of the others."""
    kafka = {"bootstrap.servers": tansu.bootstrap_servers}
    topic = f"plan-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({**kafka, "linger.ms": 20})
    value = b"x" * 200
    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(topic, value, str(i).encode(), partition=partition)
            if i % 1000 == 0:
                producer.poll(0)
    assert producer.flush(60) == 0

    planner = Planner(kafka)
    marks = planner.watermarks([(topic, p) for p in range(PARTITIONS)])
    assert marks == {(topic, p): (0, PER_PARTITION) for p in range(PARTITIONS)}
    # a fetch answer per partition holds up to 64 KB (some 300 of these records): the
    # planner stops each partition after its first, not after the others have answered
    assert 0 < planner.records_read <= PARTITIONS * 400, planner.records_read


def test_watermarks_of_batches_larger_than_the_fetch_queue(tansu: Endpoints) -> None:
    """A fetch answer holds whole batches: a 2.5 MB batch overfills the planner's 1 MB
    queue, which librdkafka then answers by postponing the other partitions' fetches
    (by its default second; the planner asks it to wait 10 ms, which bench/replay.py's
    preparation time shows): the watermarks still come right for every partition."""
    kafka = {"bootstrap.servers": tansu.bootstrap_servers}
    topic = f"plan-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    # each partition's records in one batch of about 2.5 MB
    producer = Producer(
        {**kafka, "linger.ms": 200, "batch.size": 4_000_000, "message.max.bytes": 8_000_000}
    )
    for partition in range(PARTITIONS):
        for i in range(8_000):
            producer.produce(topic, b"x" * 300, str(i).encode(), partition=partition)
            if i % 1000 == 0:
                producer.poll(0)
    assert producer.flush(60) == 0

    planner = Planner(kafka)
    marks = planner.watermarks([(topic, p) for p in range(PARTITIONS)])
    assert marks == {(topic, p): (0, 8_000) for p in range(PARTITIONS)}
    assert planner.records_read > 0  # from Fetch answers
