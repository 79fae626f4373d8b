"""Routing by business key (capture/core/routing.py) from the real PostgreSQL and MariaDB
into the real broker: every record of a routed table, whatever wrote it, lands on the
partition of its order; END counts each table's changes per partition; the routing is
declared on ``<prefix>.routing`` and a changed one refuses to start."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from bizevents_store.contracts import OrderPlaced
from confluent_kafka import Producer

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.quarantine import ask_capture, parked_keys
from bizevents.capture.core.signals import SignalTopic, new_signal
from bizevents.capture.exceptions import CaptureError
from bizevents.contracts.envelope import ChangeEvent, Tombstone
from bizevents.contracts.technical.routing import (
    TableRouting,
    decode_routing,
    partition_for,
    routing_key,
)
from bizevents.transactions import transaction_translator
from bizevents.translators.assembly import Part
from bizevents.translators.records import SourceRecord
from bizevents.translators.routing import business_key
from tests.capture.capture_helpers import (
    Db,
    Record,
    read_topic,
    wait_for,
)
from tests.capture.core.test_transactions import read_transactions
from tests.capture.mysql_helpers import MyDb
from tests.capture.sources import MySource, PgSource, Source
from tests.kafka import read_all

pytestmark = pytest.mark.integration

_PARTITIONS = 4


def _order_of(table: str, row: Any) -> int:
    return int(row["id"] if table == "orders" else row["order_id"])


def _expected(order: int) -> int:
    return partition_for(routing_key([order]), _PARTITIONS)


def _two_orders_apart() -> tuple[int, int]:
    """Two new order ids on different partitions (so the transaction crosses them)."""
    first = 100
    second = next(o for o in range(101, 200) if _expected(o) != _expected(first))
    return first, second


def _routed_config(source: Source, **extra: Any) -> CaptureConfig:
    return source.config(
        ["orders", "order_items"],
        partitions=_PARTITIONS,
        routing={
            source.table("orders"): ("id",),
            source.table("order_items"): ("order_id",),
        },
        **extra,
    )


def _tables(source: Source) -> None:
    source.sql(f"CREATE TABLE {source.table('orders')} (id INT PRIMARY KEY, total INT)")
    source.sql(
        f"CREATE TABLE {source.table('order_items')} "
        "(order_id INT, id INT, price INT, PRIMARY KEY (order_id, id))"
    )


def test_every_record_lands_on_its_orders_partition_and_end_counts_them(
    source: Source, tmp_path: Path
) -> None:
    """Snapshot, stream (a transaction over two orders on different partitions, an
    update, deletes and their tombstones) and incremental snapshot: each record of an
    order and of its items is on ``partition_for(routing_key([order_id]), n)``; END's
    ``partition_counts`` are what each partition holds of its transaction."""
    _tables(source)
    orders, items = source.table("orders"), source.table("order_items")
    for o in range(1, 9):
        source.sql(f"INSERT INTO {orders} VALUES (%s, 0)", (o,))
        source.sql(f"INSERT INTO {items} VALUES (%s, 1, 5), (%s, 2, 7)", (o, o))
    first, second = _two_orders_apart()
    config = _routed_config(source)
    with source.in_process(config, tmp_path) as run:
        run.wait_snapshot()
        conn = source.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"INSERT INTO {orders} VALUES (%s, 0), (%s, 0)", (first, second))
                cur.execute(
                    f"INSERT INTO {items} VALUES (%s, 1, 3), (%s, 2, 4), (%s, 1, 9)",
                    (first, first, second),
                )
                cur.execute(f"UPDATE {orders} SET total = 7 WHERE id = %s", (first,))
                cur.execute(f"DELETE FROM {items} WHERE order_id = %s AND id = 1", (second,))
                cur.execute(f"DELETE FROM {items} WHERE order_id = 3")
                cur.execute(f"DELETE FROM {orders} WHERE id = 3")
            conn.commit()
        finally:
            conn.close()
        kafka = {"bootstrap.servers": source.db.endpoints.bootstrap_servers}
        producer = Producer(kafka)
        SignalTopic(kafka, config.signal_topic_name, source.db.server).send(
            producer, new_signal("execute-snapshot", (items,))
        )
        producer.flush(10)

        def snapshotted() -> bool:
            ledger = source.stored_ledger()
            done = run.stats.incremental_rows.get(items, 0) >= 16
            return done and ledger is not None and not ledger.queue

        wait_for(snapshotted, run, "the incremental snapshot of order_items")
        source.caught_up(run)
        run.stop()

    records: dict[str, list[Record]] = {
        t: read_topic(source.db.endpoints, source.topic(t)) for t in ("orders", "order_items")
    }
    seen: Counter[str] = Counter()
    for table, found in records.items():
        for r in found:
            d = r.decoded
            row = d.key
            assert row is not None
            assert r.partition == _expected(_order_of(table, row)), (table, dict(row), r)
            kind = "tombstone" if isinstance(d, Tombstone) else d.op
            seen[f"{table}:{kind}"] += 1
    # every write path was taken: the initial snapshot's and the incremental one's
    # reads of the items (8 orders x 2 items each, then 16 again: 2 gone, 3 new, 1 gone),
    # the stream's changes and tombstones
    assert seen["order_items:r"] == 16 + 16, seen
    assert seen["orders:r"] == 8
    assert seen["orders:c"] == 2 and seen["orders:u"] == 1 and seen["orders:d"] == 1
    assert seen["order_items:c"] == 3 and seen["order_items:d"] == 3
    assert seen["order_items:tombstone"] == 3 and seen["orders:tombstone"] == 1
    assert _expected(first) != _expected(second)

    placed: dict[str, Counter[tuple[str, int]]] = {}
    for found in records.values():
        for r in found:
            d = r.decoded
            if isinstance(d, ChangeEvent) and d.transaction is not None:
                at = (d.source.qualified_table, r.partition)
                placed.setdefault(d.transaction.id, Counter())[at] += 1
    ends = [
        t
        for t in read_transactions(source.db.endpoints, f"{source.db.server}.transaction")
        if t.status == "END"
    ]
    assert {e.id for e in ends} == set(placed)
    (end,) = ends
    assert end.partition_counts is not None
    assert Counter({(t, p): n for t, p, n in end.partition_counts}) == placed[end.id]
    assert {p for _, p, _ in end.partition_counts} == {
        _expected(first),
        _expected(second),
        _expected(3),
    }
    per_table: Counter[str] = Counter()
    for t, _, n in end.partition_counts:
        per_table[t] += n
    assert dict(per_table) == end.counts()

    declared = [
        decode_routing(m.key, m.value)
        for m in read_all(source.db.endpoints.bootstrap_servers, f"{source.db.server}.routing")
    ]
    assert sorted(declared, key=lambda r: r.table if r else "") == [
        TableRouting(items, ("order_id",), _PARTITIONS),
        TableRouting(orders, ("id",), _PARTITIONS),
    ]


def _refused(source: Source, config: CaptureConfig, tmp_path: Path) -> str:
    with source.in_process(config, tmp_path) as run, pytest.raises(CaptureError) as caught:
        run.wait_snapshot()
    return str(caught.value)


def test_a_column_outside_the_primary_key_is_refused(source: Source, tmp_path: Path) -> None:
    """Routing order items by a column that is not in their primary key: one sentence,
    nothing captured."""
    source.sql(f"CREATE TABLE {source.table('orders')} (id INT PRIMARY KEY, total INT)")
    source.sql(
        f"CREATE TABLE {source.table('order_items')} (id INT PRIMARY KEY, order_id INT, price INT)"
    )
    reason = _refused(source, _routed_config(source), tmp_path)
    assert reason.startswith(
        f"routing of {source.table('order_items')} names order_id, not in its primary key (id)"
    ), reason


def test_a_changed_routing_refuses_to_start(source: Source, tmp_path: Path) -> None:
    """A capture that ran routed, started again routed otherwise (by other columns) or
    without routing: one sentence naming the migration, nothing reshuffled."""
    _tables(source)
    orders, items = source.table("orders"), source.table("order_items")
    source.sql(f"INSERT INTO {items} VALUES (1, 1, 5)")
    with source.in_process(_routed_config(source), tmp_path) as run:
        run.wait_snapshot()
        run.stop()
    by_both = _routed_config(source).model_copy(
        update={"routing": {orders: ("id",), items: ("order_id", "id")}}
    )
    reason = _refused(source, by_both, tmp_path)
    assert reason == (
        f"capture {source.db.server} would route {items} by order_id, id over 4 partitions, "
        f"but its topic {source.topic('order_items')} was written routed by order_id over 4 "
        f"partitions (declared on {source.db.server}.routing): a changed routing is a "
        "migration to a new topic generation (a new topic_prefix, captured anew), not a "
        "reshuffle in place"
    )
    unrouted = _routed_config(source).model_copy(update={"routing": {}})
    reason = _refused(source, unrouted, tmp_path)
    assert f"would route {items} by its Kafka key, but" in reason, reason


def test_routing_a_table_captured_unrouted_refuses_to_start(source: Source, tmp_path: Path) -> None:
    """A table whose topic was written by Kafka key, then routed: refused, not mixed."""
    _tables(source)
    source.sql(f"INSERT INTO {source.table('order_items')} VALUES (1, 1, 5)")
    plain = _routed_config(source).model_copy(update={"routing": {}})
    with source.in_process(plain, tmp_path) as run:
        run.wait_snapshot()
        run.stop()
    reason = _refused(source, _routed_config(source), tmp_path)
    assert "was written routed by its Kafka key" in reason, reason


def _redrive_parked(source: Source, config: CaptureConfig, run: Any, orders: range) -> None:
    """Once ``run`` parked one key per order, the source's fix switched on, re-drives
    every parked key through capture's parked topic and stops ``run`` once it passed
    the re-driven changes."""
    source.caught_up(run)
    kafka = {"bootstrap.servers": source.db.endpoints.bootstrap_servers}
    with source.converter_fixed():
        keys, _ = parked_keys(kafka, config.parked_topic_name)
        assert len(keys.parked) == len(orders)
        for ref in keys.parked:
            (answer,) = ask_capture(kafka, config.parked_topic_name, "redrive", ref[3].hex(), 60)
            assert answer.status == "done", answer.message
        source.caught_up(run)
        run.stop()


def _assert_redriven_on_their_orders(source: Source, orders: range) -> None:
    """Every record of order_items is on its order's partition, and the re-driven
    updates are there, one per order, on more than one partition."""
    redriven: list[int] = []
    for r in read_topic(source.db.endpoints, source.topic("order_items")):
        assert r.decoded.key is not None
        order = int(r.decoded.key["order_id"])
        assert r.partition == _expected(order), r
        if isinstance(r.decoded, ChangeEvent) and r.decoded.op == "u":
            redriven.append(order)
    assert sorted(redriven) == list(orders)
    assert len({_expected(o) for o in redriven}) > 1


def test_a_redriven_change_lands_on_its_orders_partition(pg: Db, tmp_path: Path) -> None:
    """PostgreSQL, ``on_conversion_error = "park"``: an item's change that did not
    convert parks its key; once fixed and re-driven, its changes go to the partition of
    their order, as every other record of the table."""
    source = PgSource(pg)
    s = pg.schema
    pg.sql(f"CREATE TABLE {s}.orders (id INT PRIMARY KEY, total INT)")
    pg.sql(
        f"CREATE TABLE {s}.order_items "
        "(order_id INT, id INT, price NUMERIC(10, 2), PRIMARY KEY (order_id, id))"
    )
    orders = range(1, 9)
    pg.sql(f"INSERT INTO {s}.order_items SELECT o, 1, 1.00 FROM generate_series(1, 8) o")
    config = _routed_config(source, on_conversion_error="park")
    with source.in_process(config, tmp_path) as run:
        run.wait_snapshot()
        for o in orders:  # does not convert: each order's item parks its key
            pg.sql(f"UPDATE {s}.order_items SET price = 'NaN' WHERE order_id = %s", (o,))
        _redrive_parked(source, config, run, orders)
    _assert_redriven_on_their_orders(source, orders)


@pytest.mark.mysql
def test_a_redriven_change_lands_on_its_orders_partition_mariadb(my: MyDb, tmp_path: Path) -> None:
    """MariaDB, ``on_conversion_error = "park"``: an item's change that did not convert
    (an ENUM's empty error value) parks its key; once fixed and re-driven, its changes go
    to the partition of their order, as every other record of the table."""
    source = MySource(my)
    my.sql("CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
    my.sql(
        "CREATE TABLE order_items "
        "(order_id INT, id INT, e ENUM('a','b'), PRIMARY KEY (order_id, id))"
    )
    orders = range(1, 9)
    my.sql("INSERT INTO order_items VALUES " + ", ".join(f"({o}, 1, 'a')" for o in orders))
    config = _routed_config(source, on_conversion_error="park")
    with source.in_process(config, tmp_path) as run:
        run.wait_snapshot()
        my.sql("SET SESSION sql_mode = ''")  # a label it does not know becomes ''
        for o in orders:  # does not convert: each order's item parks its key
            my.sql(f"UPDATE order_items SET e = 'zzz' WHERE order_id = {o}")
        _redrive_parked(source, config, run, orders)
    _assert_redriven_on_their_orders(source, orders)


#: Each type a table may be routed by, with values at its edges: PostgreSQL's.
_PG_KEYS: dict[str, tuple[str, list[str]]] = {
    "int2": ("SMALLINT", ["-32768", "32767", "0"]),
    "int4": ("INTEGER", ["-2147483648", "2147483647"]),
    "int8": ("BIGINT", ["-9223372036854775808", "9223372036854775807"]),
    "txt": ("TEXT", ["'grüße ✓ 😀'", "''", "'\"quoted\" \\ back'"]),
    "vc": ("VARCHAR(20)", ["'ü'", "'𝄞x'"]),
    "ch": ("CHAR(4)", ["'ab'", "'✓'"]),
    "num": (
        "NUMERIC",
        ["3.14159265358979323846264338327950288419716939937510", "-1E+5", "0.000001"],
    ),
    "nps": ("NUMERIC(12, 3)", ["-0.5", "123456789.125"]),
    "day": ("DATE", ["'0001-01-01'", "'9999-12-31'", "'2024-02-29'"]),
    "tm": ("TIME", ["'00:00:00'", "'23:59:59.999999'"]),
    "ts": ("TIMESTAMP", ["'0001-01-01 00:00:00'", "'2024-05-01 12:34:56.789012'"]),
    "tstz": ("TIMESTAMPTZ", ["'2024-05-01 10:34:56.123456+00'", "'1889-12-31 23:40:28+02'"]),
    "uid": (
        "UUID",
        ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'"],
    ),
    "byt": ("BYTEA", ["'\\x00ff'", "'\\x'"]),
}
#: MariaDB's.
_MY_KEYS: dict[str, tuple[str, list[str]]] = {
    "i1": ("TINYINT", ["-128", "127"]),
    "u1": ("TINYINT UNSIGNED", ["0", "255"]),
    "i2": ("SMALLINT", ["-32768", "32767"]),
    "i3": ("MEDIUMINT", ["-8388608", "8388607"]),
    "i4": ("INT", ["-2147483648", "2147483647"]),
    "u4": ("INT UNSIGNED", ["0", "4294967295"]),
    "i8": ("BIGINT", ["-9223372036854775808", "9223372036854775807"]),
    "u8": ("BIGINT UNSIGNED", ["0", "18446744073709551615"]),
    "vc": ("VARCHAR(20) CHARACTER SET utf8mb4", ["'grüße ✓ 😀'", "''"]),
    "ch": ("CHAR(4) CHARACTER SET utf8mb4", ["'ab'", "'✓'"]),
    "dec": ("DECIMAL(12, 3)", ["-0.5", "123456789.125"]),
    "dec0": ("DECIMAL(30, 0)", ["-999999999999999999999999999999", "0"]),
    "day": ("DATE", ["'1000-01-01'", "'9999-12-31'"]),
    "tm": ("TIME(6)", ["'-838:59:59'", "'838:59:59'", "'-00:00:01.25'"]),
    "dt": ("DATETIME", ["'1000-01-01 00:00:00'", "'9999-12-31 23:59:59'"]),
    "dt6": ("DATETIME(6)", ["'2024-05-01 12:34:56.789012'"]),
    "tsp": ("TIMESTAMP(6)", ["'1970-01-02 00:00:00.000001'", "'2038-01-19 03:14:07.999999'"]),
    "yr": ("YEAR", ["1901", "2155"]),
    "vb": ("VARBINARY(12)", ["x'00ff'", "x''"]),
    "bn": ("BINARY(4)", ["x'0100'", "x'ffffffff'"]),
}


def test_capture_routes_every_key_type_where_the_worker_keys_it(
    source: Source, tmp_path: Path
) -> None:
    """A table routed by a column of each type a primary key may hold (values at its
    edges; read by the initial snapshot, then updated, inserted and deleted in the
    stream): every record is on the partition of the business key the transaction
    worker computes from the record, and every record of one row has the same key."""
    types = _PG_KEYS if isinstance(source, PgSource) else _MY_KEYS
    values: dict[str, tuple[str, ...]] = {}
    for name, (sql_type, literals) in types.items():
        table = source.table(f"k_{name}")
        source.sql(f"CREATE TABLE {table} (n INT, k {sql_type}, x INT, PRIMARY KEY (n, k))")
        values[name] = tuple(literals)
        rows = ", ".join(f"({n}, {v}, 0)" for n, v in enumerate(literals[:-1] or literals))
        source.sql(f"INSERT INTO {table} VALUES {rows}")
    config = source.config(
        [f"k_{name}" for name in types],
        partitions=_PARTITIONS,
        routing={source.table(f"k_{name}"): ("k",) for name in types},
    )
    with source.in_process(config, tmp_path) as run:
        run.wait_snapshot()
        for name, literals in values.items():
            table = source.table(f"k_{name}")
            source.sql(f"UPDATE {table} SET x = 1")
            source.sql(f"INSERT INTO {table} VALUES (100, {literals[-1]}, 0)")
            source.sql(f"DELETE FROM {table} WHERE n = 0")
        source.caught_up(run)
        run.stop()
    for name in types:
        table = source.table(f"k_{name}")
        worker = transaction_translator(
            name="keys", version=1, sources=[table], emits=[OrderPlaced], keys={table: "k"}
        )(lambda tx: None)
        keys: dict[int, set[bytes]] = {}
        found = read_topic(source.db.endpoints, source.topic(f"k_{name}"))
        for r in found:
            d = r.decoded
            assert d.key is not None
            if isinstance(d, Tombstone):
                continue  # its delete, just before, is checked
            part = Part(r.offset, SourceRecord(source.topic(f"k_{name}"), 0, 0, None, None), d)
            key = business_key(worker, part)
            assert r.partition == partition_for(key, _PARTITIONS), (name, key, r)
            keys.setdefault(int(d.key["n"]), set()).add(key)
        assert all(len(k) == 1 for k in keys.values()), (name, keys)
        tombstones = [r for r in found if isinstance(r.decoded, Tombstone)]
        deletes = [r for r in found if isinstance(r.decoded, ChangeEvent) and r.decoded.op == "d"]
        assert [r.partition for r in tombstones] == [r.partition for r in deletes], name
        assert len(keys) == max(2, len(values[name])), (name, keys)
