"""The initial snapshot, for every source: each table's rows written as op ``r``.

The source opens its consistent snapshot and reads the tables in it (PostgreSQL: the
slot's exported snapshot; MariaDB: ``START TRANSACTION WITH CONSISTENT SNAPSHOT``);
:func:`write_tables` writes what it reads, a batch at a time, with the producer polled,
back-pressure and a stop heeded between batches, and the progress counted;
:func:`write_snapshot` does that and then ends the snapshot's transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from bizevents.capture.core.capture import Stop
from bizevents.capture.core.chunks import ChunkHost
from bizevents.capture.core.codec import encoded_ts
from bizevents.capture.core.offsets import Tx
from bizevents.capture.metrics import CaptureStats

__all__ = ["SnapshotTable", "SnapshotWriter", "write_snapshot", "write_tables"]


class SnapshotWriter(ChunkHost, Protocol):
    """What :func:`write_tables` asks of its capture (the chunk driver's too)."""

    stats: CaptureStats
    progress: Callable[[str, int, int], None] | None

    def check_delivery(self) -> None: ...

    def backpressure(self, keepalive: Callable[[], None] | None = None) -> None: ...


class SnapshotTransaction(Protocol):
    """The database connection the snapshot was read in (psycopg's, PyMySQL's)."""

    def commit(self) -> None: ...


@dataclass(slots=True)
class SnapshotTable:
    """One table of the initial snapshot, as its source reads it."""

    #: The table's name in the stats, the progress and the dead letters.
    name: str
    codec: Any
    #: Its rows, a batch at a time (read in the snapshot's transaction).
    batches: Iterator[list[Any]]
    #: The ``source`` block of its rows (``snapshot = "true"``).
    source: bytes
    #: The ``source`` block of the snapshot's last row (``snapshot = "last"``).
    last_source: bytes
    #: Its last row is the snapshot's last.
    last: bool = False
    #: The rows the source counted in the snapshot; ``None``: not counted.
    expected: int | None = None


def write_tables(capture: SnapshotWriter, tables: Iterable[SnapshotTable], tx: Tx) -> None:
    """Write every row of ``tables`` under ``tx``; a stop asked for raises :class:`Stop`."""
    stats = capture.stats
    producer = capture.session.producer
    write = capture.snapshot_row
    for table in tables:
        name, codec, source = table.name, table.codec, table.source
        done = 0
        # One row held back: the last one of the last table says so (``last``).
        held: Any = None
        for rows in table.batches:
            if not rows:
                continue
            now = encoded_ts(int(time.time() * 1000))
            if held is not None:
                write(codec, name, None, held[0], source, held[1], tx)
            for row in rows[:-1]:
                write(codec, name, None, row, source, now, tx)
            held = (rows[-1], now)
            done += len(rows)
            codec.events += len(rows)
            stats.snapshot_rows[name] = done
            stats.events[name] = codec.events
            if capture.progress is not None:
                capture.progress(name, done, max(table.expected or 0, done))
            producer.poll(0)
            capture.check_delivery()
            capture.backpressure()
            if capture.stopping:
                raise Stop
        if held is not None:
            write(
                codec, name, None, held[0], table.last_source if table.last else source, held[1], tx
            )
        stats.snapshot_rows[name] = done
        capture.log.info("table snapshot read", table=name, rows=done)


def write_snapshot(
    capture: SnapshotWriter,
    conn: SnapshotTransaction,
    tables: Iterable[SnapshotTable],
    tx: Tx,
    commit: Callable[[Tx], None],
) -> None:
    """Write every row of ``tables`` (read in ``conn``) under ``tx``, end ``conn``'s
    snapshot transaction, then ``commit`` ``tx`` at the source's snapshot position."""
    write_tables(capture, tables, tx)
    conn.commit()
    commit(tx)
