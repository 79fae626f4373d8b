"""Kafka plumbing every layer shares: the partition rule, produce with back-pressure,
topic creation, reading a compacted topic's latest values, and what the broker can do.

One of each, so that capture, the worker and the replay cannot drift apart: the
replay's corrected events land in the partition of the live events they supersede
only because both use :func:`partition_for`.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from bizevents.plumbing.errors import TerminalError, TransientError

log = structlog.get_logger("kafka")
T = TypeVar("T")

__all__ = [
    "EMBEDDED_BROKER",
    "FULL_KAFKA",
    "BrokerTraits",
    "DeliveryError",
    "TopicCreationError",
    "broker_traits",
    "ensure_topics",
    "partition_for",
    "produce",
    "read_latest",
    "restarting",
    "send_confirmed",
    "stay_in_group",
    "stay_in_group_where_needed",
    "traits_of",
    "while_restarting",
]


class TopicCreationError(TerminalError):
    """The cluster refused to create a topic (a policy, a bad name, a quota)."""


def partition_for(key: bytes | None, partitions: int) -> int:
    """librdkafka's default partitioner for keyed records: ``crc32(key) % partitions``."""
    return zlib.crc32(key or b"") % partitions


def produce(
    producer: Any,
    topic: str,
    value: bytes | None,
    key: bytes | None = None,
    *,
    partition: int = -1,
    headers: Any = None,
    on_delivery: Callable[..., None] | None = None,
    wait_s: float = 0.1,
) -> None:
    """Hand one record to a librdkafka producer, waiting while its queue is full.

    A full queue is back-pressure, not an error: serve delivery reports (which frees
    room) and try again, for as long as it takes.
    """
    while True:
        try:
            if partition < 0:
                producer.produce(topic, value, key, headers=headers, on_delivery=on_delivery)
            else:
                producer.produce(
                    topic, value, key, partition=partition, headers=headers, on_delivery=on_delivery
                )
            return
        except BufferError:
            producer.poll(wait_s)


class DeliveryError(TransientError):
    """Records the broker did not acknowledge; ``reason`` says why (its first error, or
    the wait that ran out), for the caller's sentence."""

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"the broker did not take the records for {topic}: {reason}")
        self.topic = topic
        self.reason = reason


def send_confirmed(
    producer: Any,
    topic: str,
    records: Sequence[tuple[bytes | None, bytes | None, int]],
    timeout_s: float = 30.0,
) -> None:
    """Write ``(key, value, partition)`` records (partition -1: the key's) and return
    once the broker acknowledged every one: what a command writes before it tells a
    person it is done. One that is refused, or not acknowledged within ``timeout_s``:
    :class:`DeliveryError`."""
    failed: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    for key, value, partition in records:
        produce(producer, topic, value, key, partition=partition, on_delivery=delivered)
    left = producer.flush(timeout_s)
    if failed:
        raise DeliveryError(topic, str(failed[0]))
    if left:
        raise DeliveryError(topic, f"no acknowledgement within {timeout_s:g} s")


#: librdkafka's codes of a cluster restarting, a node down, or a partition's leader moving:
#: what a start-up read or CreateTopics meets for a while and then no more.
_RESTARTING = frozenset(
    {
        "NOT_LEADER_FOR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "OFFSET_NOT_AVAILABLE",
        "NOT_CONTROLLER",
        "REQUEST_TIMED_OUT",
        "_UNKNOWN_PARTITION",
        "_ALL_BROKERS_DOWN",
        "_TRANSPORT",
        "_DESTROY_BROKER",
        "_TIMED_OUT",
    }
)


def restarting(exc: BaseException) -> bool:
    """Whether ``exc`` (librdkafka's) says the cluster is restarting, a node is down or a
    leader moves: worth asking again, where any other error is not."""

    if isinstance(exc, _AskAgain):
        return True
    err = _kafka_error(exc)
    return err is not None and (err.retriable() or err.name() in _RESTARTING)


def _kafka_error(exc: BaseException) -> Any:
    """librdkafka's ``KafkaError`` that ``exc`` carries, or None."""
    from confluent_kafka import KafkaError, KafkaException

    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return err if isinstance(err, KafkaError) else None


class _AskAgain(TransientError):
    """An answer that says the cluster is not ready yet (see :func:`restarting`)."""


def while_restarting(what: str, call: Callable[[], T], wait_s: float) -> T:
    """``call()``, asked again while the cluster restarts (:func:`restarting`), for
    ``wait_s`` at most: the one retry policy of start-up's reads and topic creation.

    The wait is said once in the log; when it is over, the last error is raised (a
    :class:`TransientError`, the caller's sentence)."""
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            return call()
        except Exception as exc:
            if not restarting(exc) or time.monotonic() > deadline:
                if restarting(exc) and not isinstance(exc, TransientError):
                    raise TransientError(
                        f"{what}: the Kafka cluster did not answer within {wait_s:g} s ({exc})"
                    ) from exc
                raise
            if not said:
                log.warning(
                    "the Kafka cluster is restarting or a node is down: asking again",
                    doing=what,
                    for_s=wait_s,
                    error=str(exc),
                )
                said = True
            time.sleep(1.0)


def ensure_topics(
    admin: Any,
    topics: Sequence[str],
    partitions: int,
    *,
    replication_factor: int = -1,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 30,
    wait_s: float | None = None,
) -> dict[str, int]:
    """Create the topics that do not exist yet; ``topic -> partition count`` of each.

    A topic another process created meanwhile is fine. A cluster restarting, or one
    that lost a node (its controller among them, which times CreateTopics out until its
    metadata names the new controller), is asked again for ``wait_s`` (twice
    ``timeout_s`` unless given; :func:`while_restarting`); then it is a
    :class:`TransientError`. A refusal is a :class:`TopicCreationError`.
    """
    if not topics:
        return {}
    existing = while_restarting(
        f"preparing the topics {', '.join(topics)}",
        lambda: _create_missing(admin, topics, partitions, replication_factor, config, timeout_s),
        2 * timeout_s if wait_s is None else wait_s,
    )
    return {t: len(existing[t].partitions) for t in topics}


def _create_missing(
    admin: Any,
    topics: Sequence[str],
    partitions: int,
    replication_factor: int,
    config: Mapping[str, str] | None,
    timeout_s: float,
) -> Any:
    """:func:`ensure_topics`' one attempt: the cluster's topics once ``topics`` exist."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.cimpl import NewTopic

    try:
        existing = admin.list_topics(timeout=timeout_s).topics
        missing = [t for t in topics if t not in existing]
        if missing:
            wanted = [
                NewTopic(t, partitions, replication_factor, config=dict(config or {}))
                for t in missing
            ]
            for topic, future in admin.create_topics(wanted, request_timeout=15).items():
                try:
                    future.result(timeout_s)
                except TimeoutError as exc:  # no answer yet: a cluster electing its leaders
                    raise _AskAgain(f"no answer to creating {topic} in {timeout_s:g} s") from exc
                except KafkaException as exc:
                    err = exc.args[0] if exc.args else None
                    if (
                        isinstance(err, KafkaError)
                        and err.code() == KafkaError.TOPIC_ALREADY_EXISTS
                    ):
                        continue
                    if restarting(exc):
                        raise _AskAgain(f"cannot create topic {topic} yet: {exc}") from exc
                    raise TopicCreationError(
                        f"the cluster refused to create {topic}: {exc}"
                    ) from exc
            existing = admin.list_topics(timeout=timeout_s).topics
        # Kafka answers CreateTopics (ours or another process's) before its metadata
        # has the new partitions: ask again until they show, for a few seconds here;
        # a cluster still electing its leaders takes longer, and the caller asks again.
        deadline = time.monotonic() + min(timeout_s, 10)
        while absent := [t for t in topics if not (t in existing and existing[t].partitions)]:
            if time.monotonic() >= deadline:
                raise _AskAgain(f"the topics {', '.join(absent)} have no partitions yet")
            time.sleep(0.1)
            existing = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        if restarting(exc):
            raise _AskAgain(f"cannot reach the Kafka cluster to prepare topics: {exc}") from exc
        raise TransientError(f"cannot reach the Kafka cluster to prepare topics: {exc}") from exc
    return existing


def read_latest(
    kafka: Mapping[str, Any],
    topic: str,
    group: str,
    timeout_s: float = 10,
    wait_s: float | None = None,
) -> dict[bytes, bytes | None]:
    """The last value of every key of ``topic`` (a compacted topic of state: capture's
    offsets, the worker's shadows and promotions), read to its end; ``None`` for a key
    whose last record is a tombstone. A topic that does not exist has no keys.

    ``kafka`` is a confluent-kafka configuration; ``group`` names the reader (nothing
    is committed). A cluster that does not answer within ``timeout_s``, a partition
    whose leader moves, or a cluster restarting, is read again, for up to ``wait_s``
    (three times ``timeout_s`` unless given); then, or when the cluster answers the
    topic with an error other than "unknown topic", it is a :class:`TransientError`.
    """
    return while_restarting(
        f"reading the topic {topic}",
        lambda: _read_latest_once(kafka, topic, group, timeout_s),
        3 * timeout_s if wait_s is None else wait_s,
    )


def _read_latest_once(
    kafka: Mapping[str, Any], topic: str, group: str, timeout_s: float
) -> dict[bytes, bytes | None]:
    """:func:`read_latest`'s one attempt."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer(
        {**kafka, "group.id": group, "enable.auto.commit": False, "enable.partition.eof": True}
    )
    found: dict[bytes, bytes | None] = {}
    try:
        try:
            meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        except KafkaException as exc:
            raise _AskAgain(
                f"the Kafka cluster at {kafka.get('bootstrap.servers')} did not answer "
                f"within {timeout_s:g} s ({exc})"
            ) from exc
        if meta is None or (
            meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        ):
            return found  # the cluster answered: no such topic
        if meta.error is not None:
            failed = _AskAgain if meta.error.retriable() else TransientError
            raise failed(f"the Kafka cluster answered the topic {topic} with {meta.error}")
        for partition in meta.partitions:
            tp = TopicPartition(topic, partition)
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
            consumer.assign([TopicPartition(topic, partition, low)])
            offset = low
            # Past the high watermark, read on until the fetch says "end" (a high
            # watermark asked for just after a write may not count it yet), but for
            # half a second at most: a topic written to all the time ends too.
            deadline: float | None = None
            while True:
                if offset >= high and deadline is None:
                    deadline = time.monotonic() + 0.5
                if deadline is not None and time.monotonic() > deadline:
                    break
                msg = consumer.poll(0.1 if deadline is not None else 5)
                if msg is None:
                    if deadline is not None:
                        continue
                    # (a node restarting holds the fetch: asked again, within wait_s)
                    raise _AskAgain(f"the topic {topic} did not answer")
                err = msg.error()
                if err is not None:
                    # the end's own offset: past a transaction's commit marker, which
                    # no record carries (a worker's exactly-once checkpoints)
                    end = max(offset, msg.offset() or 0)
                    if err.code() == KafkaError._PARTITION_EOF and end >= high:
                        break
                    continue
                offset = (msg.offset() or 0) + 1
                key = msg.key()
                if key is not None:
                    found[key] = msg.value()
        return found
    except KafkaException as exc:
        if restarting(exc) or _not_known_yet(exc):
            raise _AskAgain(f"cannot read the topic {topic}: {exc}") from exc
        raise TransientError(f"cannot read the topic {topic}: {exc}") from exc
    finally:
        consumer.close()


def _not_known_yet(exc: BaseException) -> bool:
    """Whether a partition's leader answered "unknown topic" for a topic the cluster's
    metadata has just listed: on several nodes a topic created a moment ago reaches each
    node a moment later (the fault suite's workers met it at start on three nodes)."""
    from confluent_kafka import KafkaError

    err = _kafka_error(exc)
    return err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def stay_in_group(consumer: Any) -> None:
    """Let ``consumer`` (a started aiokafka consumer) close without leaving its group:
    the broker drops the member after its session timeout, as it drops a killed one.

    The embedded broker keeps a member that leaves while its group rebalances as the
    group's leader for ever, and then gives no member a share again (docs/broker.md);
    the fault suite lost a transaction group so (docs/reliability.md, finding 8). Kafka
    Streams' consumers do not leave on close by default either: a restarted member then
    costs one rebalance, not two. The price: a member stopped for good holds its share
    until the session timeout. aiokafka has no setting for it (its static membership,
    which does not leave, makes every join on the embedded broker wait 3 s more), so
    this replaces the one step of its close that leaves, for this consumer."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None:  # never started: it has no group to leave
        return

    async def forget_membership() -> None:
        coordinator.reset_generation()  # what aiokafka does after its LeaveGroup

    coordinator._maybe_leave_group = forget_membership


@dataclass(frozen=True, slots=True)
class BrokerTraits:
    """What the cluster can do, where the embedded broker (Tansu) and Apache Kafka differ
    (docs/broker.md). The code asks these, never a broker's name: each workaround of the
    embedded broker is kept only where its trait says the broker needs it."""

    #: What the probe found, for logs and the test suite's header.
    name: str
    #: A member may send LeaveGroup when it stops (Tansu wedges a rebalancing group
    #: whose leader leaves): its partitions move at once, not after its session timeout.
    leaves_groups: bool
    #: ListOffsets answers a partition's ends exactly (Tansu understates "latest" for
    #: batches of several records): ends need no Fetch.
    exact_list_offsets: bool
    #: A Fetch past a partition's end answers OFFSET_OUT_OF_RANGE (Tansu answers
    #: nothing, for ever).
    fetch_past_end_fails: bool
    #: aiokafka's idempotent and transactional producers start, and read_committed
    #: readers skip aborted records.
    transactions: bool
    #: cleanup.policy=compact is carried out.
    compacts: bool


FULL_KAFKA = BrokerTraits(
    name="kafka",
    leaves_groups=True,
    exact_list_offsets=True,
    fetch_past_end_fails=True,
    transactions=True,
    compacts=True,
)
EMBEDDED_BROKER = BrokerTraits(
    name="embedded (tansu)",
    leaves_groups=False,
    exact_list_offsets=False,
    fetch_past_end_fails=False,
    transactions=False,
    compacts=False,
)

#: ApiVersions keys only a complete Kafka broker lists: the KIP-848 group heartbeat and
#: CreatePartitions. The embedded broker lists neither (docs/broker.md).
_FULL_KAFKA_APIS = frozenset({68, 37})
_traits_lock = threading.Lock()
_traits: dict[str, BrokerTraits] = {}


def broker_traits(
    bootstrap_servers: str,
    security_protocol: str = "PLAINTEXT",
    timeout_s: float = 3.0,
    wait_s: float = 0.0,
) -> BrokerTraits:
    """The traits of the cluster at ``bootstrap_servers``, probed once per process.

    The probe is one ApiVersions request (v0, which every broker answers before any
    authentication) over plain TCP to the first bootstrap server that answers. A
    cluster behind TLS is not probed: it is taken for Apache Kafka (the embedded broker
    never speaks TLS). A cluster that answers no probe gets the embedded broker's
    traits, whose workarounds are safe on any broker, and is probed again next time;
    with ``wait_s``, it is probed again for that long first (a cluster restarting)."""
    bootstrap_servers = ",".join(part.strip() for part in bootstrap_servers.split(","))
    with _traits_lock:
        known = _traits.get(bootstrap_servers)
    if known is not None:
        return known
    if security_protocol not in ("PLAINTEXT", "SASL_PLAINTEXT"):
        found: BrokerTraits | None = FULL_KAFKA
    else:
        found = None
        deadline = time.monotonic() + wait_s
        while found is None:
            for server in bootstrap_servers.split(","):
                apis = _api_keys(server.strip(), timeout_s)
                if apis is not None:
                    found = FULL_KAFKA if apis >= _FULL_KAFKA_APIS else EMBEDDED_BROKER
                    break
            if found is None and time.monotonic() < deadline:
                time.sleep(1.0)
            else:
                break
    if found is None:
        return EMBEDDED_BROKER
    with _traits_lock:
        _traits[bootstrap_servers] = found
    return found


def _api_keys(server: str, timeout_s: float) -> frozenset[int] | None:
    """The API keys a broker lists in its ApiVersions v0 answer; None when it does not
    answer (or answers what this does not read)."""
    host, _, port = server.rpartition(":")
    host = host.strip("[]")
    client_id = b"bizevents-probe"
    request = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            head = _recv_exactly(sock, 4)
            (size,) = struct.unpack(">i", head)
            if not 10 <= size <= 1 << 16:  # a few hundred bytes; bound what we read
                return None
            body = _recv_exactly(sock, size)
    except (OSError, ValueError):
        return None
    correlation, error, count = struct.unpack(">ihi", body[:10])
    if correlation != 1 or error != 0 or not 0 <= count <= (size - 10) // 6:
        return None
    return frozenset(struct.unpack(">h", body[10 + 6 * i : 12 + 6 * i])[0] for i in range(count))


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ValueError("the broker closed the connection")
        data += chunk
    return data


def traits_of(consumer: Any) -> BrokerTraits:
    """The traits of a started aiokafka consumer's cluster (:func:`broker_traits`)."""
    client = getattr(consumer, "_client", None)
    servers = getattr(client, "_bootstrap_servers", None)
    if isinstance(servers, list | tuple):
        servers = ",".join(servers)
    if not isinstance(servers, str):
        return EMBEDDED_BROKER
    return broker_traits(servers, str(getattr(client, "_security_protocol", "PLAINTEXT")))


def stay_in_group_where_needed(consumer: Any) -> None:
    """:func:`stay_in_group` when the consumer's broker cannot take a LeaveGroup
    (:attr:`BrokerTraits.leaves_groups`); on Apache Kafka a stopped member leaves, so
    its partitions move to the others at once rather than after its session timeout.
    A member that calls :func:`traits_of` once started asks nothing of the broker here
    (a stop while the broker is paused does not wait for the probe)."""
    if not traits_of(consumer).leaves_groups:
        stay_in_group(consumer)
