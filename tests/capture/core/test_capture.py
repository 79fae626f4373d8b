"""The capture core's own logic, whatever the source, with a fake producer: stops, the
conversion error's three ways, a snapshot row written or dead-lettered, back-pressure,
the signals carried out (or refused with a sentence), and the run's reconnect loop.
The same against real databases: tests/capture/test_capture_signal_*.py and each
source's stream tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import structlog

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.capture import (
    HEADER_CAPTURE_FORMAT,
    HEADER_CAPTURE_TABLE,
    CaptureCore,
    CaptureEndpoints,
    Session,
    Stop,
    chunk_condition,
)
from bizevents.capture.core.filters import FilterError
from bizevents.capture.core.incremental import Incremental
from bizevents.capture.core.signals import Signal, SignalError
from bizevents.capture.core.state import Pending
from bizevents.capture.exceptions import CaptureError, ValueConversionError
from bizevents.contracts.business import HEADER_SOURCE_POSITION
from bizevents.plumbing.errors import TransientError


class _Producer:
    """Records what is produced; each ``poll`` acknowledges the oldest record waiting."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None, dict[str, Any]]] = []
        self.waiting: list[Any] = []
        self.polls = 0

    def produce(self, topic: str, value: Any, key: Any, **kwargs: Any) -> None:
        self.records.append((topic, key, value, kwargs))
        if kwargs.get("on_delivery") is not None:
            self.waiting.append(kwargs["on_delivery"])

    def poll(self, _timeout: float = 0) -> int:
        self.polls += 1
        if not self.waiting:
            return 0
        self.waiting.pop(0)(None, None)
        return 1

    def flush(self, _timeout: float = 0) -> int:
        return 0

    def __len__(self) -> int:
        return len(self.waiting)


class _Codec:
    topic = "shop.public.t"

    def __init__(self, fails: bool = False) -> None:
        self.fails = fails

    def row(self, row: Any) -> bytes:
        if self.fails:
            raise ValueConversionError("public.t", "v", "numeric", "NaN", "not a number")
        return b"R" + str(row).encode()

    def key(self, row: Any) -> bytes:
        return b"K" + str(row[0]).encode()

    def envelope(self, op: str, before: Any, after: Any, source: bytes, ts: bytes) -> bytes:
        return b"|".join((op.encode(), after or b"-", source, ts))


class _Core(CaptureCore):
    def snapshot_raw(self, codec: Any, row: Any) -> tuple[bytes, str]:
        return json.dumps(list(row)).encode(), "test-json"

    def checked_condition(self, table: str, where: str) -> str:
        if "nope" in where:
            raise FilterError("column nope is not in the table")
        return where


def _core(tmp_path: Path, **config: Any) -> tuple[_Core, _Producer]:
    cfg = CaptureConfig(server="shop", tables=("public.t", "public.u"), **config)
    core = _Core(cfg, CaptureEndpoints("postgresql://u@h/db", {}, {}, tmp_path))
    producer = _Producer()
    core._session = Session(producer=producer, admin=None, registrar=None, store=None)  # type: ignore[arg-type]
    return core, producer


def _failure() -> CaptureError:
    return ValueConversionError("public.t", "v", "numeric", "NaN", "not a number")


def test_a_second_stop_gives_up_waiting(tmp_path: Path) -> None:
    core, _ = _core(tmp_path)
    core.request_stop()
    assert core.stopping and not core.aborting
    core.request_stop()
    assert core.aborting


def test_conversion_failed_fail_raises_the_error(tmp_path: Path) -> None:
    core, producer = _core(tmp_path, on_conversion_error="fail")
    exc = _failure()
    with pytest.raises(ValueConversionError):
        core.conversion_failed("public.t", b"raw", "0/16B3748", "pgoutput", exc, producer.produce)
    assert not producer.records and not core.stats.conversion_errors


def test_conversion_failed_skip_counts_and_writes_nothing(tmp_path: Path) -> None:
    core, producer = _core(tmp_path, on_conversion_error="skip")
    sent = core.conversion_failed(
        "public.t", b"raw", "0/1", "pgoutput", _failure(), _send(producer)
    )
    assert sent == 0 and not producer.records
    assert core.stats.conversion_errors == {("public.t", "skip"): 1}


@pytest.mark.parametrize("mode", ["dead-letter", "park"])
def test_conversion_failed_dead_letters_with_where_and_what(tmp_path: Path, mode: str) -> None:
    """``park`` dead-letters what cannot park (a snapshot row, a MySQL row): one record
    to the dead-letter topic, the raw bytes, the table, position and format."""
    core, producer = _core(tmp_path, on_conversion_error=mode)
    sent = core.conversion_failed(
        "public.t", b"raw", "0/2A", "pgoutput", _failure(), _send(producer)
    )
    assert sent == 1
    ((topic, key, value, kwargs),) = producer.records
    assert (topic, key, value) == (core.config.dlq_topic, None, b"raw")
    headers = dict(kwargs["headers"])
    assert headers[HEADER_CAPTURE_TABLE] == b"public.t"
    assert headers[HEADER_CAPTURE_FORMAT] == b"pgoutput"
    assert headers[HEADER_SOURCE_POSITION] == b"0/2A"
    assert core.stats.conversion_errors == {("public.t", "dead-letter"): 1}


def _send(producer: _Producer) -> Any:
    def send(topic: str, key: bytes | None, value: bytes, headers: Any = None) -> None:
        producer.produce(topic, value, key, headers=headers)

    return send


def test_a_snapshot_row_is_written_under_its_transaction_keyed_here(tmp_path: Path) -> None:
    core, producer = _core(tmp_path)
    tx = core.session.tracker.begin(None)
    assert core.snapshot_row(_Codec(), "public.t", None, (1, "a"), b"SRC", b"TS", tx)
    ((topic, key, value, _),) = producer.records
    assert (topic, key) == ("shop.public.t", b"K1")
    assert value == b"r|R(1, 'a')|SRC|TS"
    assert tx.pending == 1 and core.session.tracker.in_flight == 1


def test_a_snapshot_row_that_does_not_convert_is_dead_lettered_as_it_was(tmp_path: Path) -> None:
    """Its original values (the source's ``snapshot_raw``), under its transaction."""
    core, producer = _core(tmp_path, on_conversion_error="park")
    tx = core.session.tracker.begin(None)
    assert not core.snapshot_row(_Codec(fails=True), "public.t", b"K1", (1, "a"), b"S", b"T", tx)
    ((topic, key, value, kwargs),) = producer.records
    assert (topic, key, value) == (core.config.dlq_topic, None, b'[1, "a"]')
    assert dict(kwargs["headers"])[HEADER_CAPTURE_FORMAT] == b"test-json"
    assert dict(kwargs["headers"])[HEADER_SOURCE_POSITION] == b"snapshot"
    assert tx.pending == 1


def test_backpressure_waits_from_the_bound_down_to_three_quarters(tmp_path: Path) -> None:
    core, producer = _core(tmp_path, max_in_flight=8)
    tracker = core.session.tracker
    tx = tracker.begin(None)
    for _ in range(7):
        core.snapshot_row(_Codec(), "public.t", b"k", (1,), b"S", b"T", tx)
    core.backpressure()
    assert producer.polls == 0 and core.stats.backpressure_pauses == 0  # below the bound
    core.snapshot_row(_Codec(), "public.t", b"k", (1,), b"S", b"T", tx)
    kept: list[int] = []
    core.backpressure(keepalive=lambda: kept.append(tracker.in_flight))
    assert tracker.in_flight == 6 and core.stats.backpressure_pauses == 1
    assert kept == [7, 6]


def test_wait_acknowledged_gives_up_on_a_second_stop(tmp_path: Path) -> None:
    core, producer = _core(tmp_path)
    tracker = core.session.tracker
    tracker.begin(None).produced(1)  # never acknowledged: nothing was handed over
    core.aborting = True
    with pytest.raises(Stop):
        core.wait_acknowledged()
    assert producer.polls == 1


def test_chunk_condition_is_checked_against_the_columns_now() -> None:
    assert chunk_condition(Pending("public.t", "s1"), ["id"]) is None
    assert chunk_condition(Pending("public.t", "s1", "id > 3"), ["id", "v"]) is not None
    with pytest.raises(FilterError):
        chunk_condition(Pending("public.t", "s1", "gone > 3"), ["id", "v"])


def _with_snapshots(tmp_path: Path) -> _Core:
    core, _ = _core(tmp_path)
    core.incremental = Incremental(core.ledger, None, b"k", 100)  # type: ignore[arg-type]
    return core


def test_a_snapshot_signal_queues_its_tables_with_their_checked_conditions(tmp_path: Path) -> None:
    core = _with_snapshots(tmp_path)
    sig = Signal("s1", "execute-snapshot", ("public.t", "public.u"), (("public.t", "id > 3"),))
    core.on_signal(sig)
    queue = [(p.table, p.id, p.where) for p in core.ledger.queue]
    assert queue == [("public.t", "s1", "id > 3"), ("public.u", "s1", None)]
    assert core.stats.incremental_snapshots == 2 and core.stats.signals_refused == 0


@pytest.mark.parametrize(
    ("signal", "sentence"),
    [
        (
            Signal("s2", "execute-snapshot", ("public.x",)),
            "snapshot signal 's2': table public.x is not captured here "
            "(captured: public.t, public.u)",
        ),
        (
            Signal("s3", "execute-snapshot", ("public.t",)),
            "snapshot signal 's3': table public.t is already being snapshotted (signal 's1'); "
            "stop that one first or let it end",
        ),
        (
            Signal("s4", "execute-snapshot", ("public.u",), (("public.u", "nope = 1"),)),
            "snapshot signal 's4': the condition 'nope = 1' cannot be used on public.u: "
            "column nope is not in the table",
        ),
        (
            Signal("s5", "stop-snapshot", ("public.u",)),
            "signal 's5': no snapshot under way to stop",
        ),
        (
            Signal("s6", "resume-snapshot", ("public.u",)),
            "signal 's6': no snapshot under way to resume",
        ),
    ],
)
def test_a_signal_that_cannot_be_carried_out_is_refused_with_one_sentence(
    tmp_path: Path, signal: Signal, sentence: str
) -> None:
    core = _with_snapshots(tmp_path)
    core.on_signal(Signal("s1", "execute-snapshot", ("public.t",)))
    with structlog.testing.capture_logs() as logs:
        core.on_signal(signal)
    assert core.stats.signals_refused == 1
    assert [p.id for p in core.ledger.queue] == ["s1"]
    assert [e["event"] for e in logs] == [f"signal refused: {sentence}"]


def test_pause_resume_and_stop_act_on_the_named_snapshots(tmp_path: Path) -> None:
    core = _with_snapshots(tmp_path)
    core.on_signal(Signal("s1", "execute-snapshot", ("public.t", "public.u")))
    core.on_signal(Signal("p", "pause-snapshot", ("public.u",)))
    assert [p.paused for p in core.ledger.queue] == [False, True]
    core.on_signal(Signal("r", "resume-snapshot"))
    assert [p.paused for p in core.ledger.queue] == [False, False]
    core.on_signal(Signal("x", "stop-snapshot", ("public.t",)))
    assert [p.table for p in core.ledger.queue] == ["public.u"]
    assert core.stats.incremental_snapshots == 1


def test_a_signal_row_is_carried_out_once_and_a_bad_one_refused(tmp_path: Path) -> None:
    core = _with_snapshots(tmp_path)
    core.on_signal(Signal("s1", "execute-snapshot", ("public.t",)), row="row-1")
    core.on_signal(Signal("s1", "stop-snapshot"), row="row-1")  # the log read again
    assert [p.id for p in core.ledger.queue] == ["s1"]
    core.on_signal(SignalError("the signal row 7 has no type"), row="row-7")
    assert core.stats.signals_refused == 1


def test_a_capture_without_snapshots_refuses_a_signal(tmp_path: Path) -> None:
    core, _ = _core(tmp_path)
    core.on_signal(Signal("s1", "execute-snapshot", ("public.t",)))
    assert core.stats.signals_refused == 1 and not core.ledger.queue


def test_stop_failed_snapshot_drops_it_and_its_window(tmp_path: Path) -> None:
    core = _with_snapshots(tmp_path)
    core.on_signal(Signal("s1", "execute-snapshot", ("public.t", "public.u")))
    pending = core.ledger.queue[0]
    core.stop_failed_snapshot(pending, "its chunk query failed: canceled")
    assert [p.table for p in core.ledger.queue] == ["public.u"]
    assert core.stats.incremental_snapshots == 1


class _Flaky(_Core):
    """Loses its source twice, then stops itself."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.attempts = 0

    def connected(self) -> None:
        self.attempts += 1
        if self.attempts <= 2:
            raise TransientError("the database went away")
        raise Stop


def _unreachable(tmp_path: Path, closed: str) -> tuple[CaptureConfig, CaptureEndpoints]:
    """A capture's settings whose Kafka and registry refuse every connection."""
    kafka = {"bootstrap.servers": closed}
    endpoints = CaptureEndpoints(
        "postgresql://u@h/db", kafka, {"url": f"http://{closed}"}, tmp_path
    )
    return CaptureConfig(server="shop", tables=("public.t",)), endpoints


def test_run_retries_a_lost_source_with_backoff_and_ends_on_stop(
    tmp_path: Path, closed_address: str
) -> None:
    """Each lost connection is counted and retried; :class:`Stop` ends the run, the
    session closed behind it."""
    flaky = _Flaky(*_unreachable(tmp_path, closed_address))
    flaky.run()
    assert flaky.attempts == 3 and flaky.stats.reconnects == 2
    with pytest.raises(AssertionError, match="capture is not running"):
        _ = flaky.session


def test_a_failure_that_is_not_a_lost_connection_ends_the_run(
    tmp_path: Path, closed_address: str
) -> None:
    class _Refusing(_Flaky):
        def lost(self, exc: BaseException) -> bool:
            return False

    core = _Refusing(*_unreachable(tmp_path, closed_address))
    with pytest.raises(TransientError, match="went away"):
        core.run()
    assert core.attempts == 1 and core.stats.reconnects == 0


def test_a_connection_lost_after_a_failed_delivery_starts_with_nothing_in_flight(
    tmp_path: Path, closed_address: str
) -> None:
    """A failed delivery ends the session unconfirmed (KafkaDeliveryError, retried as a
    lost connection): the next connection reads again from the stored position and
    tracks only what it sends itself. Kept, the failure stopped every later connection
    at its first check, and capture retried forever without moving."""
    from confluent_kafka import KafkaError

    seen: list[tuple[Any, int, int]] = []

    class _FailedOnce(_Flaky):
        def connected(self) -> None:
            self.attempts += 1
            tracker = self.session.tracker
            seen.append((tracker.failure, tracker.in_flight, len(tracker.refused)))
            if self.attempts > 1:
                raise Stop
            tx = tracker.begin(7)
            tx.produced(2)
            tx.ack(None)  # one taken, the other failed: the session ends unconfirmed
            tx.ack(KafkaError(KafkaError._MSG_TIMED_OUT))
            self.check_delivery()

    core = _FailedOnce(*_unreachable(tmp_path, closed_address))
    core.run()
    assert core.attempts == 2 and core.stats.reconnects == 1
    assert seen == [(None, 0, 0), (None, 0, 0)]
