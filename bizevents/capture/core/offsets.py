"""Which log position may be confirmed to the source: Kafka acknowledged everything before it.

:class:`AckTracker` follows every transaction from its Begin to the last Kafka
acknowledgement of its events. The slot's flush position only moves to the end LSN of
a transaction whose events, and those of every earlier transaction, Kafka has
acknowledged: a crash re-sends, never loses. A record the broker refuses for good is
set aside (:attr:`AckTracker.refused`): its transaction waits for the dead letter that
takes its place. Pure, no I/O.
"""

from __future__ import annotations

from collections import deque
from typing import Final

from confluent_kafka import KafkaError, Message

__all__ = ["REFUSED_FOR_GOOD", "AckTracker", "Tx"]

#: The broker's answers to a record it will never take, however often it is sent: the
#: record itself is at fault (a keyless record on a compacted topic, too large, a bad
#: timestamp). Any other failure is the connection's or the broker's, and a restart
#: sends the record again.
REFUSED_FOR_GOOD: Final = frozenset(
    {
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_TIMESTAMP,
        KafkaError.MSG_SIZE_TOO_LARGE,
    }
)


class Tx:
    """One transaction's events in flight; ``ack`` is the producer's delivery callback."""

    __slots__ = ("end_lsn", "pending", "tracker", "xid")

    def __init__(self, tracker: AckTracker, xid: int | None) -> None:
        self.tracker = tracker
        self.xid = xid
        self.pending = 0
        self.end_lsn: int | None = None

    def produced(self, count: int = 1) -> None:
        """``count`` more events of this transaction were handed to the producer."""
        self.pending += count
        self.tracker.in_flight += count

    def ack(self, err: KafkaError | None, msg: Message | None = None) -> None:
        """Delivery report of one event."""
        if err is not None:
            if msg is not None and err.code() in REFUSED_FOR_GOOD:
                self.tracker.refused.append((self, err, msg))  # still pending
            else:
                self.tracker.failure = err
            return
        self.pending -= 1
        self.tracker.in_flight -= 1


class AckTracker:
    """Transactions in commit order, and the highest end LSN safe to confirm."""

    __slots__ = ("_done_lsn", "_open", "_txs", "failure", "in_flight", "refused")

    def __init__(self, start_lsn: int = 0) -> None:
        self._txs: deque[Tx] = deque()
        self._open: Tx | None = None
        self._done_lsn = start_lsn
        self.in_flight = 0
        self.failure: KafkaError | None = None
        #: Records refused for good, each with its transaction, for the dead-letter topic.
        self.refused: deque[tuple[Tx, KafkaError, Message]] = deque()

    def begin(self, xid: int | None = None) -> Tx:
        """A transaction starts (its events follow)."""
        tx = Tx(self, xid)
        self._txs.append(tx)
        self._open = tx
        return tx

    def commit(self, tx: Tx, end_lsn: int) -> None:
        """``tx`` committed; confirm ``end_lsn`` once its events are acknowledged."""
        tx.end_lsn = end_lsn
        if self._open is tx:
            self._open = None

    @property
    def open(self) -> Tx | None:
        """The transaction between Begin and Commit, if any."""
        return self._open

    def abandon_open(self) -> None:
        """The stream broke inside a transaction: it will be read again from the slot."""
        if self._open is not None:
            self._open.end_lsn = -1  # acknowledged or not, it confirms nothing
            self._open = None

    def confirmable(self) -> int:
        """The highest end LSN all of whose (and earlier) events are acknowledged."""
        txs = self._txs
        done = self._done_lsn
        while txs:
            tx = txs[0]
            if tx.end_lsn is None or tx.pending > 0:
                break
            txs.popleft()
            if tx.end_lsn > done:
                done = tx.end_lsn
        self._done_lsn = done
        return done

    @property
    def idle(self) -> bool:
        """Nothing in flight and no transaction open."""
        return self.in_flight == 0 and self._open is None and not self._txs

    def advance_idle(self, lsn: int) -> int:
        """With nothing in flight, the server's position may be confirmed as it is."""
        if self.idle and lsn > self._done_lsn:
            self._done_lsn = lsn
        return self._done_lsn
