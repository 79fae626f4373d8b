"""Signals and the incremental snapshots' pure parts: parsing, refusals, the window,
the ledger's progress once acknowledged, PostgreSQL snapshot visibility."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bizevents.capture.incremental import Incremental, Window, snapshot_sees, xid_precedes
from bizevents.capture.offsets import AckTracker
from bizevents.capture.signals import SignalError, new_signal, parse_signal
from bizevents.capture.state import Ledger, Pending


def test_a_signal_round_trips_as_a_row() -> None:
    """What ``bizevents capture snapshot --where`` writes is what capture reads back."""
    sent = new_signal("execute-snapshot", ("s.a", "s.b"), "id > 3")
    got = parse_signal(*sent.to_row())
    assert got == sent
    assert got.condition("s.b") == "id > 3"
    assert parse_signal("x", "pause-snapshot", None).tables == ()


@pytest.mark.parametrize(
    ("kind", "data", "fragment"),
    [
        ("drop-everything", "{}", "has type 'drop-everything'"),
        ("execute-snapshot", "{not json", "is not JSON"),
        ("execute-snapshot", "[]", "must be a JSON object"),
        ("execute-snapshot", "{}", "names no table"),
        ("execute-snapshot", '{"data-collections": ["nodot"]}', "is not a table"),
        ("execute-snapshot", '{"data-collections": ["s.a"], "type": "blocking"}', "not offered"),
        (
            "execute-snapshot",
            '{"data-collections": ["s.a"], "additional-conditions": '
            '[{"data-collection": "s.b", "filter": "x"}]}',
            "which data-collections does not",
        ),
    ],
)
def test_a_bad_signal_is_one_sentence(kind: str, data: str, fragment: str) -> None:
    with pytest.raises(SignalError) as caught:
        parse_signal("sig-1", kind, data)
    assert fragment in str(caught.value) and "sig-1" in str(caught.value)
    assert "\n" not in str(caught.value)


class _Store:
    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []

    def write(self, _producer: Any, _key: bytes, value: dict[str, Any]) -> None:
        self.written.append(json.loads(json.dumps(value)))


def test_progress_is_stored_only_once_its_chunk_is_acknowledged() -> None:
    """A chunk's rows superseded by the stream are not written; the ledger moves on in
    memory at once but is stored only after Kafka acknowledged the chunk, in order."""
    ledger = Ledger(True, [], [Pending("s.t", "auto")])
    store = _Store()
    inc = Incremental(ledger, store, b"k", 2)  # type: ignore[arg-type]
    pending = inc.next()
    assert pending is not None
    window = Window(pending, "topic", "mark", {b"1": ("1",), b"2": ("2",)}, ["2"], True)
    inc.open(window)
    assert inc.next() is None  # one window at a time
    window.supersede(b"1")
    window.supersede(None)
    closed = inc.close()
    assert list(closed.rows) == [b"2"] and closed.superseded == 1
    tracker = AckTracker()
    tx = tracker.begin(None)
    tx.produced(1)
    tracker.commit(tx, 0)
    inc.written(tx)
    inc.changed()
    inc.store_acknowledged(None)
    assert store.written == []  # not acknowledged yet
    tx.ack(None)
    inc.store_acknowledged(None)
    assert [w["queue"][0]["after"] for w in store.written] == [["2"]]
    last = Window(pending, "topic", "mark2", {}, None, False)
    inc.open(last)
    inc.close()
    assert ledger.queue == [] and ledger.tables == ["s.t"]


def test_a_window_is_superseded_while_its_chunk_is_read_and_while_its_rows_drain() -> None:
    """PostgreSQL reads and writes a chunk a slice at a time: a stream record of a key
    whose row is not fetched yet drops that row when it comes; one of a row not written
    yet drops it too; the ledger's progress is not stored while rows are still to go."""
    ledger = Ledger(True, [], [Pending("s.t", "auto")])
    store = _Store()
    inc = Incremental(ledger, store, b"k", 3)  # type: ignore[arg-type]
    pending = inc.next()
    assert pending is not None
    window = Window(pending, "topic", "mark", full=True, reading=True)
    inc.open(window)
    inc.supersede("topic", b"2")  # the stream wrote key 2 before its row was fetched
    inc.supersede("other", b"1")  # another table's key 1: not this window's
    for key in (b"1", b"2", b"3"):
        window.fetched(key, (key.decode(),))
    assert list(window.rows) == [b"1", b"3"] and window.superseded == 1
    window.reading = False
    inc.close()
    assert inc.next() is None  # its rows drain first
    inc.supersede("topic", b"3")  # the stream wrote key 3 before its row was written
    assert list(window.rows) == [b"1"] and window.superseded == 2
    inc.changed()
    inc.store_acknowledged(None)
    assert store.written == []  # progress past rows not written yet: not stored
    tracker = AckTracker()
    tx = tracker.begin(None)
    tracker.commit(tx, 0)
    inc.written(tx)
    inc.store_acknowledged(None)
    assert len(store.written) == 1 and inc.next() is pending


def test_a_conditioned_snapshot_does_not_mark_the_table_complete() -> None:
    ledger = Ledger(True, [], [Pending("s.t", "sig", "id > 3")])
    inc = Incremental(ledger, _Store(), b"k", 10)  # type: ignore[arg-type]
    pending = inc.next()
    assert pending is not None
    inc.open(Window(pending, "topic", "m", {}, None, False))
    inc.close()
    assert ledger.queue == [] and ledger.tables == []


def test_snapshot_visibility_follows_pg_current_snapshot() -> None:
    sees = snapshot_sees("100:105:100,102")
    assert sees(99) and sees(101) and sees(104)
    assert not sees(100) and not sees(102) and not sees(105) and not sees(200)
    # 32-bit wraparound: an xid just before 2**32 precedes a small one of the next epoch
    assert xid_precedes(0xFFFFFFF0, 5) and not xid_precedes(5, 0xFFFFFFF0)
    wrapped = snapshot_sees(f"{2**32 + 3}:{2**32 + 10}:")
    assert wrapped(0xFFFFFFF0) and wrapped(4) and not wrapped(11)


def test_a_resumed_snapshot_counts_this_runs_rows_apart_from_the_ledgers() -> None:
    """A snapshot resumed with 500 rows in its ledger: the progress and the done line
    count this run's rows; the ledger goes on counting them all."""
    ledger = Ledger(True, [], [Pending("s.t", "auto", after=["500"], rows=500)])
    seen: list[tuple[str, int, int]] = []
    inc = Incremental(ledger, _Store(), b"k", 2, lambda *a: seen.append(a))  # type: ignore[arg-type]
    pending = inc.next()
    assert pending is not None
    inc.open(Window(pending, "topic", "m", {b"501": ("501",), b"502": ("502",)}, ["502"], True))
    inc.close()
    inc.open(Window(pending, "topic", "m2", {b"503": ("503",)}, ["503"], False))
    inc.close()
    assert seen == [("s.t", 502, 2), ("s.t", 503, 3)]
    assert inc.run_rows[("s.t", "auto")] == 3 and pending.rows == 503
