"""A version in the shadow of the live one, and its promotion, against the real broker
and registry (docs/shadow.md).

The plugin ``shadowtest`` (installed in a folder on the workers' path) has three
versions of the store's orders translator: @1 maps the status by position (the seeds'
bug), @2 by label (the fix: differs from @1 only on the status fields), @3 as @2 with
a total one cent off (a wrong fix).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bizevents.contracts.business import (
    HEADER_EVENT_ID,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_TOPIC,
    HEADER_TRANSLATOR,
)
from bizevents.contracts.envelope import ChangeEvent
from bizevents.devstack import Endpoints
from tests.integration.test_translate_worker import (
    ORDER_TOPICS,
    REPO,
    Setup,
    Worker,
    events_from,
    order_change,
    order_row,
    order_story,
    orders_encoder,
    produce,
    read_all,
    wait_for,
)
from tests.plugins import install_plugin, plugin_pythonpath

pytestmark = pytest.mark.integration

PLUGIN = """
from decimal import Decimal

from bizevents import translator
from bizevents_store import translators as store

COMMON = dict(
    sources=["store.orders"],
    emits=store.ORDER_EVENTS,
    snapshots="skip",
    deletes="skip",
    columns=store.ORDER_COLUMNS,
    ops=store.ORDER_OPS,
    changes=store.ORDER_CHANGES,
)


@translator(name="shadowtest", version=1, **COMMON)
def by_position(change):
    return store.orders_v1.func(change)


@translator(name="shadowtest", version=2, **COMMON)
def by_label(change):
    return store.orders_v2.func(change)


@translator(name="shadowtest", version=3, **COMMON)
def total_off(change):
    for event in store.orders_v2.func(change):
        if type(event).__name__ == "OrderPlaced":
            event = event.model_copy(update={"total": event.total + Decimal("0.01")})
        yield event


ALL = [by_position, by_label, total_off]
"""


@pytest.fixture
def setup(bizevents_stack: Endpoints, tmp_path: Path) -> Iterator[Setup]:

    install_plugin(
        tmp_path / "plugins",
        "plugin-shadowtest",
        "shadowtest",
        "plugin_shadowtest:ALL",
        textwrap.dedent(PLUGIN),
    )
    yield Setup.fresh(bizevents_stack, tmp_path, "sh", "shadow")


def env(setup: Setup, live: int, shadow: str | None) -> dict[str, str]:
    extra = {
        "BIZEVENTS_TRANSLATORS": json.dumps({"shadowtest": live}),
        "PYTHONPATH": plugin_pythonpath(setup.tmp / "plugins"),
    }
    if shadow is not None:
        extra["BIZEVENTS_TRANSLATE__SHADOW"] = json.dumps([shadow])
        extra["BIZEVENTS_TRANSLATE__SHADOW_OUTPUT"] = "topic"
    return setup.env(**extra)


def cli(setup: Setup, *args: str, live: int = 1) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bizevents", *args],
        env=env(setup, live, None),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def report(setup: Setup, ref: str) -> dict[str, Any] | None:
    done = cli(setup, "shadow", "report", ref, "--json")
    if done.returncode != 0:
        assert "is not shadowed" in done.stderr, done.stderr  # not yet: nothing published
        return None
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def orders(setup: Setup, first: int, last: int, start_lsn: int) -> list[ChangeEvent]:
    """Orders ``first..last`` placed, paid, touched and shipped (3 changes with events)."""
    return [
        c
        for c in order_story(setup.server, last, start_lsn)
        if first <= int((c.after or c.before or {})["id"]) <= last
    ]


def send(setup: Setup, changes: list[ChangeEvent]) -> None:
    encoder = orders_encoder(setup.endpoints.registry_url, setup.server)
    produce(setup.endpoints.bootstrap_servers, setup.topic, [encoder.encode(c) for c in changes])


def compared_over(
    setup: Setup, ref: str, changes: int, workers: list[Worker], what: str = ""
) -> dict[str, Any]:
    """The shadow report of ``ref`` once it has compared ``changes`` changes."""
    found: dict[str, Any] = wait_for(
        lambda: (r := report(setup, ref)) and r["changes"] >= changes and r,
        90,
        what or f"the shadow's comparison of {changes} changes",
        workers,
    )
    return found


def versions_per_change(
    bootstrap: str, topic: str
) -> dict[tuple[int, int], dict[bytes, set[bytes]]]:
    """(source partition, source offset) -> per version, the ids of its events."""
    found: dict[tuple[int, int], dict[bytes, set[bytes]]] = defaultdict(lambda: defaultdict(set))
    for m in events_from(bootstrap, ORDER_TOPICS, topic):
        where = (int(m.headers[HEADER_SOURCE_PARTITION]), int(m.headers[HEADER_SOURCE_OFFSET]))
        found[where][m.headers[HEADER_TRANSLATOR]].add(m.headers[HEADER_EVENT_ID])
    return found


def with_events(
    setup: Setup, changes: int, live: Worker, timeout: float, what: str
) -> dict[tuple[int, int], dict[bytes, set[bytes]]]:
    """:func:`versions_per_change` once ``changes`` changes have events."""
    bootstrap = setup.endpoints.bootstrap_servers
    found: dict[tuple[int, int], dict[bytes, set[bytes]]] = wait_for(
        lambda: len(f := versions_per_change(bootstrap, setup.topic)) >= changes and f,
        timeout,
        what,
        [live],
    )
    return found


def check_one_version_per_change(
    found: dict[tuple[int, int], dict[bytes, set[bytes]]], changes: int
) -> list[tuple[int, list[bytes]]]:
    """Every change with events has them from exactly one version, as many ids as a
    version gives it; per partition the versions in offset order (the hand-overs)."""
    assert len(found) == changes, f"{len(found)} of {changes} changes have events"
    along: dict[int, list[bytes]] = defaultdict(list)
    for (partition, _offset), by_version in sorted(found.items()):
        assert len(by_version) == 1, f"{partition}/{_offset} by {sorted(by_version)}"
        ((version, ids),) = by_version.items()
        assert len(ids) in (1, 2)  # one event, or a shipment's two
        if not along[partition] or along[partition][-1] != version:
            along[partition].append(version)
    return sorted(along.items())


def test_a_shadow_that_differs_only_where_expected_is_promoted_without_gap_or_double(
    setup: Setup,
) -> None:
    """Shadow @2 beside @1; refused promotions say why; promoted with a kill -9 during
    the hand-over; rolled back: every change's events come from exactly one version,
    and each partition switches once each way."""
    bootstrap = setup.endpoints.bootstrap_servers
    send(setup, orders(setup, 1, 30, 10_000))
    live = Worker(env(setup, 1, "shadowtest@2"), setup.tmp / "live.log")
    try:
        # 30 creations, 60 status changes and 30 touches compared (the touches give none)
        compared = compared_over(setup, "shadowtest@2", 120, [live])
        assert compared["live"] == "shadowtest@1" and compared["changes"] == 120
        # the touches, which neither version translates, are read but not compared
        assert compared["translated"] == 90
        contracts = compared["contracts"]
        status = contracts["store.orders.OrderStatusChanged"]
        assert status["differing"] == 60 and status["identical"] == 0
        assert set(status["fields"]) == {"old_status", "new_status"}
        assert contracts["store.orders.OrderPlaced"]["identical"] == 30
        assert contracts["store.orders.OrderShipped"]["identical"] == 30
        assert live.metric("bizevents_shadow_changes_total", shadow="shadowtest@2") >= 120
        # the shadow's events are in the shadow topics only
        shadowed = [
            m
            for m in read_all(bootstrap, ORDER_TOPICS[0] + ".shadow")
            if m.headers.get(HEADER_SOURCE_TOPIC) == setup.topic.encode()
        ]
        assert len(shadowed) == 30
        assert {m.headers[HEADER_TRANSLATOR] for m in shadowed} == {b"shadowtest@2"}
        before = versions_per_change(bootstrap, setup.topic)
        assert {v for by in before.values() for v in by} == {b"shadowtest@1"}

        # bad input: one sentence, exit 1, nothing promoted
        expect = ["--expect-field", "old_status", "--expect-field", "new_status"]
        for args, says in (
            (["shadowtest@3"], "shadowtest@3 is not shadowed"),
            (["shadowtest@9"], "no translator shadowtest@9 is registered"),
            (["shadowtest@1"], "shadowtest@1 is already live"),
            (["shadowtest@2", "--min-changes", "100"], "OrderStatusChanged.new_status (60)"),
            (["shadowtest@2", "--min-changes", "1000", *expect], "fewer than the 1,000"),
            (["shadowtest@2", "--max-differ", "lots"], "is not a fraction"),
        ):
            refused = cli(setup, "promote", *args)
            assert refused.returncode == 1, (args, refused.stdout, refused.stderr)
            assert says in refused.stderr, (args, refused.stderr)
            assert "Traceback" not in refused.stderr
        send(setup, orders(setup, 31, 40, 50_000))
        done = cli(setup, "promote", "shadowtest@2", "--min-changes", "90", *expect)
        assert done.returncode == 0, done.stderr
        send(setup, orders(setup, 41, 50, 60_000))
        live.stop(signal.SIGKILL)  # somewhere in the hand-over (or just before it)
        send(setup, orders(setup, 51, 60, 70_000))
        live = Worker(env(setup, 1, "shadowtest@2"), setup.tmp / "successor.log")
        promoted = wait_for(
            lambda: (
                len(found := versions_per_change(bootstrap, setup.topic)) >= 180
                and all(
                    by.keys() == {b"shadowtest@2"}
                    for (p, o), by in found.items()
                    if o == max(o2 for (p2, o2) in found if p2 == p)
                )
                and found
            ),
            120,
            "the 60 orders' events, the last ones by shadowtest@2",
            [live],
        )
        lanes = check_one_version_per_change(promoted, 180)
        assert all(versions[-1] == b"shadowtest@2" for _, versions in lanes)
        assert all(versions[0] == b"shadowtest@1" for _, versions in lanes)
        assert all(len(versions) <= 2 for _, versions in lanes)

        live.metrics()  # learns its endpoint
        assert live.metrics_url is not None
        shown = cli(setup, "status", "--url", live.metrics_url, "--json", "--interval", "0.2")
        assert shown.returncode == 0, shown.stderr
        (promotion,) = json.loads(shown.stdout)["promotions"]
        assert promotion["live"] == "shadowtest@2" and promotion["previous"] == "shadowtest@1"
        assert promotion["figures"]["changes"] >= 120 and promotion["at"]

        # a rollback goes the same way, without a gate
        back = cli(setup, "promote", "shadowtest@1", live=1)
        assert back.returncode == 0, back.stderr
        wait_for(
            lambda: any(
                x.get("event") == "promotion" and x.get("translator") == "shadowtest@1"
                for x in live.lines()
            ),
            30,
            "the worker reading the rollback",
            [live],
        )
        send(setup, orders(setup, 61, 70, 80_000))
        rolled = with_events(setup, 210, live, 90, "the rolled-back orders' events")
        lanes = check_one_version_per_change(rolled, 210)
        assert all(len(versions) <= 3 for _, versions in lanes)
        # every change after the rollback was read is the old version's again
        last = {p: max(o for (p2, o) in promoted if p2 == p) for (p, _) in promoted}
        after = [by for (p, o), by in rolled.items() if o > last.get(p, -1)]
        assert len(after) == 30 and all(by.keys() == {b"shadowtest@1"} for by in after)
        handed = [x for x in live.lines() if x.get("event") == "partition handed over"]
        assert {x["translator"] for x in handed} >= {"shadowtest@1"}
    finally:
        live.stop()


def test_a_shadow_that_differs_on_an_unexpected_field_is_refused_with_the_figures(
    setup: Setup,
) -> None:
    send(setup, orders(setup, 1, 20, 10_000))
    live = Worker(env(setup, 2, "shadowtest@3"), setup.tmp / "live.log")
    try:
        compared_over(setup, "shadowtest@3", 80, [live])
        refused = cli(
            setup,
            "promote",
            "shadowtest@3",
            "--min-changes",
            "80",
            "--expect-field",
            "status",
            live=2,
        )
        assert refused.returncode == 1
        assert "20 of 80 events (25.00%) differ where not expected" in refused.stderr, (
            refused.stderr
        )
        assert "OrderPlaced.total (20)" in refused.stderr
        # nothing changed: the live version still translates
        send(setup, orders(setup, 21, 22, 20_000))
        found = with_events(setup, 66, live, 60, "the next orders' events")
        assert {v for by in found.values() for v in by} == {b"shadowtest@2"}
    finally:
        live.stop()


def test_a_snapshot_both_versions_skip_leaves_the_gate_where_it_was(setup: Setup) -> None:
    """A snapshot of the table (50 reads) both versions skip: read, not compared; the
    gate still counts the 15 changes they translated, and says how many were read."""
    send(setup, orders(setup, 1, 5, 10_000))
    live = Worker(env(setup, 1, "shadowtest@2"), setup.tmp / "live.log")
    try:
        compared_over(setup, "shadowtest@2", 20, [live])
        reads = [
            order_change(setup.server, "r", None, order_row(n, "pending"), 90_000)
            for n in range(1, 51)
        ]
        send(setup, reads)
        compared = compared_over(setup, "shadowtest@2", 70, [live], "the snapshot's 50 reads")
        assert (compared["changes"], compared["translated"]) == (70, 15)
        refused = cli(setup, "promote", "shadowtest@2", "--min-changes", "16")
        assert refused.returncode == 1
        assert "compared over 15 changes, fewer than the 16" in refused.stderr, refused.stderr
        assert "of 70 read" in refused.stderr
        shown = cli(setup, "shadow", "report", "shadowtest@2")
        assert "15 changes compared (translated by either version) of 70 read" in shown.stdout
    finally:
        live.stop()
