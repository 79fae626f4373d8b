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


def test_between_blocks_collection_frees_a_blocks_cycles_and_restores_the_collector() -> None:
    import gc
    import weakref

    from bizevents.plumbing.process import collected_between_blocks

    class Node:
        other: object = None

    assert gc.isenabled()
    with collected_between_blocks() as collect:
        assert not gc.isenabled()  # no automatic pass inside a block
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle, which reference counting cannot free
        alive = weakref.ref(a)
        del a, b
        assert alive() is not None
        collect()  # the block's end
        assert alive() is None
    assert gc.isenabled()
