"""Replay through orders@3: whole transactions assembled in Spark give the same events,
with the same ids, as the live transaction worker, marked as replayed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bizevents_store.contracts import OrderPlaced, OrderStatus, OrderStatusChanged
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient

from bizevents.contracts.serde import BusinessDeserializer
from bizevents.devstack import Endpoints
from bizevents.replay.exceptions import ReplayConfigError
from bizevents.replay.spec import Bound, Output, ReplaySpec
from bizevents.replay.transactions import TransactionReplay
from tests.capture.capture_helpers import Db
from tests.integration.test_transaction_worker import (
    _expected_id,
    _ids,
    capturing,
    place,
    place_orders,
    store_db,
    truth,
)
from tests.replay.conftest import stack_settings

pytestmark = pytest.mark.integration


@pytest.fixture
def db(bizevents_stack: Endpoints) -> Iterator[Db]:
    with store_db(bizevents_stack) as made:
        yield made


def _messages(db: Db, topic: str) -> list[Any]:
    """Every message of ``topic``, each partition read to its end."""
    consumer = Consumer(
        {
            "bootstrap.servers": db.endpoints.bootstrap_servers,
            "group.id": "unused",
            "enable.partition.eof": True,
        }
    )
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        at_end: set[int] = set()
        out = []
        while len(at_end) < len(parts):
            for m in consumer.consume(500, 1.0):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF
                    at_end.add(m.partition() or 0)
                    continue
                out.append(m)
        return out
    finally:
        consumer.close()


def _read(db: Db, topic: str) -> list[Any]:
    registry = SchemaRegistryClient({"url": db.endpoints.registry_url})
    decode = BusinessDeserializer(registry, OrderPlaced, OrderStatusChanged)
    return [decode(m.value() or b"", topic) for m in _messages(db, topic)]


def test_replay_of_whole_transactions(db: Db, tmp_path: Path, spark: Any) -> None:
    """Orders placed in transactions, then replayed through orders@3 in Spark: one
    OrderPlaced per order with its items and total, the live path's id, replay set."""
    customer, products = _ids(db)
    with capturing(db, tmp_path) as run:
        orders = place_orders(db, customer, products, 10, 4)
        db.sql(f"UPDATE store.orders SET status = 'paid' WHERE id = {orders[0]}")
        run.wait_acked(db.wal_lsn())
    target = f"replay-tx-{uuid.uuid4().hex[:8]}"
    settings = stack_settings(
        db.endpoints, tmp_path / "state", translate={"topic_prefix": db.server}
    ).runtime()
    spec = ReplaySpec(
        topics=f"{db.server}.store.*",
        translator="orders@3",
        output=Output.parse(f"topic:{target}"),
    )
    summary = TransactionReplay(spec, settings, spark=spark).run()
    assert summary.dead_lettered == 0 and summary.left_out == 0
    read = _read(db, target)
    (paid,) = [e for e in read if isinstance(e, OrderStatusChanged)]
    assert (paid.order_id, paid.new_status) == (orders[0], OrderStatus.PAID)
    events = [e for e in read if isinstance(e, OrderPlaced)]
    assert sorted(e.order_id for e in events) == sorted(orders)
    expected = truth(db, orders)
    for e in events:
        total, items = expected[e.order_id]
        assert e.total == total
        assert [(i.line_no, i.product_id, i.quantity, i.unit_price) for i in e.items] == items
        assert e.lineage.replay is True
        assert e.lineage.event_id == _expected_id(db, e)


def test_compact_is_refused_in_a_sentence(tmp_path: Path) -> None:
    """What the transaction replay does not do: one sentence, before Kafka or Spark."""
    from bizevents.settings import Settings

    spec = ReplaySpec(
        topics="x.store.*", translator="orders@3", output=Output.parse("replay"), compact=True
    )
    with pytest.raises(ReplayConfigError, match="--compact is refused with a transaction"):
        TransactionReplay(spec, Settings(state_dir=tmp_path).runtime()).prepare()


# -- ranges, diff, files, resume: one captured store, read by every test -------------------


@pytest.fixture(scope="module")
def placed(bizevents_stack: Endpoints, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Twelve orders of one to four items, each in its own transaction, and one status
    change, captured: ``(db, orders)``."""
    with store_db(bizevents_stack) as made:
        customer, products = _ids(made)
        with capturing(made, tmp_path_factory.mktemp("capture")) as run:
            orders = []
            with made.conn.cursor() as cur:
                for n in range(12):
                    cur.execute("BEGIN")
                    lines = [(products[(n + i) % 3], i + 1) for i in range(n % 4 + 1)]
                    orders.append(place(cur, customer, lines))
                    cur.execute("COMMIT")
                cur.execute(f"UPDATE store.orders SET status = 'paid' WHERE id = {orders[0]}")
            run.wait_acked(made.wal_lsn())
        yield made, orders


def _settings(db: Db, state: Path) -> Any:
    return stack_settings(db.endpoints, state, translate={"topic_prefix": db.server}).runtime()


def _changes(db: Db, topic: str) -> list[tuple[int, int, Any]]:
    """``(partition, offset, change)`` of every record of a technical topic."""
    from bizevents.contracts.envelope import ChangeEvent
    from bizevents.contracts.exceptions import Coordinates
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.plumbing.registry import schema_lookup

    decoder = AutoDecoder(schema_lookup(SchemaRegistryClient({"url": db.endpoints.registry_url})))
    out = []
    for m in _messages(db, topic):
        if m.value() is None:
            continue
        where = Coordinates(topic, m.partition() or 0, m.offset() or 0)
        change = decoder.decode(m.key(), m.value(), where)
        if isinstance(change, ChangeEvent):
            out.append((m.partition() or 0, m.offset() or 0, change))
    return out


def _check_whole(db: Db, events: list[Any]) -> set[int]:
    """Every OrderPlaced has its true items and total; the orders they name."""
    placed_events = [e for e in events if isinstance(e, OrderPlaced)]
    expected = truth(db, [e.order_id for e in placed_events])
    for e in placed_events:
        total, items = expected[e.order_id]
        assert e.total == total
        assert [(i.line_no, i.product_id, i.quantity, i.unit_price) for i in e.items] == items
    ids = [e.order_id for e in placed_events]
    assert len(ids) == len(set(ids)), "an order placed twice"
    return set(ids)


def cutting(
    db: Any, items: list[tuple[int, int, Any]], orders: list[int], which: int
) -> tuple[int, int, str, ReplaySpec]:
    """A replay of orders@3 to a new topic, ``--from``/``--until`` one offset wide at the
    third item of the ``which``-th order of four items (it cuts that transaction in the
    middle): ``(that order, the offset, the topic, the spec)``."""
    items = [c for c in items if c[2].after is not None]
    four = [o for o in orders if len([c for c in items if c[2].after["order_id"] == o]) == 4]
    cut = four[which]
    _, offset, _ = sorted(
        (c for c in items if c[2].after["order_id"] == cut), key=lambda c: c[2].after["line_no"]
    )[2]
    target = f"replay-tx-{uuid.uuid4().hex[:8]}"
    spec = ReplaySpec(
        topics=f"{db.server}.store.*",
        translator="orders@3",
        output=Output.parse(f"topic:{target}"),
        start=Bound(offset=offset),
        until=Bound(offset=offset + 1),
    )
    return cut, offset, target, spec


def test_a_range_that_cuts_a_transaction_replays_it_whole(
    placed: Any, tmp_path: Path, spark: Any
) -> None:
    """--from/--until around one item in the middle of a four-item order: that order's
    OrderPlaced has all four items and its true total; only the transactions with a
    record in the bounds are replayed, every one of them whole."""
    db, orders = placed
    items = _changes(db, f"{db.server}.store.order_items")
    cut, offset, target, spec = cutting(db, items, orders, -1)
    summary = TransactionReplay(spec, _settings(db, tmp_path / "state"), spark=spark).run()
    assert summary.dead_lettered == 0 and summary.left_out == 0
    replayed = _check_whole(db, _read(db, target))
    assert cut in replayed
    # every partition's record at the offset selects its transaction, and nothing else
    selected: set[int] = set()
    for table in ("orders", "order_items"):
        for _, o, change in _changes(db, f"{db.server}.store.{table}"):
            if o == offset and change.transaction is not None:
                row = change.after or change.before
                selected.add(row["id"] if table == "orders" else row["order_id"])
    assert replayed <= selected | _ended_at(db, offset)
    assert selected <= replayed | {orders[0]}  # the paid update emits no OrderPlaced
    assert len(replayed) < len(orders)


@pytest.mark.timeout(120)  # the bug this guards against was a read that never returned
def test_a_read_past_a_partition_end_returns_nothing(placed: Any) -> None:
    """A range past the end of the transaction topic (an offset bound taken from a longer
    topic) reads nothing and returns: a Fetch past the end answers no records and no
    end-of-partition event, so this read used to wait forever."""
    from bizevents.replay.txtasks import _messages
    from bizevents.replay.txwiden import TxReplayConfig

    db, _ = placed
    topic = f"{db.server}.transaction"
    config = TxReplayConfig(
        kafka={"bootstrap.servers": db.endpoints.bootstrap_servers},
        registry={},
        translator="orders@3",
        transaction_topic=topic,
        dead_letter_topic="unused",
        subject_strategy="topic",
        auto_register=False,
        partitions={},
        output_kind="replay",
        output_target="unused",
    )
    every = [int(m.offset() or 0) for m in _messages(config, topic, 0, 0, 1 << 30)]
    assert every == list(range(len(every))) and every
    end = len(every)
    assert [m.offset() for m in _messages(config, topic, 0, end + 1000, end + 2000)] == []
    assert [m.offset() for m in _messages(config, topic, 0, end - 2, end + 5)] == [
        end - 2,
        end - 1,
    ]


def _ended_at(db: Db, offset: int) -> set[int]:
    """The orders of the transaction whose BEGIN or END is at ``offset`` of the
    transaction topic (by its id, matched against the changes' blocks); none when the
    topic ends before it (earlier tests' rows can make order_items the longer topic)."""
    from bizevents.contracts.exceptions import Coordinates
    from bizevents.contracts.technical.transaction import TransactionDecoder
    from bizevents.plumbing.registry import schema_lookup

    topic = f"{db.server}.transaction"
    decoder = TransactionDecoder(
        schema_lookup(SchemaRegistryClient({"url": db.endpoints.registry_url}))
    )
    consumer = Consumer(
        {
            "bootstrap.servers": db.endpoints.bootstrap_servers,
            "group.id": "x",
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        # at the end: an end-of-partition event; past it: nothing at all (docs/broker.md)
        found = consumer.consume(1, 5.0)
        if not found or found[0].error() is not None:
            return set()
        tx_id = decoder.decode(found[0].value() or b"", Coordinates(topic, 0, offset)).id
    finally:
        consumer.close()
    return {
        (c.after or c.before)["id"]
        for _, _, c in _changes(db, f"{db.server}.store.orders")
        if c.transaction is not None and c.transaction.id == tx_id
    }


def test_diff_row_version_against_transaction_version(
    placed: Any, tmp_path: Path, spark: Any
) -> None:
    """--diff orders@1 (row) with orders@3 (transaction): nothing published; every
    OrderPlaced pairs up by event id and differs (orders@1 places the order before its
    items, with total 0); the HTML report is written by the CLI."""
    from click.testing import CliRunner

    from bizevents.cli import main

    db, orders = placed
    spec = ReplaySpec(
        topics=f"{db.server}.store.*", translator="orders@3", output=None, diff_against="orders@1"
    )
    summary = TransactionReplay(spec, _settings(db, tmp_path / "state"), spark=spark).run()
    assert summary.diff is not None
    counts = summary.diff.counts[OrderPlaced.contract_fullname()]
    assert counts["changed"] == len(orders)
    assert counts["only_a"] == counts["only_b"] == 0
    sample = summary.diff.samples[OrderPlaced.contract_fullname()]["changed"][0]
    assert sample["a"]["items"] == [] and sample["b"]["items"]
    page = tmp_path / "diff.html"
    result = CliRunner().invoke(
        main,
        [
            "replay",
            "--topics",
            f"{db.server}.store.*",
            "--translator",
            "orders@3",
            "--diff",
            "orders@1",
            "--diff-html",
            str(page),
            "--json",
        ],
        env={
            "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": db.endpoints.bootstrap_servers,
            "BIZEVENTS_REGISTRY__URL": db.endpoints.registry_url,
            "BIZEVENTS_STATE_DIR": str(tmp_path / "cli-state"),
            "BIZEVENTS_TRANSLATE__TOPIC_PREFIX": db.server,
            "BIZEVENTS_LOG_LEVEL": "WARNING",
        },
    )
    assert result.exit_code == 0, result.output
    assert OrderPlaced.contract_fullname() in page.read_text()
    assert "orders@1" in page.read_text()


def test_files_of_whole_transactions(placed: Any, tmp_path: Path, spark: Any) -> None:
    """--to path:DIR: Avro container files of the row path's record schema, one
    OrderPlaced per order, whole."""
    import fastavro

    from bizevents.contracts.serde import BusinessDeserializer

    db, orders = placed
    spec = ReplaySpec(
        topics=f"{db.server}.store.*",
        translator="orders@3",
        output=Output.parse(f"path:{tmp_path / 'out'}"),
    )
    summary = TransactionReplay(spec, _settings(db, tmp_path / "state"), spark=spark).run()
    files = sorted((tmp_path / "out").rglob("*.avro"))
    assert files and not list((tmp_path / "out").rglob("*.partial"))
    decode = BusinessDeserializer(
        SchemaRegistryClient({"url": db.endpoints.registry_url}), OrderPlaced, OrderStatusChanged
    )
    events = []
    for path in files:
        with path.open("rb") as handle:
            rec: Any
            for rec in fastavro.reader(handle):
                assert rec["event_id"]
                events.append(decode(rec["value"], rec["topic"]))
    assert _check_whole(db, events) == set(orders)
    assert len(events) == summary.emitted


def test_parquet_of_whole_transactions(placed: Any, tmp_path: Path, spark: Any) -> None:
    """--to path:DIR --format parquet: one dataset for the run, the row path's columns;
    one OrderPlaced per order with its items and total."""
    import json

    db, orders = placed
    out = tmp_path / "parquet"
    spec = ReplaySpec(
        topics=f"{db.server}.store.*",
        translator="orders@3",
        output=Output.parse(f"path:{out}", "parquet"),
        run_id="tx-parquet",
    )
    summary = TransactionReplay(spec, _settings(db, tmp_path / "state"), spark=spark).run()
    assert [p.name for p in out.iterdir()] == ["range=transactions-tx-parquet"]
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == summary.emitted == sum(summary.events.values())
    placed_rows = [r for r in rows if r.contract == OrderPlaced.contract_fullname()]
    assert len({r.event_id for r in placed_rows}) == len(placed_rows)
    expected = truth(db, orders)
    assert sorted(json.loads(r.event)["order_id"] for r in placed_rows) == sorted(orders)
    for row in placed_rows:
        event = json.loads(row.event)
        total, items = expected[event["order_id"]]
        assert event["total"] == str(total)
        assert [i["line_no"] for i in event["items"]] == [i[0] for i in items]


def test_resume_writes_only_what_an_earlier_attempt_did_not(
    placed: Any, tmp_path: Path, spark: Any
) -> None:
    """A rerun with the run id reads the same plan and writes only the output partitions
    the run state does not count as written; other arguments are refused."""
    import json

    from bizevents.replay.exceptions import RunStateError

    db, _ = placed
    target = f"replay-tx-{uuid.uuid4().hex[:8]}"
    settings = _settings(db, tmp_path / "state")
    spec = ReplaySpec(
        topics=f"{db.server}.store.*",
        translator="orders@3",
        output=Output.parse(f"topic:{target}"),
        run_id="tx-resume",
    )
    first = TransactionReplay(spec, settings, spark=spark).run()
    # every output partition is recorded, the ones that got no event too
    dead_letters = settings.translate.dead_letter_topic + ".replay"
    admin = Consumer({"bootstrap.servers": db.endpoints.bootstrap_servers, "group.id": "x"})
    try:
        topics = admin.list_topics(timeout=10).topics
        partitions = len(topics[target].partitions) + len(topics[dead_letters].partitions)
    finally:
        admin.close()
    assert (first.units, first.skipped) == (partitions, 0)
    assert len(_read(db, target)) == first.emitted
    # as if the driver died before it learnt of one output partition
    state_file = first.state_path
    assert state_file is not None
    data = json.loads(state_file.read_text())
    lost, report = next((k, v) for k, v in sorted(data["done"].items()) if v["events"])
    del data["done"][lost]
    data["finished"] = None
    state_file.write_text(json.dumps(data))
    again = TransactionReplay(spec, settings, spark=spark).run()
    assert (again.units, again.skipped) == (1, first.units - 1)
    assert again.events == report["events"]
    assert len(_read(db, target)) == first.emitted + sum(report["events"].values())
    done = TransactionReplay(spec, settings, spark=spark).run()  # nothing left to write
    assert (done.units, done.skipped, done.emitted) == (0, partitions, 0)
    assert len(_read(db, target)) == first.emitted + sum(report["events"].values())
    other = ReplaySpec(
        topics=f"{db.server}.store.*",
        translator="orders@3",
        output=Output.parse("replay"),
        run_id="tx-resume",
    )
    with pytest.raises(RunStateError, match="started with other arguments"):
        TransactionReplay(other, settings, spark=spark).prepare()
