"""Which log position may be confirmed to PostgreSQL, and the snapshot's durable record.

:class:`AckTracker` follows every transaction from its Begin to the last Kafka
acknowledgement of its events. The slot's flush position only moves to the end LSN of
a transaction whose events, and those of every earlier transaction, Kafka has
acknowledged: a crash re-sends, never loses. Pure, no I/O.

:class:`SnapshotState` is a small JSON file per slot saying that the initial snapshot
into Kafka finished. A slot that exists without it belongs to a snapshot that did not
finish (or to another machine's state folder): the slot is dropped and the snapshot is
redone, because the exported snapshot that went with the slot is gone.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message

__all__ = ["AckTracker", "SnapshotState", "Tx"]


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

    def ack(self, err: KafkaError | None, _msg: Message | None = None) -> None:
        """Delivery report of one event."""
        if err is not None:
            self.tracker.failure = err
            return
        self.pending -= 1
        self.tracker.in_flight -= 1


class AckTracker:
    """Transactions in commit order, and the highest end LSN safe to confirm."""

    __slots__ = ("_done_lsn", "_open", "_txs", "failure", "in_flight")

    def __init__(self, start_lsn: int = 0) -> None:
        self._txs: deque[Tx] = deque()
        self._open: Tx | None = None
        self._done_lsn = start_lsn
        self.in_flight = 0
        self.failure: KafkaError | None = None

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


@dataclass(frozen=True, slots=True)
class SnapshotState:
    """The durable record that a slot's initial snapshot reached Kafka completely."""

    path: Path

    @classmethod
    def for_slot(cls, state_dir: Path, database: str, slot: str) -> SnapshotState:
        """The record of ``slot`` of ``database`` in ``state_dir``."""
        return cls(state_dir / f"{database}.{slot}.json")

    def read(self) -> dict[str, Any] | None:
        """The record, or ``None`` when there is none (or it is unreadable)."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def done(self) -> bool:
        """Whether the slot's initial snapshot finished (written after its last ack)."""
        data = self.read()
        return bool(data and data.get("snapshot_done"))

    def write(self, **fields: Any) -> None:
        """Replace the record atomically (write, fsync, rename)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(fields, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def clear(self) -> None:
        """Forget the record (the slot was dropped)."""
        self.path.unlink(missing_ok=True)
