"""The Spark replay: technical topics re-read through a pinned translator version.

See docs/replay.md. The driver (:class:`ReplayJob`) plans offset ranges from
Fetch-based watermarks and runs one Spark job per range; executors read their range
with confluent-kafka in assign mode and run :class:`bizevents.translators.pipeline.Pipeline`,
the live worker's translation core, with ``replay=True``.
"""

# A checkout's root is on sys.path, so `import replay` would load a second copy of the floor.
if __name__ != "bizevents.replay":
    raise ImportError(f"import bizevents.replay, not {__name__}: the floors have one name")

from bizevents.replay.compaction import KeyIndex, compact
from bizevents.replay.diff import DiffReport
from bizevents.replay.exceptions import (
    RangeFailedError,
    RegistryUnreachableError,
    ReplayConfigError,
    RunStateError,
    TopicNotFoundError,
)
from bizevents.replay.job import ReplayJob, Summary
from bizevents.replay.plan import Range, Span, slices
from bizevents.replay.session import spark_session
from bizevents.replay.spec import Bound, Output, ReplaySpec

__all__ = [
    "Bound",
    "DiffReport",
    "KeyIndex",
    "Output",
    "Range",
    "RangeFailedError",
    "RegistryUnreachableError",
    "ReplayConfigError",
    "ReplayJob",
    "ReplaySpec",
    "RunStateError",
    "Span",
    "Summary",
    "TopicNotFoundError",
    "compact",
    "slices",
    "spark_session",
]
