"""Signals and the incremental snapshots' pure parts: parsing, refusals, the window,
the ledger's progress once acknowledged, PostgreSQL snapshot visibility."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bizevents.capture.core.incremental import Incremental, Window, snapshot_sees, xid_precedes
from bizevents.capture.core.offsets import AckTracker
from bizevents.capture.core.signals import (
    MAX_SIGNAL_BYTES,
    Signal,
    SignalError,
    SignalTopic,
    new_signal,
    parse_signal,
    read_signal,
    row_key,
)
from bizevents.capture.core.state import SIGNAL_ROWS_KEPT, Ledger, Pending


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


def test_a_condition_is_kept_as_data_and_sql_in_it_is_refused() -> None:
    """A signal's filter is parsed (its text is the condition's own); one holding SQL
    is refused with a sentence naming the signal."""
    data = (
        '{"data-collections": ["s.t"], "additional-conditions": '
        '[{"data-collection": "s.t", "filter": "%s"}]}'
    )
    assert parse_signal("a", "execute-snapshot", data % "ID>3 and note!='x'").conditions == (
        ("s.t", "ID > 3 AND note <> 'x'"),
    )
    for where, reason in (
        ("true); DROP TABLE s.victim; SELECT (1", "a semicolon"),
        ("id <= 3 AND pg_sleep(5)::text = ''", "a cast (::)"),
        ("id <= 3 AND SLEEP(5) = 0", "calls a function"),
    ):
        with pytest.raises(SignalError) as caught:
            parse_signal("b", "execute-snapshot", data % where)
        assert str(caught.value).startswith("signal 'b': the condition") and reason in str(
            caught.value
        )
    with pytest.raises(ValueError, match="a semicolon"):
        new_signal("execute-snapshot", ("s.t",), "true); DROP TABLE s.victim; SELECT (1")


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ("[" * 1024 + "]" * 1024, "nests deeper than 16 levels"),
        ('{"a":' * 5000 + "1" + "}" * 5000, "nests deeper than 16 levels"),
        ('{"a": "' + "[" * 5000 + '"}', "names no table"),  # brackets in a string: text
        ("x" * (MAX_SIGNAL_BYTES + 1), "is larger than"),
        (b"\xff\xfe", "is not UTF-8"),
        ("1" * 5000, "is not JSON"),
    ],
)
def test_a_signal_is_read_within_bounds(data: str | bytes, fragment: str) -> None:
    """The issue's 1024-deep array never reaches json.loads' recursion: one sentence."""
    got = read_signal("deep", "execute-snapshot", data)
    assert isinstance(got, SignalError) and fragment in str(got), got


def test_a_topic_record_is_read_within_bounds() -> None:
    topic = SignalTopic({}, "t.capture.signals", "t")
    deep = topic.read(b"k", b"[" * 5000 + b"]" * 5000, 7)
    assert str(deep) == "the record at offset 7 of t.capture.signals nests deeper than 16 levels"
    assert isinstance(topic.read(None, None, 8), SignalError)
    good = topic.read(b"id-1", b'{"type": "stop-snapshot", "data": "{}"}', 9)
    assert good == Signal("id-1", "stop-snapshot")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.binary(max_size=60)), st.binary(max_size=3000))
def test_any_record_is_a_signal_or_one_sentence(key: bytes | None, value: bytes) -> None:
    got = SignalTopic({}, "t.capture.signals", "t").read(key, value, 1)
    assert isinstance(got, Signal | SignalError)
    assert isinstance(got, Signal) or "\n" not in str(got)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.none(), st.text(max_size=60), st.binary(max_size=60), st.integers()),
    st.one_of(st.sampled_from(["execute-snapshot", "stop-snapshot"]), st.text(max_size=40)),
    st.one_of(
        st.none(),
        st.text(max_size=500),
        st.binary(max_size=500),
        st.integers(),
        st.recursive(
            st.none() | st.text(max_size=10) | st.integers(),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=20), inner, max_size=3)
            ),
            max_leaves=10,
        ).map(json.dumps),
    ),
)
def test_any_row_is_a_signal_or_one_sentence(id_: Any, kind: str, data: Any) -> None:
    got = read_signal(id_, kind, data)
    assert isinstance(got, Signal | SignalError)


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


def test_a_new_ledger_keeps_the_signals_carried_out() -> None:
    """A new slot or ``snapshot = "never"`` starts a new ledger: it keeps the signal
    topic's offset and the signal table's rows done (the last 1,000), through JSON."""
    stored = Ledger(True, ["s.a"], [Pending("s.a", "x")], "0/1", signal_offset=7)
    for n in range(SIGNAL_ROWS_KEPT + 5):
        assert not stored.signal_row_done(f"row-{n}")
    assert stored.signal_row_done(f"row-{SIGNAL_ROWS_KEPT + 4}")
    assert not stored.signal_row_done("row-0")  # forgotten: past the bound
    again = Ledger.from_json(stored.to_json())
    fresh = Ledger(True, ["s.a"]).signals_from(again)
    assert fresh.signal_offset == 7 and fresh.queue == []
    assert len(fresh.signal_rows) == SIGNAL_ROWS_KEPT and fresh.signal_row_done("row-0")
    assert Ledger(True, []).signals_from(None).signal_offset is None


def test_a_signal_rows_id_is_kept_bounded_in_the_ledger() -> None:
    """A short row id is kept as it is; a long one as its digest, so no row swells the ledger."""
    assert row_key(42) == "42"
    long_id = "x" * 5000
    kept = row_key(long_id)
    assert len(kept) < 100 and kept == row_key(long_id) and kept != row_key("y" * 5000)


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
