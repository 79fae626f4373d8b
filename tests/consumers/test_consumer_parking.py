"""Issue 29, done when, for the consumer kit: per-key parking and re-drive on the real
broker (docs/parking.md, docs/consuming.md).

100 keys, 3 of them parked by a planted failure (a handler that raises on a poisoned
price until the test switches it to the fix), then 10,000 later events. No handler
call for a parked key's later events before its re-drive; after ``bizevents dlq
redrive --consumer GROUP``, every key's events handled in source order, while 1,000
more arrive. The second test does it with consumer processes: a rebalance between two
members while keys are parked, and a kill -9 of the member carrying out a (slowed)
re-drive, a third member joining.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bizevents.consumers import ConsumerFailedError, Delivery
from bizevents.devstack import Endpoints
from bizevents.plumbing.parking import ParkingBoundError
from bizevents.status import figures, scrape
from tests.consumers.parking_consumer import POISON
from tests.consumers.test_consumer import Kit, PriceSet

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
KEYS = [f"k{n:03d}" for n in range(100)]
PARKED = {"k007", "k042", "k077"}
LATER = 100  # later events per key: 10,000 in all
MORE = 10  # per key, arriving during the re-drive: 1,000 in all


def send(kit: Kit, seqs: Iterable[int]) -> int:
    """Every key's events of ``seqs``, in order; the first event of a parked key is
    poisoned. How many were sent."""
    sent = 0
    for seq in seqs:
        for sku in KEYS:
            price = POISON if seq == 1 and sku in PARKED else Decimal("1.50")
            kit.send(kit.event(sku, seq, f"{sku}/{seq}", price=price), sku)
            sent += 1
    kit.flush()
    return sent


def poisoned_by_price(handled: list[int]) -> Callable[[Delivery[PriceSet]], None]:
    """A handler that fails on a poisoned price and notes each other event's sequence."""

    def handler(d: Delivery[PriceSet]) -> None:
        if d.event.price == POISON:
            raise ValueError("poisoned")
        handled.append(d.event.seq)

    return handler


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.1)
    return value


def first_seen(handled: Iterable[tuple[str, int, str]]) -> dict[str, list[int]]:
    """Each key's handled sequence numbers, each event once (its first handling: a
    repeat after a crash has the same event id and never counts twice)."""
    out: dict[str, list[int]] = {sku: [] for sku in KEYS}
    seen: set[str] = set()
    for sku, seq, event_id in handled:
        if event_id not in seen:
            seen.add(event_id)
            out[sku].append(seq)
    return out


def cli_env(endpoints: Endpoints) -> dict[str, str]:
    return {
        **os.environ,
        "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": endpoints.bootstrap_servers,
        "BIZEVENTS_REGISTRY__URL": endpoints.registry_url,
    }


def dlq_run(endpoints: Endpoints, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bizevents", "dlq", *args],
        env=cli_env(endpoints),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def dlq(endpoints: Endpoints, *args: str) -> Any:
    done = dlq_run(endpoints, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def dlq_in_background(endpoints: Endpoints, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bizevents", "dlq", *args],
        env=cli_env(endpoints),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def check_parked_list(rows: list[dict[str, Any]], group: str, topic: str) -> None:
    assert sorted(bytes.fromhex(r["key"]).decode() for r in rows) == sorted(PARKED)
    for row in rows:
        assert (row["translator"], row["topic"]) == (group, topic)
        assert row["parked"] >= 1 + LATER  # more only if a rebalance parked one twice
        assert row["stage"] == "consume-handler"
        assert "poisoned price" in row["reason"]


def test_parked_keys_wait_and_are_re_driven_in_order(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    kit = Kit(bizevents_stack, unique_topic("prices"), partitions=4)
    group = unique_topic("group")
    total = send(kit, range(1, 2 + LATER))
    fixed = threading.Event()
    handled: list[tuple[str, int, str]] = []

    def handler(d: Delivery[PriceSet]) -> None:
        if d.event.price == POISON and not fixed.is_set():
            raise ValueError(f"{d.event.sku} has a poisoned price")
        handled.append((d.event.sku, d.event.seq, d.event_id))

    consumer = kit.consumer(handler, group, metrics_port=0)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(consumer.run())
        except BaseException as exc:  # shown by the assertions below
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        stats = consumer.stats
        read = lambda: stats.delivered + stats.parked + stats.dead_lettered  # noqa: E731
        wait_for(lambda: read() >= total or failed, 90, "all read")
        assert not failed, failed
        assert stats.parked == len(PARKED) * (1 + LATER)
        assert {sku for sku, _, _ in handled} == set(KEYS) - PARKED  # not one parked call
        for sku, seqs in first_seen(handled).items():
            assert seqs == ([] if sku in PARKED else list(range(1, 2 + LATER))), sku
        listed = dlq(bizevents_stack, "list", "--consumer", group, "--json")
        check_parked_list(listed, group, kit.topic)
        # its metrics endpoint, as `bizevents status --url` reads it
        assert consumer.metrics_url is not None
        scraped = scrape([consumer.metrics_url])
        assert figures(scraped, scraped, 1.0)["consumers"][group] == {
            **{f"{k}_per_s": 0.0 for k in ("delivered", "dead_lettered", "parked", "redriven")},
            "delivered": stats.delivered,
            "dead_lettered": 0,
            "parked": len(PARKED) * (1 + LATER),
            "parked_keys": len(PARKED),
            "redriven": 0,
        }
        one = listed[0]
        shown = dlq(bizevents_stack, "show", one["key"], "--consumer", group, "--json")
        assert len(shown) == 1 + LATER
        assert [r["stage"] for r in shown[:2]] == ["consume-handler", "parked"]

        # a re-drive before the fix fails again: the key stays parked, with the new reason
        again = dlq_run(bizevents_stack, "redrive", "--consumer", group, "--key", one["key"])
        assert again.returncode == 1, again.stdout + again.stderr
        assert "failed again at offset" in again.stdout and "Traceback" not in again.stderr
        ref = (group, kit.topic, one["partition"], bytes.fromhex(one["key"]))
        assert len(consumer.parking.parked) == len(PARKED)
        assert consumer.parking.parked[ref].latest_reason.endswith("poisoned price")

        fixed.set()  # the fix deployed: the handler no longer raises
        redrive = dlq_in_background(bizevents_stack, "redrive", "--consumer", group, "--all")
        total += send(kit, range(2 + LATER, 2 + LATER + MORE))  # live events meanwhile
        out, err = redrive.communicate(timeout=120)
        assert redrive.returncode == 0, err
        assert out.count("done:") == len(PARKED), out

        want = list(range(1, 2 + LATER + MORE))
        wait_for(lambda: all(s == want for s in first_seen(handled).values()), 60, "all handled")
        time.sleep(0.5)  # anything more that would (wrongly) arrive
        assert not failed, failed
        for sku, seqs in first_seen(handled).items():
            assert seqs == want, sku
        assert len(handled) == len(KEYS) * len(want)  # in one process: not one repeat
        # every parked event re-driven once (those of the 1,000 that came before the
        # re-drive's unpark were parked too)
        assert stats.redriven == stats.parked >= len(PARKED) * (1 + LATER)
        assert consumer.parking.parked == {}
        scraped = scrape([consumer.metrics_url])
        after = figures(scraped, scraped, 1.0)["consumers"][group]
        assert (after["parked_keys"], after["redriven"]) == (0, stats.redriven)
    finally:
        consumer.stop()
        thread.join(30)


class Member:
    """A consumer process of the test's group (tests/consumers/parking_consumer.py)."""

    def __init__(self, kit: Kit, group: str, tmp: Path, name: str, *options: str) -> None:
        self.stderr = tmp / f"{name}.err"
        with self.stderr.open("w") as err:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.consumers.parking_consumer",
                    kit.endpoints.bootstrap_servers,
                    kit.endpoints.registry_url,
                    kit.topic,
                    group,
                    str(tmp / "handled.log"),
                    *options,
                ],
                stdout=err,  # the kit's log (structlog prints to stdout unless configured)
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env={**os.environ, "BIZEVENTS_LOG_FORMAT": "json"},
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def restored(self) -> int:
        """How many times it restored the parked keys (once per assignment)."""
        return self.stderr.read_text().count("parked keys restored")

    def alive(self) -> None:
        assert self.process.poll() is None, self.stderr.read_text()[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def log_lines(tmp: Path) -> list[tuple[int, str, int, str]]:
    path = tmp / "handled.log"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        pid, sku, seq, event_id = line.split()
        out.append((int(pid), sku, int(seq), event_id))
    return out


def handled_of(tmp: Path) -> list[tuple[str, int, str]]:
    return [(sku, seq, eid) for _, sku, seq, eid in log_lines(tmp)]


def test_parking_survives_a_rebalance_and_a_kill_9_mid_re_drive(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str], tmp_path: Path
) -> None:
    kit = Kit(bizevents_stack, unique_topic("prices"), partitions=4)
    group = unique_topic("group")
    members: list[Member] = []

    def member(name: str, *options: str) -> Member:
        made = Member(kit, group, tmp_path, name, *options)
        members.append(made)
        return made

    try:
        # two buggy members, the second joining once the first has parked the keys
        send(kit, range(1, 22))
        first = member("a")
        wait_for(lambda: len(handled_of(tmp_path)) >= 97 * 21, 60, "a's first events")
        second = member("b")
        wait_for(lambda: second.restored() >= 1, 60, "b assigned")
        send(kit, range(22, 2 + LATER))
        every = [list(range(1, 2 + LATER)) for _ in KEYS]
        want_unparked = {sku: s for sku, s in zip(KEYS, every, strict=True) if sku not in PARKED}

        def unparked_done() -> bool:
            seen = first_seen(handled_of(tmp_path))
            return all(seen[sku] == s for sku, s in want_unparked.items())

        wait_for(unparked_done, 90, "every unparked key handled")
        time.sleep(1)  # anything of a parked key that would (wrongly) be handled
        assert not {sku for sku, _, _ in handled_of(tmp_path)} & PARKED
        assert first.restored() >= 2  # the rebalance reached the first member too
        check_parked_list(
            dlq(bizevents_stack, "list", "--consumer", group, "--json"), group, kit.topic
        )

        # the fix deployed as two members, slowed on the parked keys, then a re-drive
        first.stop()
        second.stop()
        slow = ",".join(sorted(PARKED))
        fixed = [
            member("c", "--fixed", "--slow-keys", slow),
            member("d", "--fixed", "--slow-keys", slow),
        ]
        wait_for(lambda: all(m.restored() for m in fixed), 60, "c and d assigned")
        before = len(log_lines(tmp_path))
        redrive = dlq_in_background(
            bizevents_stack, "redrive", "--consumer", group, "--all", "--timeout", "150"
        )

        def redriving() -> int | None:
            """A member that has re-driven 10 parked events (the other may re-drive too)."""
            lines = [pid for pid, sku, _, _ in log_lines(tmp_path)[before:] if sku in PARKED]
            return next((pid for pid in lines if lines.count(pid) >= 10), None)

        pid = wait_for(redriving, 60, "a re-drive under way")
        victim = next(m for m in fixed if m.pid == pid)
        victim.process.send_signal(signal.SIGKILL)  # kill -9 mid-re-drive
        victim.process.wait(10)
        third = member("e", "--fixed")  # a third member joins
        send(kit, range(2 + LATER, 2 + LATER + MORE))  # live events meanwhile
        out, err = redrive.communicate(timeout=170)
        assert redrive.returncode == 0, err + "".join(m.stderr.read_text()[-2000:] for m in members)
        assert out.count("done:") == len(PARKED), out

        want = list(range(1, 2 + LATER + MORE))
        wait_for(
            lambda: all(s == want for s in first_seen(handled_of(tmp_path)).values()),
            90,
            "every key handled in order",
        )
        time.sleep(0.5)
        for sku, seqs in first_seen(handled_of(tmp_path)).items():
            assert seqs == want, sku
        # the killed member had re-driven part of a key: it was re-driven again whole
        killed = [seq for p, sku, seq, _ in log_lines(tmp_path) if p == pid and sku in PARKED]
        assert 10 <= len(killed) < len(PARKED) * len(want)
        assert dlq(bizevents_stack, "list", "--consumer", group, "--json") == []
        for m in [*fixed, third]:
            if m is not victim:
                m.alive()  # nothing stopped them: no record made them fail
    finally:
        for m in members:
            m.stop()


def test_past_the_bound_the_consumer_stops_with_a_sentence(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    """Parking never grows without limit: one key more than ``max_parked_keys`` stops
    the consumer with one sentence (and commits nothing of that batch)."""
    kit = Kit(bizevents_stack, unique_topic("prices"), partitions=1)
    for sku in ("a", "b"):
        kit.send(kit.event(sku, 1, f"{sku}/1", price=POISON), sku)
    kit.flush()

    def handler(d: Delivery[PriceSet]) -> None:
        raise ValueError("poisoned")

    group = unique_topic("group")
    consumer = kit.consumer(handler, group, max_parked_keys=1)
    with pytest.raises(ParkingBoundError, match=r"consumer group .* cannot park one more key"):
        asyncio.run(asyncio.wait_for(consumer.run(), 60))
    assert consumer.stats.parked == 1
    assert kit.committed(group) == 0


def test_discard_unparks_a_key_and_its_later_events_are_handled(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    """``dlq discard --consumer``: the parked events stay on the dead-letter topic, never
    reach the handler; the key's next events do."""
    kit = Kit(bizevents_stack, unique_topic("prices"), partitions=1)
    kit.send(kit.event("a", 1, "a/1", price=POISON), "a")
    kit.send(kit.event("a", 2, "a/2"), "a")
    kit.flush()
    handled: list[int] = []
    handler = poisoned_by_price(handled)

    group = unique_topic("group")
    consumer = kit.consumer(handler, group)
    thread = threading.Thread(target=lambda: asyncio.run(consumer.run()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: consumer.stats.parked >= 2, 60, "a parked")
        key = b"a".hex()
        gone = dlq_run(bizevents_stack, "discard", key, "--consumer", group, "--reason", "test")
        assert gone.returncode == 0, gone.stderr
        assert gone.stdout.startswith("done:") and "discarded 2 parked events" in gone.stdout
        kit.send(kit.event("a", 3, "a/3"), "a")
        kit.flush()
        wait_for(lambda: handled, 60, "a's next event handled")
        time.sleep(0.5)
        assert handled == [3]
        assert dlq(bizevents_stack, "list", "--consumer", group, "--json") == []
    finally:
        consumer.stop()
        thread.join(30)


def test_on_error_fail_stops_the_consumer_with_a_sentence(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    kit = Kit(bizevents_stack, unique_topic("prices"), partitions=1)
    kit.send(kit.event("a", 1, "a/1"), "a")
    kit.send(kit.event("a", 2, "a/2", price=POISON), "a")
    kit.flush()
    handled: list[int] = []
    handler = poisoned_by_price(handled)

    group = unique_topic("group")
    consumer = kit.consumer(handler, group, on_error="fail")
    with pytest.raises(ConsumerFailedError, match=r"stops at .* offset 1 \(consume-handler\)"):
        asyncio.run(asyncio.wait_for(consumer.run(), 60))
    assert handled == [1]
    assert kit.committed(group) == 0  # nothing of the batch: a restart reads it again
