"""Process-wide settings for the long-running loops (the translator worker, replay tasks)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

#: The collector's thresholds once a translation loop runs: a block allocates tens of
#: thousands of short-lived objects; at Python's default (700) a young collection ran
#: every few records. bench/translate.py: 22,169 -> 24,220 records/s with the start-up
#: objects frozen and these thresholds.
GC_THRESHOLDS: Final = (20_000, 20, 50)


_settled: list[bool] = []


def settle_collector() -> None:
    """Freeze what start-up built (the app, the plugins, the schemas: the collector's full
    passes skip them from then on) and collect the young generation less often. Once per
    process: what a later call would freeze is the loop's own garbage."""
    if _settled:
        return
    _settled.append(True)
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


@contextmanager
def collected_between_blocks() -> Iterator[Callable[[], None]]:
    """No automatic collection inside the block: the loop calls the function it is given
    after each block, which collects the young generation (the block's reference cycles,
    if it made any: its other garbage is freed as it goes, by reference counting).

    A replay range's blocks make no cycles in the usual path, yet at the thresholds above
    the collector still traversed each block's live records and events a few times
    (about 3 % of a range's CPU). Cycles (a dead letter's exception and its traceback)
    are freed at the next block's end, so memory stays bounded by a block."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield _collect_young
    finally:
        if enabled:
            gc.enable()


def _collect_young() -> None:
    gc.collect(0)
