"""The Spark replay: technical topics re-read through a pinned translator version.

See docs/replay.md. The driver (:class:`ReplayJob`) plans offset ranges from
Fetch-based watermarks and runs one Spark job per range; executors read their range
with confluent-kafka in assign mode and run :class:`translators.pipeline.Pipeline`,
the live worker's translation core, with ``replay=True``.
"""

from replay.compaction import KeyIndex, compact
from replay.diff import DiffReport
from replay.exceptions import (
    RangeFailedError,
    RegistryUnreachableError,
    ReplayConfigError,
    RunStateError,
    TopicNotFoundError,
)
from replay.job import ReplayJob, Summary, spark_session
from replay.plan import Range, Span, slices
from replay.spec import Bound, Output, ReplaySpec

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
