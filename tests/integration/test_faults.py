"""The fault suite's short mode (``bench/faults.py --short``): kills, a paused broker and a
PostgreSQL restart under the store's load, counted against the database's history.

It starts its own stack (it pauses the broker and restarts PostgreSQL, which would
disturb the shared one) and runs as a subprocess, as a user would run it.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _faults() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_faults", REPO / "bench" / "faults.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


faults = _faults()
RESULT = re.compile(
    r"^lost=(\d+) duplicated_ids=(\d+) reordered=(\d+) "
    r"differing_duplicates=(\d+) unexpected_exits=(\d+) applied_twice=(\d+)$",
    re.MULTILINE,
)
NAMES = (
    "lost",
    "duplicated_ids",
    "reordered",
    "differing_duplicates",
    "unexpected_exits",
    "applied_twice",
)


def result_of(output: str) -> dict[str, int]:
    found = RESULT.search(output)
    assert found is not None, f"no result line in:\n{output[-4000:]}"
    return dict(zip(NAMES, map(int, found.groups()), strict=True))


def test_result_line_is_parsed() -> None:
    line = (
        "lost=2 duplicated_ids=31 reordered=1 differing_duplicates=0 unexpected_exits=1 "
        "applied_twice=4"
    )
    assert result_of(f"noise\n{line}\n  details") == {
        "lost": 2,
        "duplicated_ids": 31,
        "reordered": 1,
        "differing_duplicates": 0,
        "unexpected_exits": 1,
        "applied_twice": 4,
    }
    # the line the suite prints is the line this parses
    assert result_of(faults.Report(reordered=1).line())["reordered"] == 1


def test_order_breaks_allow_a_resent_suffix_and_catch_a_new_record_out_of_order() -> None:
    resent = [(0, "a"), (1, "b"), (2, "c"), (1, "b"), (2, "c"), (3, "d")]
    assert faults.order_breaks({"k": resent}) == []
    swapped = [(0, "a"), (2, "c"), (1, "b")]
    assert faults.order_breaks({"k": swapped}) == ["k: commit #1 after #2"]
    # each key on its own: another key's later commit is no break
    assert faults.order_breaks({"k": [(5, "x")], "j": [(1, "y")]}) == []


def test_report_fails_on_loss_reorder_differing_copies_or_a_crash() -> None:
    assert faults.Report(duplicated_ids=3, same_content_duplicates=3).ok()
    for field in (
        "tech_missing",
        "events_missing",
        "replay_missing",
        "tx_missing",
        "reordered",
        "differing_duplicates",
        "events_unexpected",
        "unexpected_exits",
        "tx_wrong",
        "unconfirmed",
    ):
        assert not faults.Report(**{field: 1}).ok(), field
    # what the consumer applied: an event never applied is lost, one applied twice fails
    never_applied = faults.Report(consumer=faults.Applied(missing=1))
    assert never_applied.lost == 1
    assert not never_applied.ok()
    assert not faults.Report(consumer=faults.Applied(applied_twice=1)).ok()


def test_gtid_sequence_of_a_domain() -> None:
    assert faults.gtid_seq("0-1-42") == 42
    assert faults.gtid_seq("1-1-7,0-1-1529") == 1529
    assert faults.gtid_seq("1-1-7", domain=1) == 7
    assert faults.gtid_seq(None) == -1
    assert faults.gtid_seq("") == -1


def test_by_partition_routes_what_orders3_reads_by_its_declared_keys(tmp_path: Path) -> None:
    """``--by-partition``: capture routes orders@3's tables by the keys it declares, as
    the members that own partitions need; without it capture routes nothing."""
    routed = faults.Faults(faults.SHORT, 1, tmp_path, by_partition=True).routing()
    assert routed == {"store.orders": ("id",), "store.order_items": ("order_id",)}
    assert faults.Faults(faults.SHORT, 1, tmp_path).routing() == {}


def test_a_by_partition_run_fails_when_the_exchange_was_bypassed() -> None:
    """A third of orders@3's transactions across partitions, and records forwarded,
    or the run did not test the exchange."""
    assert faults.exchanged((40, 100), 120) is None
    assert "34 of 105" in str(faults.exchanged((34, 105), 120))
    assert faults.exchanged((0, 0), 0) is not None
    assert "nothing was forwarded" in str(faults.exchanged((40, 100), 0))


class _Cursor:
    """A DB-API cursor over fixed rows, one list per ``execute`` in call order."""

    def __init__(self, results: list[list[tuple[object, ...]]]) -> None:
        self.results = results
        self.rows: list[tuple[object, ...]] = []

    def __enter__(self) -> _Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, statement: str, params: object = None) -> None:
        self.rows = self.results.pop(0)

    def fetchall(self) -> list[tuple[object, ...]]:
        return self.rows


class _Conn:
    def __init__(self, applied: list[tuple[object, ...]], repeats: list[tuple[object, ...]]):
        self.results = [applied, repeats]

    def cursor(self) -> _Cursor:
        return _Cursor(self.results)


def _applied(
    event_id: str, version: int, offset: int, digest: str = "d", key: bytes = b"k"
) -> tuple[object, ...]:
    # event_id, version, replay, translator, topic, key, source topic/partition/offset, digest
    return (event_id, version, False, f"orders@{version}", "t", key, "src", 0, offset, digest)


def test_consumer_check_counts_what_was_applied() -> None:
    tech_index = {("src", 0, n): n for n in range(10)}
    published = {"a": object(), "b": object(), "c": object()}
    good = faults.check_applied(
        _Conn(
            # a, b by orders@2, then orders@3's corrections of both, in commit order
            [
                *(_applied("a", 2, 1), _applied("b", 2, 2)),
                *(_applied("a", 3, 1), _applied("b", 3, 2)),
                _applied("c", 2, 3),
            ],
            [("a", 2, False, "d")],  # a re-delivery of a, skipped, same content
        ),
        "s",
        published,
        tech_index,
        faults.order_breaks,
    )
    assert (good.missing, good.applied_twice, good.reordered, good.differing_repeats) == (
        0,
        0,
        0,
        0,
    )
    assert good.corrections == 2
    bad = faults.check_applied(
        _Conn(
            # b before a (one translator, one key), a applied twice at one rank, c never
            [_applied("b", 2, 2), _applied("a", 2, 1), _applied("a", 2, 1)],
            [("b", 2, False, "other")],  # a repeat of b with other content
        ),
        "s",
        published,
        tech_index,
        faults.order_breaks,
    )
    assert (bad.missing, bad.applied_twice, bad.reordered, bad.differing_repeats) == (1, 1, 1, 1)


def _run(*args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "faults.py"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=840,
        check=False,
    )
    return run, run.stdout + run.stderr[-6000:]


def _assert_clean(run: subprocess.CompletedProcess[str], output: str) -> None:
    result = result_of(run.stdout)
    assert result["lost"] == 0, output
    assert result["reordered"] == 0, output
    assert result["differing_duplicates"] == 0, output
    assert result["unexpected_exits"] == 0, output
    assert result["applied_twice"] == 0, output
    assert run.returncode == 0, output


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_short_fault_suite_loses_nothing_and_keeps_order() -> None:
    """A few SIGKILLs of capture, the worker, the transaction workers, the consumer-kit
    consumer and a replay, a member joining and leaving right after long transactions,
    a broker pause and a fast restart of PostgreSQL: no committed change and no
    business event is lost, no key's changes or events come out of commit order,
    duplicates carry the same id and content, the consumer applied each event once;
    no component exits on its own."""
    run, output = _run("--short", "--seed", "3")
    _assert_clean(run, output)
    assert "2 long transactions (2000 items each), 0 placed wrong" in run.stdout, output


@pytest.mark.integration
@pytest.mark.mysql
@pytest.mark.timeout(900)
def test_short_fault_suite_on_mariadb() -> None:
    """The same on MariaDB capture, its load squeezed into 25 s: kills of capture, a
    MariaDB restart and a KILL of capture's binlog connection among the others."""
    run, output = _run("--short", "--source", "mysql", "--seed", "3", "--seconds", "25")
    _assert_clean(run, output)
    assert "mysql_restarts=1 binlog_kills=1" in run.stdout, output
