"""Process-wide settings for the long-running loops (the translator worker, replay tasks)."""

from __future__ import annotations

import gc
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
