"""Transaction translation: the store's orders placed in whole transactions, through
the assembler and orders@3, beside the row path (orders@2) on the same changes.

No Kafka: both figures are the translation core alone (decode, assemble or route,
translate, stamp, serialize) in this process, with an embedded schema registry. Each
transaction is what the store's load writes: the order inserted with total 0, three
items, the total set (5 changes, one END record; one OrderPlaced out).

    .venv/bin/python bench/translate_tx.py [--transactions 4000] [--runs 3]

``bench/translate.py`` prints the same figures beside its row-path ones.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

T0 = datetime(2026, 11, 24, 8, 0, tzinfo=UTC)


def _items_encoder(server: str, registry: Any) -> Any:
    import json

    from confluent_kafka.schema_registry import Schema

    from bizevents.contracts.logical import ColumnType, Field, Kind
    from bizevents.contracts.technical import AvroEncoder, TableSchema

    key = (
        Field("order_id", ColumnType(Kind.INT64), optional=False),
        Field("line_no", ColumnType(Kind.INT32), optional=False),
    )
    value = (
        *key,
        Field("product_id", ColumnType(Kind.INT64), optional=False),
        Field("quantity", ColumnType(Kind.INT32), optional=False),
        Field("unit_price", ColumnType(Kind.DECIMAL, scale=2, precision=12), optional=False),
    )
    table = TableSchema(server, "store", "order_items", key, value)
    schemas = AvroEncoder(table, 0, 0).schemas
    assert schemas.key is not None
    topic = table.namespace
    key_id = registry.register_schema(f"{topic}-key", Schema(json.dumps(schemas.key), "AVRO"))
    value_id = registry.register_schema(f"{topic}-value", Schema(json.dumps(schemas.value), "AVRO"))
    return AvroEncoder(table, key_id, value_id)


def workload(server: str, registry: Any, transactions: int) -> tuple[list[Any], list[Any]]:
    """(technical records of orders and items with transaction blocks, END records)."""
    from bizevents.contracts.envelope import ChangeEvent, PgPosition, Source, Transaction
    from bizevents.contracts.technical.transaction import TransactionRecord
    from bizevents.translators.pipeline import SourceRecord
    from tests.store_technical import order_change, registered_orders_encoder

    orders = registered_orders_encoder(server, registry)
    items = _items_encoder(server, registry)
    records: list[SourceRecord] = []
    ends: list[TransactionRecord] = []
    lsn = 1_000_000
    for n in range(1, transactions + 1):
        xid, commit = 500 + n, lsn + 100
        tx_id = f"{xid}:{commit}"
        order = {
            "id": n,
            "customer_id": 7,
            "status": "pending",
            "total": Decimal("0.00"),
            "currency": "EUR",
            "placed_at": T0,
            "shipped_at": None,
            "tracking_number": None,
            "updated_at": T0,
        }
        created = order_change(server, "c", None, order, lsn=lsn, tx_id=xid)
        changes: list[tuple[Any, ChangeEvent]] = [(orders, created)]
        for line in (1, 2, 3):
            row = {
                "order_id": n,
                "line_no": line,
                "product_id": line,
                "quantity": line,
                "unit_price": Decimal("2.50"),
            }
            source = Source(
                "postgresql", server, "store", "store", "order_items", 0,
                position=PgPosition(lsn + line * 8, xid),
            )  # fmt: skip
            key = {"order_id": n, "line_no": line}
            changes.append((items, ChangeEvent("c", source, None, row, key, 0)))
        total = {**order, "total": Decimal("15.00")}
        changes.append((orders, order_change(server, "u", order, total, lsn=lsn + 40, tx_id=xid)))
        per_table: dict[str, int] = {}
        for order_no, (encoder, change) in enumerate(changes, start=1):
            table = change.source.qualified_table
            per_table[table] = per_table.get(table, 0) + 1
            block = Transaction(tx_id, order_no, per_table[table])
            encoded = encoder.encode(replace(change, transaction=block))
            records.append(
                SourceRecord(f"{server}.{table}", n % 3, len(records), encoded[0], encoded[1])
            )
        ends.append(TransactionRecord("END", tx_id, 0, 5, tuple(per_table.items())))
        lsn += 200
    return records, ends


def measure(registry_url: str, transactions: int) -> tuple[float, float, float]:
    """(transaction path changes/s in, its events/s out, row path changes/s in)."""
    from bizevents_store.translators import orders_v2, orders_v3
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from bizevents.contracts.serde import BusinessSerializer
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.translators.assembly import Assembler, Part
    from bizevents.translators.pipeline import Pipeline, SourceRecord
    from bizevents.translators.txcore import TransactionCore

    client = SchemaRegistryClient({"url": registry_url})
    server = f"benchtx{int(time.time() * 1000) % 1_000_000}"
    records, ends = workload(server, client, transactions)
    schemas: dict[int, str] = {}

    def lookup(schema_id: int) -> str:
        if schema_id not in schemas:
            schemas[schema_id] = str(client.get_schema(schema_id).schema_str)
        return schemas[schema_id]

    decoder = AutoDecoder(lookup)
    serializer = BusinessSerializer(client)
    core = TransactionCore([orders_v3], serializer)

    def transactional(batch: list[SourceRecord], batch_ends: list[Any]) -> int:
        assembler = Assembler(core.reads)
        events = 0
        offset = 0
        per_tx = 5
        for i, end in enumerate(batch_ends):
            outcomes = []
            for r in batch[i * per_tx : (i + 1) * per_tx]:
                change = decoder.decode(r.key, r.value)
                outcomes += assembler.feed(Part(offset, r, change=change))  # type: ignore[arg-type]
                offset += 1
            outcomes += assembler.feed(Part(offset, r, record=end))
            offset += 1
            events += sum(1 for o in core.process(outcomes).records if not o.dead_letter)
        return events

    transactional(records[:100], ends[:20])  # warm: schemas fetched, writers compiled
    started = time.perf_counter()
    events = transactional(records, ends)
    tx_s = time.perf_counter() - started
    assert events == transactions, f"{events} events from {transactions} transactions"

    pipeline = Pipeline([orders_v2], decoder, serializer)
    pipeline.process(records[:100])
    started = time.perf_counter()
    pipeline.process(records)
    row_s = time.perf_counter() - started
    return len(records) / tx_s, events / tx_s, len(records) / row_s


def report(registry_url: str, transactions: int, runs: int) -> list[str]:
    """Lines with the median and spread of ``runs`` runs."""
    figures = [measure(registry_url, transactions) for _ in range(runs)]

    def line(values: list[float]) -> str:
        return (
            f"{statistics.median(values):,.0f}/s (min {min(values):,.0f}, max {max(values):,.0f}, "
            f"{runs} runs)"
        )

    return [
        f"    transaction translation core (orders@3: decode, assemble, translate, serialize): "
        f"{line([f[0] for f in figures])} changes in, {line([f[1] for f in figures])} events out",
        f"    row path core on the same changes (orders@2): {line([f[2] for f in figures])} "
        "changes in",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=4_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from bizevents.devstack.registry import run_in_thread

    with run_in_thread(Path(tempfile.mkdtemp(prefix="bench-tx-registry-"))) as registry:
        for text in report(registry.url, args.transactions, args.runs):
            print(text)


if __name__ == "__main__":
    main()
