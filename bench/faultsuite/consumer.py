"""The fault suite's consumer: a microservice built with the consumer kit, killed -9 and
restarted by ``bench/faults.py``, and the check of what it applied.

It reads the store's order topics with :class:`bizevents.consumers.BusinessConsumer`
and keeps per-order state in PostgreSQL (its own schema), as a service would. The kit
delivers at least once and deduplicates only within its in-memory window
(docs/consuming.md), so the handler is idempotent by ``event_id`` as the kit asks: in
one database transaction it looks the id up, and either applies the event (a new id,
or a correction: the same id from a higher ``(translator version, replay)``) and writes
it to its ``applied`` log with the order's new state, or writes it to ``repeats`` (an
id applied before at the same or a higher rank). A kill at any moment loses the
transaction in flight, never half of it; the kit then re-delivers from the last
committed offset.

The check (:func:`check_applied`) reads both tables back: every event id published on
the order topics applied, no id applied twice at one rank, each repeat's content the
same as the application it repeats, and per business key and translator the
applications in commit order.

    python bench/faultsuite/consumer.py --dsn DSN --schema S --group G --bootstrap B \\
        --registry URL --topics store.order-placed,store.order-status-changed
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: The contracts of the order topics it reads.
CONTRACTS = ("OrderPlaced", "OrderStatusChanged", "OrderShipped", "OrderCancelled")
#: How long the handler keeps retrying while its database is away (a restart).
DB_PATIENCE_S = 120.0


def order_topics() -> list[str]:
    from bizevents.contracts.business import default_topic

    return [default_topic(f"store.orders.{name}") for name in CONTRACTS]


def create_tables(conn: Any, schema: str) -> None:
    """The consumer's state: the applied log, the repeats, and the orders."""
    with conn.cursor() as cur:
        cur.execute(
            f"""
            CREATE SCHEMA IF NOT EXISTS {schema};
            CREATE TABLE IF NOT EXISTS {schema}.applied (
                seq bigserial PRIMARY KEY,
                event_id text NOT NULL,
                version int NOT NULL,
                replay boolean NOT NULL,
                translator text NOT NULL,
                topic text NOT NULL,
                partition int NOT NULL,
                "offset" bigint NOT NULL,
                key bytea,
                source_topic text,
                source_partition int,
                source_offset bigint,
                order_id bigint NOT NULL,
                digest text NOT NULL
            );
            CREATE INDEX IF NOT EXISTS applied_event_id ON {schema}.applied (event_id);
            CREATE TABLE IF NOT EXISTS {schema}.repeats (
                seq bigserial PRIMARY KEY,
                event_id text NOT NULL,
                version int NOT NULL,
                replay boolean NOT NULL,
                digest text NOT NULL
            );
            CREATE TABLE IF NOT EXISTS {schema}.orders (
                order_id bigint PRIMARY KEY,
                status text,
                total numeric,
                events int NOT NULL
            );
            """
        )
    conn.commit()


def digest_of(event: Any) -> str:
    """The event's content without its lineage (which names the source offset)."""
    content = event.model_dump(mode="json", exclude={"lineage"})
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


class Store:
    """The handler's side: one event applied or recorded as a repeat, in one transaction."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self.conn: Any = None

    def _connect(self) -> Any:
        import psycopg2

        if self.conn is None or self.conn.closed:
            self.conn = psycopg2.connect(self.dsn, connect_timeout=5)
        return self.conn

    def apply(self, delivery: Any) -> str:
        """``applied`` or ``repeat``: what the event did to the state."""
        from bizevents.consumers.window import rank

        event, lineage = delivery.event, delivery.lineage
        version, replay = rank(lineage)
        digest = digest_of(event)
        s = self.schema
        conn = self._connect()
        with conn, conn.cursor() as cur:  # one transaction: committed whole or not at all
            cur.execute(
                f"SELECT version, replay FROM {s}.applied WHERE event_id = %s FOR UPDATE",
                (lineage.event_id,),
            )
            ranks = [(int(v), bool(r)) for v, r in cur.fetchall()]
            if ranks and max(ranks) >= (version, replay):
                cur.execute(
                    f"INSERT INTO {s}.repeats (event_id, version, replay, digest) "
                    "VALUES (%s, %s, %s, %s)",
                    (lineage.event_id, version, replay, digest),
                )
                return "repeat"
            cur.execute(
                f"INSERT INTO {s}.applied (event_id, version, replay, translator, topic, "
                'partition, "offset", key, source_topic, source_partition, source_offset, '
                "order_id, digest) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    lineage.event_id,
                    version,
                    replay,
                    lineage.translator,
                    delivery.topic,
                    delivery.partition,
                    delivery.offset,
                    delivery.key,
                    lineage.source_topic,
                    lineage.source_partition,
                    lineage.source_offset,
                    event.order_id,
                    digest,
                ),
            )
            status = getattr(event, "new_status", None)
            cur.execute(
                f"INSERT INTO {s}.orders (order_id, status, total, events) "
                "VALUES (%s, %s, %s, 1) ON CONFLICT (order_id) DO UPDATE SET "
                "status = COALESCE(EXCLUDED.status, orders.status), "
                "total = COALESCE(EXCLUDED.total, orders.total), events = orders.events + 1",
                (event.order_id, status.value if status else None, getattr(event, "total", None)),
            )
        return "applied"

    def close(self) -> None:
        if self.conn is not None and not self.conn.closed:
            self.conn.close()


def make_handler(store: Store) -> Callable[[Any], Any]:
    async def handle(delivery: Any) -> None:
        import psycopg2

        # The database may be restarting: wait for it rather than let the kit
        # dead-letter a good event (its attempts are for the handler's own faults).
        deadline = time.monotonic() + DB_PATIENCE_S
        while True:
            try:
                await asyncio.to_thread(store.apply, delivery)
                return
            except (psycopg2.OperationalError, psycopg2.InterfaceError):
                store.close()
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    return handle


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--registry", required=True)
    parser.add_argument("--topics", required=True)
    args = parser.parse_args(argv)
    import bizevents_store.contracts as store_contracts

    from bizevents.consumers import consume
    from bizevents.plumbing.settings import KafkaSettings, RegistrySettings

    store = Store(args.dsn, args.schema)
    stats = consume(
        args.topics.split(","),
        make_handler(store),
        contracts=[getattr(store_contracts, name) for name in CONTRACTS],
        group_id=args.group,
        kafka=KafkaSettings(bootstrap_servers=args.bootstrap),
        registry=RegistrySettings(url=args.registry),
    )
    store.close()
    print(f"consumer stopped: {stats}", flush=True)
    return 0


# -- the check ----------------------------------------------------------------------------


@dataclass
class Applied:
    """What the consumer did, against what the order topics hold."""

    expected: int = 0
    missing: int = 0
    applications: int = 0
    corrections: int = 0
    repeats: int = 0
    #: one id applied twice at one rank: the state counted an event twice
    applied_twice: int = 0
    #: a repeat whose content differs from the application it repeats
    differing_repeats: int = 0
    reordered: int = 0
    details: list[str] = field(default_factory=list)


def check_applied(
    conn: Any,
    schema: str,
    published: dict[str, Any],
    tech_index: dict[tuple[str, int, int], int],
    order_breaks: Callable[[dict[Any, list[tuple[int, Any]]]], list[str]],
) -> Applied:
    """``published``: event id → any of its records on the order topics."""
    out = Applied(expected=len(published))
    with conn.cursor() as cur:
        cur.execute(
            "SELECT event_id, version, replay, translator, topic, key, source_topic, "
            f"source_partition, source_offset, digest FROM {schema}.applied ORDER BY seq"
        )
        applied = cur.fetchall()
        cur.execute(f"SELECT event_id, version, replay, digest FROM {schema}.repeats")
        repeats = cur.fetchall()
    out.applications = len(applied)
    out.repeats = len(repeats)
    by_rank: dict[tuple[str, int, bool], list[str]] = defaultdict(list)
    first: set[str] = set()
    sequences: dict[Any, list[tuple[int, Any]]] = defaultdict(list)
    for (
        event_id,
        version,
        replay,
        translator,
        topic,
        key,
        s_topic,
        s_part,
        s_off,
        digest,
    ) in applied:
        by_rank[(event_id, version, replay)].append(digest)
        if event_id in first:
            out.corrections += 1
        first.add(event_id)
        index = tech_index.get((s_topic, s_part, s_off))
        if index is not None:
            # each translator's events of one key in commit order (a correction of an
            # earlier event after a later one is another translator's stream)
            sequences[(topic, bytes(key) if key is not None else None, translator)].append(
                (index, event_id)
            )
    for (event_id, version, _replay), digests in by_rank.items():
        if len(digests) > 1:
            out.applied_twice += 1
            out.details.append(f"consumer: {event_id} applied {len(digests)} times at @{version}")
    for event_id, version, replay, digest in repeats:
        original = by_rank.get((event_id, version, replay))
        if original is not None and digest not in original:
            out.differing_repeats += 1
            out.details.append(f"consumer: {event_id} repeated with other content")
    missing = sorted(set(published) - first)
    out.missing = len(missing)
    out.details += [f"consumer missing: {e}" for e in missing[:5]]
    breaks = order_breaks(sequences)
    out.reordered = len(breaks)
    out.details += [f"consumer reordered: {b}" for b in breaks[:5]]
    out.details.append(
        f"consumer: {out.expected} event ids published, {out.missing} never applied, "
        f"{out.applications} applications ({out.corrections} corrections), "
        f"{out.repeats} repeats skipped by the handler, {out.applied_twice} applied twice"
    )
    return out


if __name__ == "__main__":
    sys.exit(main())
