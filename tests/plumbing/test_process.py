"""The collector settles once per process, with the loop's thresholds."""

from __future__ import annotations

import subprocess
import sys


def test_the_collector_settles_once_with_its_thresholds() -> None:
    code = (
        "import gc\n"
        "from bizevents.plumbing.process import GC_THRESHOLDS, settle_collector\n"
        "settle_collector()\n"
        "frozen = gc.get_freeze_count()\n"
        "assert frozen > 0 and gc.get_threshold() == GC_THRESHOLDS, (frozen, gc.get_threshold())\n"
        "garbage = [[] for _ in range(1000)]\n"
        "settle_collector()\n"
        "assert gc.get_freeze_count() == frozen, 'a second call froze again'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
