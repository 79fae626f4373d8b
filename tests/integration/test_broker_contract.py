"""The broker contract: what differs between Apache Kafka and the embedded broker (Tansu),
each test run on both, each asserting what that broker does (docs/broker.md).

The product reads the difference from one place, the probed
:class:`~bizevents.plumbing.kafka.BrokerTraits`; the first test pins the probe, the others
pin each trait's behaviour on both brokers. Each broker's stack starts once a session
(``bizevents_stack_on``), whichever broker the rest of the suite runs on. Tansu's own
``_known_limit`` tests stay in test_broker_support.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from bizevents.devstack import Endpoints
from bizevents.plumbing.kafka import EMBEDDED_BROKER, FULL_KAFKA, broker_traits
from tests.integration.test_broker_support import (
    AIOKAFKA_FAST_GROUP,
    create_topic,
    produce,
    read_assigned,
)

pytestmark = pytest.mark.integration


@pytest.fixture(params=["kafka", "tansu"])
def broker(request: pytest.FixtureRequest) -> str:
    """The broker of the test, by name."""
    return str(request.param)


@pytest.fixture
def bootstrap(broker: str, bizevents_stack_on: Callable[[Any], Endpoints]) -> str:
    """The broker's stack, started once a session."""
    return bizevents_stack_on(broker).bootstrap_servers


def on(broker: str, kafka: Any, tansu: Any) -> Any:
    """What the test expects of ``broker``."""
    return kafka if broker == "kafka" else tansu


def test_the_probe_tells_the_brokers_apart(broker: str, bootstrap: str) -> None:
    """Every workaround reads these traits: a wrong probe would put Tansu's workarounds
    on Kafka (members that never leave) or take them off Tansu (a wedged group)."""
    assert broker_traits(bootstrap) == on(broker, FULL_KAFKA, EMBEDDED_BROKER)


def test_compaction(broker: str, bootstrap: str, unique_topic: Callable[[str], str]) -> None:
    """Kafka's cleaner removes a key's older versions from a rolled segment, leaving gaps
    in the offsets; Tansu keeps every version."""
    topic = unique_topic("compact")
    create_topic(
        bootstrap,
        topic,
        1,
        **{
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": "100",
        },
    )
    versions: list[bytes | None] = [f"v{i}".encode() for i in range(10)]
    produce(bootstrap, topic, versions, key=lambda _i: b"same-key", partition=0)
    deadline = time.monotonic() + on(broker, 60, 5)
    kept: list[tuple[int, bytes | None]] = []
    while time.monotonic() < deadline:
        time.sleep(0.5)
        # a later record rolls the segment once segment.ms passed: the active segment
        # is never cleaned
        produce(bootstrap, topic, [b"roll"], key=lambda _i: b"roller", partition=0)
        got = read_assigned(bootstrap, topic, expect=None, limit=1)
        kept = [(m.offset() or 0, m.value()) for m in got if m.key() == b"same-key"]
        if broker == "kafka" and len(kept) == 1:
            break
    assert kept == on(broker, [(9, b"v9")], list(enumerate(versions)))


def test_a_keyless_record_on_a_compacted_topic(
    broker: str, bootstrap: str, unique_topic: Callable[[str], str]
) -> None:
    """Kafka refuses it for good, and the whole batch with it; Tansu takes it. Capture
    writes none (a TRUNCATE is skipped by default, the dead-letter topic is not
    compacted) and dead-letters a record refused for good (test_capture_refused.py)."""
    topic = unique_topic("keyless")
    create_topic(bootstrap, topic, 1, **{"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100})
    answers: list[int | None] = []
    for key in (b"k", None, b"k"):
        producer.produce(
            topic, b"v", key, partition=0, on_delivery=lambda e, _m: answers.append(e and e.code())
        )
    assert producer.flush(30) == 0
    assert answers == on(broker, [KafkaError.INVALID_RECORD] * 3, [None] * 3)


def _two_batches_of_100(bootstrap: str, topic: str) -> None:
    """A new one-partition ``topic`` with two batches of 100 records."""
    create_topic(bootstrap, topic, 1)
    for _ in range(2):
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100})
        for i in range(100):
            producer.produce(topic, key=b"k", value=str(i).encode(), partition=0)
        assert producer.flush(30) == 0


def test_list_offsets_latest_of_multi_record_batches(
    broker: str, bootstrap: str, unique_topic: Callable[[str], str]
) -> None:
    """Two batches of 100 records: Kafka's ListOffsets(latest) is 200, Tansu's 101."""
    topic = unique_topic("listoffsets")
    _two_batches_of_100(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        _, listed = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert listed == on(broker, 200, 101)


def test_read_committed_and_aborted_records(
    broker: str, bootstrap: str, unique_topic: Callable[[str], str]
) -> None:
    """A read_committed reader skips an aborted transaction's records on Kafka; Tansu
    hands them over."""
    topic = unique_topic("txn-abort")
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}.tx"})
    producer.init_transactions(15)
    for value, commit in ((b"committed", True), (b"aborted", False), (b"after", True)):
        producer.begin_transaction()
        producer.produce(topic, value=value, partition=0)
        assert producer.flush(10) == 0  # the batch reaches the broker before the end
        if commit:
            producer.commit_transaction(15)
        else:
            producer.abort_transaction(15)
    expected = on(broker, [b"committed", b"after"], [b"committed", b"aborted", b"after"])
    got = read_assigned(
        bootstrap, topic, expect=len(expected), **{"isolation.level": "read_committed"}
    )
    assert [m.value() for m in got] == expected


def test_aiokafka_transactional_producer_start(
    broker: str, bootstrap: str, unique_topic: Callable[[str], str]
) -> None:
    """aiokafka's transactional producer (Faust's exactly_once) starts and commits on
    Kafka; on Tansu its InitProducerId v0 fails at start."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import UnknownError

    topic = unique_topic("aio-txn")
    create_topic(bootstrap, topic, 1)

    async def start_and_commit() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}.tx")
        try:
            await asyncio.wait_for(producer.start(), 20)
            async with producer.transaction():
                await producer.send_and_wait(topic, b"in a transaction", partition=0)
        finally:
            await producer.stop()

    if broker == "tansu":
        with pytest.raises(UnknownError):
            asyncio.run(start_and_commit())
        return
    asyncio.run(start_and_commit())
    got = read_assigned(bootstrap, topic, expect=1, **{"isolation.level": "read_committed"})
    assert [m.value() for m in got] == [b"in a transaction"]


def test_a_fetch_past_the_end(
    broker: str, bootstrap: str, unique_topic: Callable[[str], str]
) -> None:
    """Kafka answers a fetch past a partition's end with OFFSET_OUT_OF_RANGE; Tansu
    answers nothing, and no error and no end-of-partition event come (so the product
    never assigns a position past the end)."""
    topic = unique_topic("past-end")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [b"a", b"b"], partition=0)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",  # the answer itself, not a reset
        }
    )
    errors: list[int] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 10)])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not errors:
            message = consumer.poll(0.2)
            if message is not None:
                error = message.error()
                assert error is not None, "a record past the end"
                errors.append(error.code())
    finally:
        consumer.close()
    assert errors == on(broker, [KafkaError._AUTO_OFFSET_RESET], [])


def test_a_stopped_member_leaves_where_the_broker_can_take_it(
    broker: str, bootstrap: str, unique_topic: Callable[[str], str], caplog: Any
) -> None:
    """The workers' and the consumer kit's stop (``stay_in_group_where_needed``): on Kafka
    the member sends LeaveGroup and the other member takes its partitions in the next
    rebalance, well within the 30 s session timeout; on Tansu it sends none (a leave
    while the group rebalances wedges the group there, docs/broker.md)."""
    from aiokafka import AIOKafkaConsumer

    from bizevents.plumbing.kafka import stay_in_group_where_needed

    topic = unique_topic("leave")
    create_topic(bootstrap, topic, 4)
    caplog.set_level(logging.INFO, logger="aiokafka.consumer.group_coordinator")
    session = {**AIOKAFKA_FAST_GROUP, "session_timeout_ms": 30_000}

    def leaves() -> int:
        return sum("LeaveGroup request" in r.getMessage() for r in caplog.records)

    async def run() -> tuple[int, bool]:
        def member() -> AIOKafkaConsumer:
            return AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=f"{topic}.g",
                enable_auto_commit=False,
                **session,
            )

        async def until(done: Callable[[], bool], limit: float, *members: Any) -> bool:
            try:
                async with asyncio.timeout(limit):
                    while not done():
                        await asyncio.gather(*(m.getmany(timeout_ms=200) for m in members))
            except TimeoutError:
                return False
            return True

        stopping, staying = member(), member()
        try:
            await staying.start()
            staying.subscribe([topic])
            assert await until(lambda: len(staying.assignment()) == 4, 25, staying)
            await stopping.start()
            stopping.subscribe([topic])
            assert await until(
                lambda: len(staying.assignment()) == len(stopping.assignment()) == 2,
                25,
                staying,
                stopping,
            )
            stay_in_group_where_needed(stopping)
            await stopping.stop()
            left = leaves()
            took_over = await until(lambda: len(staying.assignment()) == 4, 15, staying)
            return left, took_over
        finally:
            await stopping.stop()
            await staying.stop()

    left, took_over = asyncio.run(run())
    assert (left, took_over) == on(broker, (1, True), (0, False))


def test_the_replay_planner_takes_ends_from_list_offsets_where_they_are_exact(
    broker: str, bootstrap: str, unique_topic: Callable[[str], str]
) -> None:
    """Both brokers give the planner the true ends of two batches of 100 records: Kafka
    from ListOffsets (no record read), Tansu from a Fetch answer (its ListOffsets would
    say 101)."""
    from bizevents.replay.plan import Planner

    topic = unique_topic("plan-ends")
    _two_batches_of_100(bootstrap, topic)
    planner = Planner({"bootstrap.servers": bootstrap})
    assert planner.watermarks([(topic, 0)]) == {(topic, 0): (0, 200)}
    assert (planner.records_read > 0) == on(broker, False, True)
