"""What capture may confirm to the source (capture/core/offsets.py): only what Kafka
acknowledged, whole transactions, the server's position when idle."""

from __future__ import annotations

from bizevents.capture.core.offsets import AckTracker


def test_confirms_only_fully_acknowledged_prefixes() -> None:
    """Acks out of order across transactions: the position waits for the oldest."""
    tracker = AckTracker(start_lsn=100)
    t1 = tracker.begin(1)
    t1.produced(2)
    tracker.commit(t1, 200)
    t2 = tracker.begin(2)
    t2.produced(1)
    tracker.commit(t2, 300)
    t2.ack(None)
    assert tracker.confirmable() == 100  # t1 still waits
    t1.ack(None)
    assert tracker.confirmable() == 100
    t1.ack(None)
    assert tracker.confirmable() == 300
    assert tracker.in_flight == 0 and tracker.idle


def test_open_transaction_confirms_nothing_and_a_failure_is_kept() -> None:
    """A transaction without its Commit holds the position; a failed ack is reported."""
    tracker = AckTracker()
    tx = tracker.begin(7)
    tx.produced(1)
    tx.ack(None)
    assert tracker.confirmable() == 0 and not tracker.idle
    assert tracker.advance_idle(999) == 0
    tracker.abandon_open()
    assert tracker.open is None
    failing = tracker.begin(8)
    failing.produced(1)
    failing.ack("broker said no")  # type: ignore[arg-type]
    assert tracker.failure == "broker said no"
    tracker.commit(failing, 500)
    assert tracker.confirmable() == 0


def test_idle_tracker_follows_the_server_position() -> None:
    """Nothing in flight: the server's reported position may be confirmed."""
    tracker = AckTracker(10)
    assert tracker.advance_idle(50) == 50
    assert tracker.advance_idle(40) == 50
