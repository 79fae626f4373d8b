"""Issue 29, done when: per-key parking and re-drive on the real broker (docs/parking.md).

100 orders, 3 of them parked by a planted failure (``parkorders@1`` raises on a
poisoned change, ``parkorders@2`` is the fix: tests/integration/parking_plugin.py),
then 10,000 later changes. No event of a parked key comes before its re-drive; after
``bizevents dlq redrive``, every key's events are in source order with the ids a clean
run of the fix gives (computed with the translator itself), while more live changes
arrive during the re-drive.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from bizevents_store.contracts import OrderPlaced

from bizevents.contracts.change import Change
from bizevents.contracts.envelope import ChangeEvent
from bizevents.devstack import Endpoints
from bizevents.translators.lineage import stamp
from tests.integration.parking_plugin import POISON, parkorders_v2
from tests.integration.test_translate_worker import (
    ORDER_TOPICS,
    REPO,
    Message,
    Setup,
    acknowledged,
    events_from,
    order_change,
    order_row,
    orders_encoder,
    produce,
    read_all,
    wait_for,
)
from tests.plugins import install_plugin, plugin_pythonpath

pytestmark = pytest.mark.integration

ORDERS = 100
PARKED = (7, 42, 77)
LATER = 10_000


@pytest.fixture
def setup(bizevents_stack: Endpoints, tmp_path: Path) -> Setup:
    return Setup.fresh(bizevents_stack, tmp_path, "pk", "park")


def plugin_env(setup: Setup) -> dict[str, str]:
    """The settings of the workers and of `bizevents dlq`: parkorders@1 pinned, found
    through an entry point in a .dist-info folder on their PYTHONPATH."""
    site = setup.tmp / "site"
    install_plugin(
        site, "bizevents-park-test", "parkorders", "tests.integration.parking_plugin:PARKORDERS"
    )
    return {
        "PYTHONPATH": plugin_pythonpath(site),
        "BIZEVENTS_TRANSLATORS": json.dumps({"parkorders": 1}),
        "BIZEVENTS_TRANSLATE__PARKED_TOPIC": f"test.parked.{setup.server}",
    }


class Story:
    """The orders' changes, in source order, and the events a clean run gives."""

    def __init__(self, setup: Setup) -> None:
        self.server = setup.server
        self.encoder = orders_encoder(setup.endpoints.registry_url, setup.server)
        self.rows = {n: order_row(n, "pending") for n in range(1, ORDERS + 1)}
        self.lsn = 10_000
        self.changes: list[ChangeEvent] = []

    def change(self, op: Any, before: Any, after: dict[str, Any]) -> ChangeEvent:
        self.lsn += 10
        made = order_change(self.server, op, before, after, self.lsn)
        self.changes.append(made)
        return made

    def placed_then_paid(self) -> list[ChangeEvent]:
        out = [self.change("c", None, row) for row in self.rows.values()]
        for n, row in self.rows.items():
            after = dict(row, status="paid", tracking_number=POISON if n in PARKED else None)
            out.append(self.change("u", row, after))
            self.rows[n] = after
        return out

    def later(self, count: int) -> list[ChangeEvent]:
        out = []
        for i in range(count):
            n = 1 + i % ORDERS
            row = self.rows[n]
            status = "pending" if row["status"] == "paid" else "paid"
            after = dict(row, status=status, tracking_number=None)
            out.append(self.change("u", row, after))
            self.rows[n] = after
        return out

    def encode(self, changes: Sequence[ChangeEvent]) -> list[tuple[bytes | None, bytes | None]]:
        return [self.encoder.encode(c) for c in changes]

    def send_first(self, setup: Setup, later: int) -> list[ChangeEvent]:
        """The orders placed then paid (the poisoned ones among them) and ``later``
        changes behind them, produced to the technical topic."""
        first = self.placed_then_paid() + self.later(later)
        produce(setup.endpoints.bootstrap_servers, setup.topic, self.encode(first))
        return first

    def key(self, n: int) -> bytes:
        key, _ = self.encoder.encode(self.changes[n - 1])  # the order's creation
        assert key is not None
        return key

    def expected(self) -> dict[tuple[str, bytes], list[str]]:
        """(business topic, key) -> event ids in source order, from parkorders@2."""
        out: dict[tuple[str, bytes], list[str]] = {}
        for change in self.changes:
            key, _ = self.encoder.encode(change)
            assert key is not None
            events = stamp(parkorders_v2.translate(Change(change)), change, "parkorders", 2)
            for event in events:
                topic = type(event).contract_topic()
                out.setdefault((topic, key), []).append(event.lineage.event_id)
        return out


def actual(messages: Sequence[Message]) -> dict[tuple[str, bytes], list[str]]:
    """(business topic, key) -> event ids in topic order, each once (duplicates are
    allowed only with the same id: a later copy of an id never counts twice)."""
    out: dict[tuple[str, bytes], list[str]] = {}
    seen: set[str] = set()
    for m in sorted(messages, key=lambda m: (m.topic, m.partition, m.offset)):
        eid = m.headers["bizevents.event_id"].decode()
        if eid in seen:
            continue
        seen.add(eid)
        assert m.key is not None
        out.setdefault((m.topic, m.key), []).append(eid)
    return out


def dlq(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bizevents", "dlq", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def consumer_state(setup: Setup, events: int) -> dict[int, str]:
    """Each order's status, as a consumer-kit consumer that keeps state per key (deduplicating
    by event id) sees it once it has handled ``events`` events of the test's source."""
    import asyncio

    from bizevents_store.contracts import OrderShipped, OrderStatusChanged

    from bizevents.consumers import BusinessConsumer, Delivery
    from bizevents.plumbing.settings import KafkaSettings, RegistrySettings

    state: dict[int, str] = {}
    handled = 0

    def handle(delivery: Delivery[Any]) -> None:
        nonlocal handled
        if delivery.lineage.source_topic != setup.topic:
            return
        handled += 1
        event = delivery.event
        # one key's status changes are in one partition of one topic, in order (there is
        # no order across topics: an OrderPlaced may be read after its status changes)
        if isinstance(event, OrderStatusChanged):
            assert state.get(event.order_id, "PENDING") == event.old_status.value, event
            state[event.order_id] = event.new_status.value
        if handled >= events:
            consumer.stop()

    consumer = BusinessConsumer(
        ORDER_TOPICS,
        handle,
        contracts=[OrderPlaced, OrderStatusChanged, OrderShipped],
        group_id=f"{setup.group}-consumer",
        kafka=KafkaSettings(bootstrap_servers=setup.endpoints.bootstrap_servers),
        registry=RegistrySettings(url=setup.endpoints.registry_url),
    )

    async def run() -> None:
        await asyncio.wait_for(consumer.run(), 120)

    asyncio.run(run())
    # it reads the shared business topics, where other tests' records sit too, and one of
    # them that does not read as these contracts is parked (test_translate_worker's
    # worker started before its own, second registry writes an OrderPlaced framed with
    # that registry's schema id): none of this test's may be
    if consumer.stats.dead_lettered or consumer.stats.parked:
        from bizevents.contracts.business import HEADER_SOURCE_TOPIC

        bootstrap = setup.endpoints.bootstrap_servers
        letters = read_all(bootstrap, consumer.dead_letter_topic)
        assert letters, consumer.stats
        ours = [m for m in letters if m.headers.get(HEADER_SOURCE_TOPIC) == setup.topic.encode()]
        assert not ours, [m.headers for m in ours]
        # whose they were, for whoever finds a business topic holding such records
        warnings.warn(f"other tests' records parked: {[m.headers for m in letters]}", stacklevel=1)
    return state


def dlq_in_background(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bizevents", "dlq", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def test_parked_keys_wait_and_are_re_driven_in_order_with_the_clean_runs_ids(
    setup: Setup,
) -> None:
    bootstrap = setup.endpoints.bootstrap_servers
    extra = plugin_env(setup)
    env = setup.env(**extra)
    story = Story(setup)
    first = story.send_first(setup, LATER)
    worker = setup.worker(**extra)
    try:
        worker.wait_assigned()
        acknowledged([worker], len(first))
        assert worker.metric("bizevents_parked_keys", translator="parkorders") == len(PARKED)
        parked_changes = 1 + LATER // ORDERS  # the poisoned change and those behind it
        assert (
            worker.metric("bizevents_translator_parked_total", translator="parkorders@1")
            == len(PARKED) * parked_changes
        )

        listed = dlq(env, "list", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        keys = {bytes.fromhex(r["key"]) for r in rows}
        assert keys == {story.key(n) for n in PARKED}
        assert all(r["parked"] == parked_changes for r in rows)
        assert all("poisoned tracking number" in r["reason"] for r in rows)

        # before the re-drive: a parked key has only the events of its changes before
        # the failing one (its OrderPlaced); every other key has all of its events
        expected = story.expected()
        now = actual(events_from(bootstrap, ORDER_TOPICS, setup.topic))
        for (topic, key), ids in expected.items():
            if key in keys:
                placed = topic == OrderPlaced.contract_topic()
                assert now.get((topic, key), []) == (ids if placed else []), topic
            else:
                assert now.get((topic, key)) == ids, (topic, key)

        # the re-drive, while more changes of every key (the parked ones too) arrive
        during = story.later(1_000)
        feeder = threading.Thread(
            target=produce, args=(bootstrap, setup.topic, story.encode(during))
        )
        feeder.start()
        redrive = dlq(env, "redrive", "--translator", "parkorders@2", "--all")
        feeder.join()
        assert redrive.returncode == 0, redrive.stdout + redrive.stderr + worker.tail()
        assert redrive.stdout.count("done:") == len(PARKED)

        total = len(first) + len(during)
        acknowledged([worker], total)
        assert worker.metric("bizevents_parked_keys", translator="parkorders") == 0
        assert json.loads(dlq(env, "list", "--json").stdout) == []
        expected = story.expected()
        final = wait_for(
            lambda: (
                (found := actual(events_from(bootstrap, ORDER_TOPICS, setup.topic))) == expected
                and found
            ),
            60,
            "every key's events, in source order, with the clean run's ids",
            [worker],
        )
        assert sum(map(len, final.values())) == sum(map(len, expected.values()))
        # the walkthrough's last step: a consumer's state per order is the table's
        assert consumer_state(setup, sum(map(len, expected.values()))) == {
            n: row["status"].upper() for n, row in story.rows.items()
        }
        again = dlq(env, "redrive", "--translator", "parkorders@2", "--all")
        assert (
            again.returncode == 1 and "no key" in again.stderr and "Traceback" not in again.stderr
        )
    finally:
        assert worker.stop() == 0, worker.tail()


def test_a_version_that_is_not_installed_is_one_sentence(setup: Setup) -> None:
    env = setup.env(**plugin_env(setup))
    result = dlq(env, "redrive", "--translator", "parkorders@9", "--all", timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "cannot re-drive through parkorders@9" in result.stderr
    assert "parkorders has versions [1, 2, 3, 4]" in result.stderr


def final_check(setup: Setup, story: Story, env: dict[str, str], workers: Sequence[Any]) -> None:
    """Nothing parked, and every key's events in source order with the clean run's ids."""
    bootstrap = setup.endpoints.bootstrap_servers
    expected = story.expected()
    found: dict[tuple[str, bytes], list[str]] = {}

    def same() -> bool:
        found.clear()
        found.update(actual(events_from(bootstrap, ORDER_TOPICS, setup.topic)))
        return found == expected

    try:
        wait_for(same, 120, "every key's events, in source order, with the clean run's ids", [])
    except AssertionError:
        differ = [k for k in expected if found.get(k) != expected[k]]
        # each differing key's events as positions in the clean run's order
        where = [[_index(expected[k], i) for i in found.get(k, [])] for k in differ[:3]]
        raise AssertionError(
            f"{len(differ)} (topic, key) differ, e.g. {differ[:1]}: {where}"
            + "".join(w.tail() for w in workers)
        ) from None
    listed = dlq(env, "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stdout


def _index(ids: list[str], eid: str) -> int:
    return ids.index(eid) if eid in ids else -1


def test_a_kill_9_mid_re_drive_and_a_rebalance_keep_order_and_ids(setup: Setup) -> None:
    """Two workers; the one carrying out a (slow) re-drive is killed with SIGKILL; the
    other takes its partitions over (a rebalance), and so does a third started then;
    the re-drive is carried out again by the partition's next owner."""
    bootstrap = setup.endpoints.bootstrap_servers
    extra = plugin_env(setup)
    env = setup.env(**extra)
    story = Story(setup)
    first = story.send_first(setup, LATER)
    workers = [setup.worker("a", **extra), setup.worker("b", **extra)]
    try:
        wait_for(
            lambda: all(len(w.assigned() or []) == 2 for w in workers),
            90,
            "two workers sharing the partitions",
            workers,
        )
        acknowledged(workers, len(first))
        redrive = dlq_in_background(
            env, "redrive", "--translator", "parkorders@3", "--all", "--timeout", "240"
        )
        busy = wait_for(
            lambda: [
                w
                for w in workers
                if any(x.get("event") == "carrying out a request" for x in w.lines())
            ],
            60,
            "a re-drive under way",
            workers,
        )[0]
        busy.stop(signal.SIGKILL)
        workers.remove(busy)
        workers.append(setup.worker("c", **extra))
        during = story.later(1_000)
        produce(bootstrap, setup.topic, story.encode(during))
        out, err = redrive.communicate(timeout=300)
        assert redrive.returncode == 0, out + err + "".join(w.tail() for w in workers)
        assert out.count("done:") == len(PARKED)
        final_check(setup, story, env, workers)
    finally:
        # stopped together, each signalled once: a second SIGTERM that comes once a
        # worker has closed its event loop (mode restores the default handler) ends the
        # process by the signal (-15), though it stopped cleanly
        for w in workers:
            if w.process.poll() is None:
                w.process.send_signal(signal.SIGTERM)
        for w in workers:
            assert w.exited() == 0, w.tail()


def test_a_failing_re_drive_a_concurrent_one_show_and_discard(setup: Setup) -> None:
    """A re-drive that fails again leaves the key parked with the new reason; a second
    re-drive of a key being re-driven is refused; `show` lists the parked changes;
    `discard` unparks the key and its later changes flow. A key is shown and taken as
    its JSON (`{"id": 7}`), or its hex."""
    bootstrap = setup.endpoints.bootstrap_servers
    extra = plugin_env(setup)
    env = setup.env(**extra)
    story = Story(setup)
    first = story.send_first(setup, ORDERS * 20)
    worker = setup.worker(**extra)
    try:
        worker.wait_assigned()
        acknowledged([worker], len(first))
        key = story.key(PARKED[0]).hex()
        key_json = f'{{"id": {PARKED[0]}}}'
        failed = dlq(env, "redrive", "--translator", "parkorders@4", "--key", key_json)
        assert failed.returncode == 1 and "Traceback" not in failed.stderr
        assert "failed again" in failed.stdout and "still broken" in failed.stdout
        assert f"key {key_json}:" in failed.stdout
        rows = {r["key"]: r for r in json.loads(dlq(env, "list", "--json").stdout)}
        assert "still broken" in rows[key]["latest_reason"]
        assert "poisoned" in rows[key]["reason"]
        # where the plugin raised, in the parked record and in the worker's log
        assert rows[key]["reason"].endswith("parking_plugin.py:40)"), rows[key]["reason"]
        lines = worker.log.read_text().splitlines()
        logged = [json.loads(line) for line in lines if line.startswith("{")]
        assert any(
            e["event"] == "parked" and "parking_plugin.py:40)" in e["reason"] for e in logged
        )
        assert rows[key]["key_json"] == key_json
        assert key_json in dlq(env, "list").stdout

        shown = dlq(env, "show", key_json, "--json")
        assert shown.returncode == 0, shown.stderr
        offsets = [r["offset"] for r in json.loads(shown.stdout)]
        assert len(offsets) == 21 and offsets == sorted(offsets)

        # two re-drives of one key at once: one is carried out, the other refused
        both = [
            dlq_in_background(env, "redrive", "--translator", "parkorders@3", "--key", key)
            for _ in range(2)
        ]
        results = [(p.wait(180), *p.communicate()) for p in both]
        assert sorted(code for code, _, _ in results) == [0, 1], results
        refused = next(out + err for code, out, err in results if code == 1)
        assert "already being re-driven" in refused

        other = story.key(PARKED[1]).hex()
        gone = dlq(env, "discard", other, "--translator", "parkorders", "--reason", "test")
        assert gone.returncode == 0, gone.stdout + gone.stderr
        assert other not in {r["key"] for r in json.loads(dlq(env, "list", "--json").stdout)}
        # the discarded key's later changes flow again
        row = story.rows[PARKED[1]]
        after = dict(row, status="shipped", tracking_number="TRK", shipped_at=row["placed_at"])
        produce(bootstrap, setup.topic, story.encode([story.change("u", row, after)]))
        wait_for(
            lambda: any(
                m.key == bytes.fromhex(other)
                for m in events_from(bootstrap, ["store.order-shipped"], setup.topic)
            ),
            60,
            "the discarded key's next event",
            [worker],
        )
    finally:
        assert worker.stop() == 0, worker.tail()


def test_on_error_fail_stops_the_worker_with_a_sentence(setup: Setup) -> None:
    bootstrap = setup.endpoints.bootstrap_servers
    extra = plugin_env(setup)
    story = Story(setup)
    produce(bootstrap, setup.topic, story.encode(story.placed_then_paid()))
    worker = setup.worker(**extra, BIZEVENTS_TRANSLATE__ON_ERROR=json.dumps({"parkorders": "fail"}))
    try:
        code = worker.process.wait(120)
    finally:
        worker.stop()
    out = worker.log.read_text()
    assert code == 1, out[-3000:]
    assert "parkorders@1 failed (translate)" in out and "on_error.parkorders" in out
    assert "poisoned tracking number" in out
    # the command ends with one sentence; the only traces are inside Faust's own JSON
    # log records of its crash (their "exception" field), as for any crash of the app
    plain = [line for line in out.splitlines() if not line.startswith("{")]
    assert plain[-1].startswith("error: the translator worker stopped: TranslatorFailedError")
    assert not any("Traceback" in line for line in plain), out[-3000:]
