"""Field-by-field comparison of bizevents capture's records with Debezium's, both read
into the contracts' model (``ChangeEvent``, ``Tombstone``, ``TransactionRecord``).

Each side's records are grouped per topic and key, in the order each wrote them (a key's
records are in one partition, in order); the n-th record of a key on one side is compared
with the n-th on the other, and every field that differs is one ``Difference`` named by
its path (``after.ts``, ``source.lsn``, ``transaction.id``, ``tombstone``).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any

from bizevents.contracts.envelope import ChangeEvent, MySqlPosition, PgPosition, Tombstone
from bizevents.contracts.technical import JsonSchemaDecoder
from bizevents.contracts.technical.transaction import TransactionDecoder, TransactionRecord
from tests.kafka import read_all
from tests.peers.harness import Record as DbzRecord

Decoded = ChangeEvent | Tombstone


@dataclass(frozen=True)
class Difference:
    topic: str
    key: str
    index: int
    path: str
    ours: Any
    theirs: Any


def key_text(key: Any) -> str:
    return json.dumps(key, sort_keys=True, default=str)


def debezium_changes(records: list[DbzRecord], topics: set[str]) -> list[tuple[str, Decoded]]:
    """Debezium's records of ``topics`` decoded as bizevents reads Debezium's JSON with
    schemas (its other topics: transactions, logical messages, the signal table)."""
    decoder = JsonSchemaDecoder()
    out = []
    for r in records:
        if r.topic not in topics:
            continue
        key = None if r.key is None else json.dumps(r.key).encode()
        value = None if r.value is None else json.dumps(r.value).encode()
        out.append((r.topic, decoder.decode(key, value)))
    return out


def debezium_transactions(records: list[DbzRecord], tx_topic: str) -> list[TransactionRecord]:
    decoder = TransactionDecoder(_no_registry)
    return [decoder.decode(json.dumps(r.value).encode()) for r in records if r.topic == tx_topic]


def per_key(changes: list[tuple[str, Decoded]]) -> dict[tuple[str, str], list[Decoded]]:
    grouped: dict[tuple[str, str], list[Decoded]] = defaultdict(list)
    for topic, d in changes:
        grouped[(topic, key_text(_plain(d.key)))].append(d)
    return grouped


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return (a.is_nan() and b.is_nan()) or str(a) == str(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _flat(d: Decoded) -> dict[str, Any]:
    """A record as path -> value."""
    if isinstance(d, Tombstone):
        flat: dict[str, Any] = {"tombstone": True}
        flat.update({f"key.{k}": v for k, v in (d.key or {}).items()})
        return flat
    flat = {"tombstone": False, "op": d.op, "ts_ms": d.ts_ms}
    flat.update({f"key.{k}": v for k, v in (d.key or {}).items()})
    for side in ("before", "after"):
        row = getattr(d, side)
        flat[side] = row is not None
        flat.update({f"{side}.{k}": v for k, v in (row or {}).items()})
    s = d.source
    for name in ("connector", "name", "db", "schema", "table", "ts_ms", "version", "sequence"):
        flat[f"source.{name}"] = getattr(s, name)
    flat["source.snapshot"] = s.snapshot_raw
    if isinstance(s.position, PgPosition):
        flat["source.lsn"] = s.position.lsn
        flat["source.txId"] = s.position.tx_id
        flat["source.xmin"] = s.position.xmin
    elif isinstance(s.position, MySqlPosition):
        for f in fields(MySqlPosition):
            flat[f"source.{f.name}"] = getattr(s.position, f.name)
    flat.update({f"source.{k}": v for k, v in s.extra.items()})
    tx = d.transaction
    flat["transaction"] = tx is not None
    if tx is not None:
        flat["transaction.id"] = tx.id
        flat["transaction.total_order"] = tx.total_order
        flat["transaction.data_collection_order"] = tx.data_collection_order
    return flat


_MISSING = object()


def differences(
    ours: dict[tuple[str, str], list[Decoded]], theirs: dict[tuple[str, str], list[Decoded]]
) -> list[Difference]:
    out: list[Difference] = []
    for topic, key in sorted(set(ours) | set(theirs)):
        a, b = ours.get((topic, key), []), theirs.get((topic, key), [])
        if len(a) != len(b):
            out.append(Difference(topic, key, -1, "count", len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            fx, fy = _flat(x), _flat(y)
            for path in sorted(set(fx) | set(fy)):
                vx, vy = fx.get(path, _MISSING), fy.get(path, _MISSING)
                if vx is _MISSING or vy is _MISSING or not same(vx, vy):
                    out.append(
                        Difference(
                            topic,
                            key,
                            i,
                            path,
                            "(absent)" if vx is _MISSING else vx,
                            "(absent)" if vy is _MISSING else vy,
                        )
                    )
    return out


def _no_registry(schema_id: int) -> Any:
    raise LookupError(schema_id)  # Debezium's JSON carries its schema


def read_transactions(endpoints: Any, topic: str) -> list[TransactionRecord]:
    """bizevents' transaction topic, every record, in order."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    registry = SchemaRegistryClient({"url": endpoints.registry_url})
    decoder = TransactionDecoder(lambda i: registry.get_schema(i).schema_str)
    messages = read_all(endpoints.bootstrap_servers, topic, isolation="read_committed")
    return [decoder.decode(m.value) for m in messages]


def hold_table(
    found: list[Difference],
    rows: dict[str, Any],
    events: dict[tuple[str, str], list[Decoded]],
) -> None:
    """Every difference meets its row; every row is met at least once."""
    unexplained = []
    met: set[str] = set()
    for d in found:
        row = rows.get(d.path)
        # a record count's or a transaction record's difference has no change event
        event = events[(d.topic, d.key)][d.index] if d.index >= 0 else None
        if row is None or not row.holds(d.ours, d.theirs, event):
            unexplained.append(d)
        else:
            met.add(d.path)
    assert not unexplained, "differences no row of the table explains:\n" + "\n".join(
        map(str, unexplained)
    )
    assert met == set(rows), f"rows of the table never met: {sorted(set(rows) - met)}"


def hold_transactions(
    ours: list[TransactionRecord],
    theirs: list[TransactionRecord],
    topic: str,
    tables: set[str],
    same_id: Any,
) -> list[Difference]:
    """BEGIN and END records of the transactions that changed ``tables`` pair up in order:
    status and counts equal; ids equal, or as ``same_id`` (the table's ``transaction.id``
    row, where the database has one) says. (Debezium's own signal-table transactions are
    left out: bizevents writes none.) The differences the table holds: a BEGIN with no END
    (a transaction that changed no row), ``BEGIN``, says whether each side wrote one; a
    time that differs is ``BEGIN.ts_ms`` or ``END.ts_ms``."""

    def tx(r: TransactionRecord) -> str:
        return r.id.split(":")[0]

    def ends(records: list[TransactionRecord]) -> dict[str, TransactionRecord]:
        return {tx(r): r for r in records if r.status == "END"}

    def lone(records: list[TransactionRecord]) -> set[str]:
        ended = ends(records)
        return {tx(r) for r in records if r.status == "BEGIN" and tx(r) not in ended}

    def of_tables(records: list[TransactionRecord]) -> list[TransactionRecord]:
        ended = ends(records)
        return [r for r in records if tx(r) in ended and set(ended[tx(r)].counts()) <= tables]

    lone_ours, lone_theirs = lone(ours), lone(theirs)
    found = [
        Difference(topic, t, -1, "BEGIN", t in lone_ours, t in lone_theirs)
        for t in sorted(lone_ours | lone_theirs)
    ]
    ours, theirs = of_tables(ours), of_tables(theirs)
    assert len(ours) == len(theirs), (ours, theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert (a.status, a.event_count, a.counts()) == (b.status, b.event_count, b.counts())
        assert a.id == b.id or (same_id is not None and same_id(a.id, b.id, None)), (a, b)
        if a.ts_ms != b.ts_ms:
            found.append(Difference(topic, tx(a), -1, f"{a.status}.ts_ms", a.ts_ms, b.ts_ms))
    return found
