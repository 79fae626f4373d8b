"""A transaction translator's version in the shadow of the live one, and its promotion,
in the transaction worker, against the real broker, registry and PostgreSQL capture
(docs/shadow.md).

The plugin ``txshadowtest`` (installed in a folder on the workers' path) has three
versions of orders@3's translation of whole transactions: @1 maps the status by
position (the seeds' bug), @2 by label (the fix: differs from @1 only on the status
fields), @3 as @2 with every order's total a cent more (a wrong fix).
"""

from __future__ import annotations

import json
import signal
import textwrap
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bizevents_store.contracts import OrderPlaced, OrderStatusChanged

from bizevents.contracts.business import HEADER_EVENT_ID, HEADER_TRANSLATOR, HEADER_TX_ID
from tests.capture.capture_helpers import Db
from tests.integration.test_transaction_worker import (
    Worker,
    _assembly_partition,
    _ids,
    _scrape,
    capturing,
    place,
    store_db,
)
from tests.integration.test_translate_worker import events_from, wait_for
from tests.plugins import install_plugin, plugin_pythonpath

pytestmark = pytest.mark.integration

PLUGIN = """
from decimal import Decimal

from bizevents.transactions import Attributed, transaction_translator
from bizevents_store import translators as store
from bizevents_store.contracts import OrderPlaced, OrderStatusChanged

COMMON = dict(
    sources=["store.orders", "store.order_items"],
    emits=store.ORDER_EVENTS,
    keys={"store.orders": "id", "store.order_items": "order_id"},
)


def _by_position(status):
    return None if status is None else store._status_by_position(status.name.lower())


def _orders(tx, position=False, cent=False):
    for item in store.orders_v3.attributed(tx):
        event = item.event
        if position and isinstance(event, OrderStatusChanged):
            event = event.model_copy(
                update={
                    "old_status": _by_position(event.old_status),
                    "new_status": _by_position(event.new_status),
                }
            )
        if cent and isinstance(event, OrderPlaced):
            event = event.model_copy(update={"total": event.total + Decimal("0.01")})
        yield Attributed(event, item.change)


@transaction_translator(name="txshadowtest", version=1, **COMMON)
def by_position(tx):
    return _orders(tx, position=True)


@transaction_translator(name="txshadowtest", version=2, **COMMON)
def by_label(tx):
    return _orders(tx)


@transaction_translator(name="txshadowtest", version=3, **COMMON)
def total_off(tx):
    return _orders(tx, cent=True)


ALL = [by_position, by_label, total_off]
"""
TOPICS = [OrderPlaced.contract_topic(), OrderStatusChanged.contract_topic()]


@pytest.fixture
def db(bizevents_stack: Any) -> Iterator[Db]:
    with store_db(bizevents_stack) as made:
        yield made


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    folder = tmp_path / "plugins"
    install_plugin(
        folder,
        "plugin-txshadowtest",
        "txshadowtest",
        "plugin_txshadowtest:ALL",
        textwrap.dedent(PLUGIN),
    )
    return folder


def worker(db: Db, plugins: Path, group: str, live: int, shadow: str, log: Path) -> Worker:
    made = Worker(db, group, f"{group}.dlq", log)
    made.env.update(
        {
            "BIZEVENTS_TRANSLATORS": json.dumps({"txshadowtest": live}),
            "BIZEVENTS_TRANSLATE__GROUP_ID": f"{group}.rows",
            "BIZEVENTS_TRANSLATE__SHADOW": json.dumps([shadow]),
            "PYTHONPATH": plugin_pythonpath(plugins),
        }
    )
    return made


def report(w: Worker, ref: str) -> dict[str, Any] | None:
    done = w.cli("shadow", "report", ref, "--json")
    if done.returncode != 0:
        assert "is not shadowed" in done.stderr, done.stderr  # not yet: nothing published
        return None
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def figures(found: dict[str, Any], contract: type[Any]) -> dict[str, Any]:
    name = f"{contract.Meta.namespace}.{contract.__name__}"
    shown: dict[str, Any] = found["contracts"].get(name, {})
    return shown


def orders(db: Db, n: int) -> list[int]:
    """``n`` orders placed (each its own transaction, with its items and total), then
    each paid (one transaction each): an OrderPlaced and an OrderStatusChanged each."""
    customer, products = _ids(db)
    placed = []
    with db.conn.cursor() as cur:
        for i in range(n):
            cur.execute("BEGIN")
            placed.append(place(cur, customer, [(products[i % 3], i % 3 + 1)]))
            cur.execute("COMMIT")
        for order in placed:
            cur.execute("BEGIN")
            cur.execute("UPDATE store.orders SET status = 'paid' WHERE id = %s", (order,))
            cur.execute("COMMIT")
    return placed


def events(db: Db) -> dict[bytes, list[tuple[bytes, bytes]]]:
    """This test's events by id: (translator, transaction id) of each copy."""
    found: dict[bytes, list[tuple[bytes, bytes]]] = defaultdict(list)
    for m in events_from(db.endpoints.bootstrap_servers, TOPICS, f"{db.server}.store.orders"):
        found[m.headers[HEADER_EVENT_ID]].append(
            (m.headers[HEADER_TRANSLATOR], m.headers[HEADER_TX_ID])
        )
    return found


def all_events(db: Db, w: Worker, n: int) -> dict[bytes, list[tuple[bytes, bytes]]]:
    """Once ``n`` events of this test are in the topics: them (a figure when not)."""
    last: dict[bytes, list[tuple[bytes, bytes]]] = {}

    def enough() -> bool:
        nonlocal last
        last = events(db)
        return len(last) >= n

    try:
        wait_for(enough, 90, f"{n} events")
    except AssertionError:
        by = defaultdict(int)
        for copies in last.values():
            for version, _ in copies:
                by[version] += 1
        raise AssertionError(f"{len(last)} of {n} events ({dict(by)}); log: {w.tail()}") from None
    return last


def handed_over(w: Worker, version: int) -> set[int]:
    return {
        int(line["partition"])
        for line in map(json.loads, filter(None, w.log.read_text().splitlines()))
        if line.get("event") == "virtual partition handed over"
        and line.get("translator") == f"txshadowtest@{version}"
    }


def until_handed_over(db: Db, w: Worker, version: int) -> list[int]:
    """Orders placed one by one until every virtual partition was handed over to
    ``version`` (a worker hands over before the next transactions it reads)."""
    placed: list[int] = []

    def more() -> bool:
        placed.extend(orders(db, 1))
        return handed_over(w, version) == {0, 1, 2, 3}

    wait_for(more, 60, f"the hand-overs to txshadowtest@{version}")
    return placed


def lanes(
    found: dict[bytes, list[tuple[bytes, bytes]]],
    order_of: dict[bytes, int],
    *,
    repeated: bool = False,
) -> dict[int, list[bytes]]:
    """Every event made once (``repeated``: maybe again after a kill, by the same
    version), by one version (no double); per virtual partition, the versions in commit
    order (a switch is a change of version along it)."""
    along: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for event_id, copies in found.items():
        if repeated:
            assert len(set(copies)) == 1, f"event {event_id!r} by {sorted(set(copies))}"
        else:
            assert len(copies) == 1, f"event {event_id!r} published {len(copies)} times"
        version, tx_id = copies[0]
        lsn = int(tx_id.decode().split(":")[1])
        along[_assembly_partition(order_of[event_id])].append((lsn, version))
    out: dict[int, list[bytes]] = {}
    for v, seen in along.items():
        switched: list[bytes] = []
        for _, version in sorted(seen):
            if not switched or switched[-1] != version:
                switched.append(version)
        out[v] = switched
    return out


def test_a_shadow_differing_only_on_status_is_promoted_without_gap_or_double(
    db: Db, plugins: Path, tmp_path: Path
) -> None:
    """Shadow @2 beside @1 in the transaction worker; a gate not expecting the status is
    refused; the promotion hands each virtual partition over once while transactions
    flow, every event made once by exactly one version; the rollback the same way."""
    group = f"txsh-{uuid.uuid4().hex[:8]}"
    live = worker(db, plugins, group, 1, "txshadowtest@2", tmp_path / "worker.log")
    live.env["BIZEVENTS_TRANSLATE__METRICS_PORT"] = "0"
    with capturing(db, tmp_path) as run:
        live.start()
        try:
            first = orders(db, 8)
            run.wait_acked(db.wal_lsn())
            compared = wait_for(
                lambda: (
                    (r := report(live, "txshadowtest@2"))
                    and figures(r, OrderStatusChanged).get("differing") == 8
                    and figures(r, OrderPlaced).get("identical") == 8
                    and r
                ),
                90,
                "the shadow's comparison of 8 orders placed and paid",
            )
            assert compared["live"] == "txshadowtest@1"
            # each order's place (its insert, its item, its total) and its payment
            assert compared["changes"] == 8 * 4
            assert set(figures(compared, OrderStatusChanged)["fields"]) == {
                "old_status",
                "new_status",
            }
            url = next(
                json.loads(line)["url"]
                for line in live.log.read_text().splitlines()
                if '"metrics endpoint"' in line
            )
            metrics = _scrape(url)
            changes = [
                v
                for k, v in metrics.items()
                if k.startswith("bizevents_shadow_changes_total") and "txshadowtest@2" in k
            ]
            assert changes == [32.0], metrics
            refused = live.cli("promote", "txshadowtest@2", "--min-changes", "32")
            assert refused.returncode == 1 and "Traceback" not in refused.stderr
            assert "OrderStatusChanged.new_status (8)" in refused.stderr, refused.stderr
            expect = ["--expect-field", "old_status", "--expect-field", "new_status"]
            done = live.cli("promote", "txshadowtest@2", "--min-changes", "32", *expect)
            assert done.returncode == 0, done.stderr
            second = orders(db, 4) + until_handed_over(db, live, 2)  # across the hand-over
            third = orders(db, 8)  # after it
            run.wait_acked(db.wal_lsn())
            placed = [*first, *second, *third]
            found = all_events(db, live, 2 * len(placed))
            assert len(found) == 2 * len(placed)  # no gap: each event once (lanes: not twice)
            order_of = _orders_of(db, found)
            switched = lanes(found, order_of)
            assert all(
                v
                in (
                    [b"txshadowtest@1", b"txshadowtest@2"],
                    [b"txshadowtest@2"],
                )
                for v in switched.values()
            ), switched
            latest = {order_of[e]: c[0][0] for e, c in found.items()}
            assert {latest[o] for o in first} == {b"txshadowtest@1"}
            assert {latest[o] for o in third} == {b"txshadowtest@2"}

            back = live.cli("promote", "txshadowtest@1")  # the rollback: no gate
            assert back.returncode == 0, back.stderr
            placed += until_handed_over(db, live, 1)
            fourth = orders(db, 4)
            run.wait_acked(db.wal_lsn())
            placed += fourth
            found = all_events(db, live, 2 * len(placed))
            order_of = _orders_of(db, found)
            switched = lanes(found, order_of)
            # each virtual partition went @1 -> @2 -> @1 at most (one with no transaction
            # since a hand-over shows fewer)
            along = {v: b" ".join(seen) for v, seen in switched.items()}
            assert all(
                seen in b"txshadowtest@1 txshadowtest@2 txshadowtest@1" for seen in along.values()
            ), along
            assert {c[0][0] for e, c in found.items() if order_of[e] in fourth} == {
                b"txshadowtest@1"
            }
        finally:
            if live.alive():
                live.signal(signal.SIGTERM)


def _orders_of(db: Db, found: dict[bytes, list[tuple[bytes, bytes]]]) -> dict[bytes, int]:
    """Each event's order id (read from the event's lineage source: the orders change)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from bizevents.contracts.serde import BusinessDeserializer

    registry = SchemaRegistryClient({"url": db.endpoints.registry_url})
    out: dict[bytes, int] = {}
    for contract, topic in zip((OrderPlaced, OrderStatusChanged), TOPICS, strict=True):
        decode = BusinessDeserializer(registry, contract)
        for m in events_from(db.endpoints.bootstrap_servers, [topic], f"{db.server}.store.orders"):
            if m.headers[HEADER_EVENT_ID] in found:
                out[m.headers[HEADER_EVENT_ID]] = decode(m.value or b"", topic).order_id
    return out


def test_a_kill_during_the_hand_over_leaves_one_version_per_transaction(
    db: Db, plugins: Path, tmp_path: Path
) -> None:
    """kill -9 of the worker right after the promotion, while it hands over: its
    successor translates every transaction by the version its virtual partition and END
    give it, so each event comes from exactly one version (repeated, if at all, by it)."""
    group = f"txsh-{uuid.uuid4().hex[:8]}"
    first_worker = worker(db, plugins, group, 1, "txshadowtest@2", tmp_path / "first.log")
    expect = ["--expect-field", "old_status", "--expect-field", "new_status"]
    with capturing(db, tmp_path) as run:
        first_worker.start()
        successor = worker(db, plugins, group, 1, "txshadowtest@2", tmp_path / "second.log")
        try:
            placed = orders(db, 6)
            run.wait_acked(db.wal_lsn())
            wait_for(
                lambda: (r := report(first_worker, "txshadowtest@2")) and r["changes"] >= 24,
                90,
                "the shadow's comparison of 6 orders placed and paid",
            )
            done = first_worker.cli("promote", "txshadowtest@2", "--min-changes", "24", *expect)
            assert done.returncode == 0, done.stderr
            placed += orders(db, 4)
            first_worker.signal(signal.SIGKILL)  # somewhere in the hand-over (or before it)
            placed += orders(db, 4)
            run.wait_acked(db.wal_lsn())
            successor.start()
            all_events(db, successor, 2 * len(placed))
            last = orders(db, 4)  # after the successor's hand-over, if it had to make one
            run.wait_acked(db.wal_lsn())
            placed += last
            found = all_events(db, successor, 2 * len(placed))
        finally:
            for w in (first_worker, successor):
                if w.alive():
                    w.signal(signal.SIGTERM)
    order_of = _orders_of(db, found)
    along = {v: b" ".join(seen) for v, seen in lanes(found, order_of, repeated=True).items()}
    assert all(seen in b"txshadowtest@1 txshadowtest@2" for seen in along.values()), along
    assert {c[0][0] for e, c in found.items() if order_of[e] in last} == {b"txshadowtest@2"}
    handed = handed_over(first_worker, 2) | handed_over(successor, 2)
    assert handed == {0, 1, 2, 3}


def test_a_shadow_differing_on_the_total_is_refused_with_the_figures(
    db: Db, plugins: Path, tmp_path: Path
) -> None:
    group = f"txsh-{uuid.uuid4().hex[:8]}"
    live = worker(db, plugins, group, 2, "txshadowtest@3", tmp_path / "worker.log")
    with capturing(db, tmp_path) as run:
        live.start()
        try:
            orders(db, 5)
            run.wait_acked(db.wal_lsn())
            wait_for(
                lambda: (r := report(live, "txshadowtest@3")) and r["changes"] >= 20,
                90,
                "the shadow's comparison of 5 orders placed and paid",
            )
            refused = live.cli(
                "promote", "txshadowtest@3", "--min-changes", "20", "--expect-field", "status"
            )
            assert refused.returncode == 1 and "Traceback" not in refused.stderr
            assert "5 of 10 events (50.00%) differ where not expected" in refused.stderr, (
                refused.stderr
            )
            assert "OrderPlaced.total (5)" in refused.stderr
            # nothing changed: the live version still translates
            later = orders(db, 2)
            run.wait_acked(db.wal_lsn())
            found = all_events(db, live, 14)
            assert {c[0][0] for c in found.values()} == {b"txshadowtest@2"}
            assert later
        finally:
            if live.alive():
                live.signal(signal.SIGTERM)
