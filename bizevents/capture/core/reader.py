"""What both sources' stream readers share: the loop's frame (:class:`StreamReader`) and
what a reader asks of its capture, whatever the source (:class:`StreamHost`; each
source's reader asks more, ``SlotHost`` and ``BinlogHost``)."""

from __future__ import annotations

from contextlib import suppress
from typing import Any, Protocol

from bizevents.capture.core.capture import CaptureEndpoints
from bizevents.capture.core.incremental import Incremental
from bizevents.capture.core.initial import SnapshotWriter
from bizevents.capture.core.quarantine import Quarantine
from bizevents.capture.core.routing import Router
from bizevents.capture.core.signals import Signal, SignalError
from bizevents.capture.core.state import Pending
from bizevents.capture.core.transactions import NoBlocks
from bizevents.plumbing.parking import ParkedKeys

__all__ = ["StreamHost", "StreamReader"]


class StreamReader:
    """A stream's loop, and the connection its incremental snapshots read chunks on,
    closed when the loop ends."""

    chunks: Any = None

    def loop(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        try:
            self.loop()
        finally:
            if self.chunks is not None:
                with suppress(Exception):
                    self.chunks.close()


class StreamHost(SnapshotWriter, Protocol):
    """What a stream reader asks of its capture, whatever the source (its chunk
    driver's and the snapshots' asks included)."""

    endpoints: CaptureEndpoints
    incremental: Incremental | None
    #: The parked keys (None unless ``on_conversion_error = "park"``), read per change.
    parking: ParkedKeys | None
    quarantine: Quarantine
    #: Each technical record's partition (routing by business key).
    router: Router

    def transaction_blocks(self) -> NoBlocks: ...

    def on_signal(self, sig: Signal | SignalError, row: str | None = None) -> None: ...

    def poll_signals(self, wait_s: float = 0) -> None: ...

    def drain(self) -> None: ...

    def wait_acknowledged(self) -> None: ...

    def stop_failed_snapshot(self, pending: Pending, reason: str) -> None: ...
