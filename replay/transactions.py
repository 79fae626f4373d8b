"""Replay through a transaction translator: whole transactions assembled in Spark.

``bizevents replay --translator orders@3 --topics 'shop.store.*' --to ...`` with a
transaction translator runs here instead of :mod:`bizevents.replay.job`:

1. Plan (driver): the transaction topic's range is read first (its Fetch high
   watermark), then every technical partition's, so the technical ranges end *after* the
   last END read: a transaction whose END is in range has its changes in range (they are
   written before its END). Ranges are whole partitions (from the low watermark).
2. Spark reads each partition's range in a task and keys every record by its
   transaction id (the envelope's ``transaction.id``, the END's ``id``; a change without
   one is its own group), then groups by that key (a shuffle): each transaction's parts
   meet in one task, which assembles them (:mod:`bizevents.translators.assembly`) and translates
   them with the live worker's core (:mod:`bizevents.translators.txcore`): same ids, ``replay``
   set in the lineage.
3. The events are grouped by their output partition and written in commit order (the
   position in the transaction id), so per key the order is the live path's.

Outcomes: a transaction complete in the ranges is translated; one whose END lies beyond
the ranges (it committed after the plan) is left out and counted; one whose END is in
range but lacks changes, or a change with no transaction block, is dead-lettered with
the reason, as live.

Not yet: ``--from``/``--until``, ``--compact``, ``--diff``, files (``--to path:``),
resuming by run id (a rerun replays everything again, with the same ids).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import structlog

from bizevents.replay.exceptions import ReplayConfigError, TopicNotFoundError
from bizevents.replay.plan import READER_SETTINGS, Planner
from bizevents.replay.spec import ReplaySpec
from bizevents.translators.settings import RuntimeSettings

__all__ = ["TransactionReplay", "TxReplayConfig", "TxReplaySummary"]

log = structlog.get_logger("replay")


@dataclass(frozen=True, slots=True)
class TxReplayConfig:
    """What every task needs (picklable)."""

    kafka: dict[str, Any]
    registry: dict[str, Any]
    translator: str
    transaction_topic: str
    dead_letter_topic: str
    subject_strategy: str
    auto_register: bool
    #: output topic -> partitions (events) and the dead-letter topic
    partitions: dict[str, int]
    output_kind: str
    output_target: str


@dataclass
class TxReplaySummary:
    run_id: str
    read: int = 0
    transactions: int = 0
    emitted: int = 0
    dead_lettered: int = 0
    left_out: int = 0
    seconds: float = 0.0
    ranges: list[tuple[str, int, int, int]] = field(default_factory=list)


class TransactionReplay:
    """One replay run through a transaction translator."""

    def __init__(
        self,
        spec: ReplaySpec,
        settings: RuntimeSettings,
        *,
        spark: Any = None,
        master: str | None = None,
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.spark = spark
        self.master = master

    def _refuse(self) -> None:
        spec = self.spec
        unsupported = [
            ("--from", spec.start is not None),
            ("--until", spec.until is not None),
            ("--compact", spec.compact),
            ("--diff", spec.diff_against is not None),
            ("--to path:", spec.output is not None and spec.output.kind == "path"),
        ]
        named = [name for name, used in unsupported if used]
        if named:
            raise ReplayConfigError(
                f"{', '.join(named)} {'is' if len(named) == 1 else 'are'} not supported yet with "
                f"a transaction translator ({spec.translator}): it replays whole partitions "
                "to topics (docs/transactions.md)"
            )

    def prepare(self) -> tuple[TxReplayConfig, list[tuple[str, int, int, int]]]:
        from bizevents.contracts.technical.transaction import transaction_topic
        from bizevents.plumbing.kafka import ensure_topics
        from bizevents.replay.job import _check_contracts, _check_registry
        from bizevents.translators.registry import discover

        self._refuse()
        spec, settings = self.spec, self.settings
        assert spec.output is not None
        name = spec.translator.partition("@")[0]
        translator = discover(names=[name]).resolve(spec.translator)
        planner = Planner(settings.kafka.librdkafka())
        counts = planner.topics(spec.topics)
        prefixes = {t.rsplit(".", 2)[0] for t in counts}
        if len(prefixes) != 1:
            raise ReplayConfigError(
                f"--topics {spec.topics!r} spans several capture prefixes "
                f"({', '.join(sorted(prefixes))}); a transaction replay reads one"
            )
        tx_topic = transaction_topic(prefixes.pop())
        try:
            planner.topics(tx_topic)
        except TopicNotFoundError:
            raise ReplayConfigError(
                f"{tx_topic} does not exist: a transaction translator needs the capture's "
                "transaction metadata"
            ) from None
        # the transaction topic's end first: every change of a transaction ended by then
        # is in the technical ranges planned after it
        tx_marks = planner.watermarks([(tx_topic, 0)])
        marks = planner.watermarks([(t, p) for t, n in sorted(counts.items()) for p in range(n)])
        ranges = [(t, p, low, high) for (t, p), (low, high) in {**tx_marks, **marks}.items()]
        client = _check_registry(settings.registry.client_config(), settings.registry.url)
        t = settings.translate
        _check_contracts(client, [translator], t.subject_strategy, t.auto_register)
        output = spec.output
        dead_letters = output.dead_letter_topic(t.dead_letter_topic)
        topics = sorted({output.topic_for(c.contract_topic()) for c in translator.emits})
        partitions = ensure_topics(
            _admin(settings.kafka.librdkafka()), [*topics, dead_letters], t.output_partitions
        )
        config = TxReplayConfig(
            kafka=settings.kafka.librdkafka(),
            registry=settings.registry.client_config(),
            translator=spec.translator,
            transaction_topic=tx_topic,
            dead_letter_topic=dead_letters,
            subject_strategy=t.subject_strategy,
            auto_register=t.auto_register,
            partitions=partitions,
            output_kind=output.kind,
            output_target=output.target,
        )
        return config, ranges

    def run(self) -> TxReplaySummary:
        from bizevents.replay.job import spark_session

        started = perf_counter()
        config, ranges = self.prepare()
        if self.spark is None:
            self.spark = spark_session(self.master)
        sc = self.spark.sparkContext
        width = max(1, int(sc.defaultParallelism))
        stats = (
            sc.parallelize(ranges, max(1, len(ranges)))
            .flatMap(lambda r: _read_range(config, r))
            .groupByKey(width)
            .mapPartitions(lambda groups: _assemble(config, groups))
            .groupByKey(width)
            .mapPartitions(lambda outputs: _write(config, outputs))
            .collect()
        )
        summary = TxReplaySummary(self.spec.run_id, ranges=ranges)
        for item in stats:
            summary.read += item.get("read", 0)
            summary.transactions += item.get("transactions", 0)
            summary.emitted += item.get("emitted", 0)
            summary.dead_lettered += item.get("dead_lettered", 0)
            summary.left_out += item.get("left_out", 0)
        summary.read = sum(high - low for _, _, low, high in ranges)
        summary.seconds = perf_counter() - started
        return summary


def _admin(kafka: dict[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({**kafka, "log.connection.close": False})


# -- in the executors -----------------------------------------------------------------------

Raw = tuple[str, int, int, Any, Any, list[tuple[str, Any]]]  # topic, partition, offset, k, v, h


def _lookup(config: TxReplayConfig) -> Any:
    from bizevents.plumbing.registry import registry_client, schema_lookup

    client = registry_client(config.registry)
    return client, schema_lookup(client)


def _read_range(
    config: TxReplayConfig, rng: tuple[str, int, int, int]
) -> Iterator[tuple[str, Raw]]:
    """The records of one range, keyed by their transaction id."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from bizevents.contracts.envelope import ChangeEvent
    from bizevents.contracts.exceptions import Coordinates, DecodeError
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.contracts.technical.transaction import TransactionDecoder

    topic, partition, low, high = rng
    if high <= low:
        return
    _, lookup = _lookup(config)
    decoder = AutoDecoder(lookup)
    tx_decoder = TransactionDecoder(lookup)
    consumer = Consumer({**config.kafka, **READER_SETTINGS})
    try:
        consumer.assign([TopicPartition(topic, partition, low)])
        done = False
        while not done:
            for m in consumer.consume(1000, 1.0):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done = True
                        break
                    raise RuntimeError(f"cannot read {topic}[{partition}]: {err}")
                offset = int(m.offset() or 0)
                if offset >= high:
                    done = True
                    break
                value = m.value()
                found = m.headers()
                headers = list(found.items()) if isinstance(found, dict) else list(found or [])
                raw: Raw = (topic, partition, offset, m.key(), value, headers)
                where = Coordinates(topic, partition, offset)
                key = f"raw:{topic}:{partition}:{offset}"  # alone, unless a transaction claims it
                if value is not None:
                    try:
                        if topic == config.transaction_topic:
                            key = "tx:" + tx_decoder.decode(value, where).id
                        else:
                            decoded = decoder.decode(m.key(), value, where)
                            tx = decoded.transaction if isinstance(decoded, ChangeEvent) else None
                            if tx is not None:
                                key = "tx:" + tx.id
                    except DecodeError:
                        pass  # dead-lettered by the assembling task, with the reason
                elif topic != config.transaction_topic:
                    continue  # a tombstone
                yield key, raw
                if offset + 1 >= high:
                    done = True
                    break
    finally:
        consumer.close()


def _assemble(
    config: TxReplayConfig, groups: Iterable[tuple[str, Iterable[Raw]]]
) -> Iterator[tuple[Any, Any]]:
    """Each transaction's parts assembled and translated; events keyed by output partition."""
    from bizevents.contracts.envelope import ChangeEvent, Tombstone
    from bizevents.contracts.exceptions import Coordinates, DecodeError
    from bizevents.contracts.serde import BusinessSerializer
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.contracts.technical.transaction import TransactionDecoder
    from bizevents.plumbing.kafka import partition_for
    from bizevents.translators.assembly import Assembler, Part, commit_position
    from bizevents.translators.pipeline import OutRecord, SourceRecord
    from bizevents.translators.registry import discover
    from bizevents.translators.transaction_api import TransactionTranslator
    from bizevents.translators.txcore import TransactionCore

    client, lookup = _lookup(config)
    decoder = AutoDecoder(lookup)
    tx_decoder = TransactionDecoder(lookup)
    name = config.translator.partition("@")[0]
    translator = discover(names=[name]).resolve(config.translator)
    assert isinstance(translator, TransactionTranslator)
    core = TransactionCore(
        [translator],
        BusinessSerializer(client, config.subject_strategy, config.auto_register),
        replay=True,
        dead_letter_topic=config.dead_letter_topic,
    )
    stats = {"transactions": 0, "left_out": 0}
    for key, raws in groups:
        assembler = Assembler(core.reads)
        outcomes: list[Any] = []
        bad: list[OutRecord] = []
        for n, (topic, partition, offset, k, v, h) in enumerate(sorted(raws, key=_raw_order)):
            origin = SourceRecord(topic, partition, offset, k, v, h)
            where = Coordinates(topic, partition, offset)
            try:
                if topic == config.transaction_topic:
                    part = Part(n, origin, record=tx_decoder.decode(v, where))
                else:
                    decoded = decoder.decode(k, v, where, h)
                    if isinstance(decoded, Tombstone):
                        continue
                    assert isinstance(decoded, ChangeEvent)
                    part = Part(n, origin, change=decoded)
            except DecodeError as exc:
                bad += core.dead_letters([Part(n, origin)], "decode", exc.reason, exc, "")
                continue
            outcomes += assembler.feed(part)
        finished, left_out = assembler.finish()
        outcomes += finished
        stats["left_out"] += left_out
        stats["transactions"] += sum(1 for o in outcomes if o.tx_id is not None)
        tx_id = key[3:] if key.startswith("tx:") else None
        order = (commit_position(tx_id) if tx_id else None) or 0
        records = [*core.process(outcomes).records, *bad]
        for seq, out in enumerate(records):
            target = _output_topic(config, out)
            count = config.partitions.get(target, 1)
            yield (
                (target, partition_for(out.key, count)),
                (order, key, seq, out.key, out.value, out.headers, out.dead_letter),
            )
    yield ("__stats__", 0), (0, "", 0, None, None, stats, False)


def _output_topic(config: TxReplayConfig, out: Any) -> str:
    if out.dead_letter:
        return str(out.topic)
    if config.output_kind == "topic":
        return config.output_target
    if config.output_kind == "replay":
        from bizevents.replay.spec import REPLAY_SUFFIX

        return f"{out.topic}{REPLAY_SUFFIX}"
    return str(out.topic)


def _raw_order(raw: Raw) -> tuple[str, int, int]:
    return (raw[0], raw[1], raw[2])


def _write(
    config: TxReplayConfig, outputs: Iterable[tuple[Any, Iterable[Any]]]
) -> Iterator[dict[str, int]]:
    """Each output partition's events in commit order, produced and acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({**config.kafka, "acks": "all", "linger.ms": 20})
    failures: list[str] = []
    totals = {"emitted": 0, "dead_lettered": 0, "transactions": 0, "left_out": 0}

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for (topic, partition), items in outputs:
        if topic == "__stats__":
            for item in items:
                for k, v in item[5].items():
                    totals[k] += v
            continue
        for _order, _tx, _seq, key, value, headers, dead in sorted(items, key=lambda i: i[:3]):
            while True:
                try:
                    producer.produce(
                        topic,
                        value,
                        key,
                        partition=partition,
                        headers=headers,
                        on_delivery=delivered,
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
            totals["dead_lettered" if dead else "emitted"] += 1
        producer.poll(0)
    remaining = producer.flush(120)
    if failures or remaining:
        raise RuntimeError(f"Kafka did not take every event: {failures[:3] or remaining}")
    yield totals
