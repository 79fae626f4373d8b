"""What a transaction translator cannot have from the technical topics it reads, found
before the worker joins its group and said in one sentence then, not at the first record.

Debezium's PostgreSQL connector gives each record of one transaction its own transaction
id, ``<txId>:<LSN of the record>`` (docs/technical-envelope.md, "Beside Debezium"), where
bizevents capture gives all of them the id of the commit. No END record of the
transaction topic then names the changes of its transaction: the worker would dead-letter
every change as part of a transaction that never ends. The newest records of each topic
say which kind of id it holds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from bizevents.contracts.envelope import ChangeEvent, PgPosition
from bizevents.contracts.exceptions import DecodeError
from bizevents.contracts.technical import AutoDecoder
from bizevents.plumbing.kafka import while_restarting

#: Records read from the end of each partition: the newest may be a tombstone.
NEWEST = 2


def per_record_ids(event: ChangeEvent) -> bool:
    """Whether the change's transaction id is its own position (Debezium's PostgreSQL
    ids), not its transaction's commit."""
    tx, pos = event.transaction, event.source.position
    if tx is None or not isinstance(pos, PgPosition) or pos.lsn is None:
        return False
    return tx.id == f"{pos.tx_id}:{pos.lsn}"


def newest_changes(
    kafka: Mapping[str, Any],
    topics: Sequence[str],
    decoder: AutoDecoder,
    timeout: float = 10.0,
    wait_s: float = 0.0,
) -> dict[str, list[ChangeEvent]]:
    """The change events among the last :data:`NEWEST` records of each partition of
    ``topics``, by topic (records that do not decode are left to the worker); a
    partition's ends and topics' metadata not known yet (a leader moving, a node
    restarting) are asked again for ``wait_s``
    (:func:`~bizevents.plumbing.kafka.while_restarting`)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    def ends(tp: Any) -> tuple[int, int]:
        low, high = while_restarting(
            f"reading the ends of {tp.topic}[{tp.partition}]",
            lambda: consumer.get_watermark_offsets(tp, timeout=timeout),
            wait_s,
        )
        return int(low), int(high)

    def metadata(topic: str) -> Any:
        return while_restarting(
            f"reading the metadata of {topic}",
            lambda: consumer.list_topics(topic, timeout=timeout),
            wait_s,
        ).topics[topic]

    consumer = Consumer(
        {
            **kafka,
            "group.id": "bizevents-provenance",
            "enable.auto.commit": False,
            # a partition's end is said even when its last offset holds no record
            "enable.partition.eof": True,
        }
    )
    found: dict[str, list[ChangeEvent]] = {topic: [] for topic in topics}
    try:
        wanted: dict[tuple[str, int], int] = {}
        for topic in topics:
            meta = metadata(topic)
            for p in meta.partitions:
                low, high = ends(TopicPartition(topic, p))
                if high > low:
                    wanted[(topic, p)] = high
        consumer.assign(
            [TopicPartition(t, p, max(0, high - NEWEST)) for (t, p), high in wanted.items()]
        )
        deadline = time.monotonic() + timeout
        while wanted and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            where = (str(message.topic()), int(message.partition() or 0))
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    wanted.pop(where, None)
                continue
            if int(message.offset() or 0) + 1 >= wanted.get(where, 0):
                wanted.pop(where, None)
            try:
                event = decoder.decode(message.key(), message.value())
            except DecodeError:
                continue
            if isinstance(event, ChangeEvent):
                found[where[0]].append(event)
    finally:
        consumer.close()
    return found


def lacking_transactions(ref: str, newest: Mapping[str, Sequence[ChangeEvent]]) -> str | None:
    """The sentence saying that transaction translator ``ref`` cannot have whole
    transactions from these topics, or None when it can."""
    foreign = sorted(t for t, events in newest.items() if any(map(per_record_ids, events)))
    if not foreign:
        return None
    return (
        f"{ref} cannot have whole transactions from {', '.join(foreign)}: each change there "
        "carries its own position as its transaction id (Debezium's PostgreSQL connector "
        "writes them so), so no END record of the transaction topic names its changes; "
        "pin a row translator for these topics, or capture them with bizevents capture "
        "(docs/from-debezium.md)"
    )
