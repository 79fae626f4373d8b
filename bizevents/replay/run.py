"""What both replays (rows: :mod:`bizevents.replay.job`, transactions:
:mod:`bizevents.replay.transactions`) start from: the spec and settings, a listener of
progress, the translators resolved, and the Spark session made at its first need."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from bizevents.replay.session import spark_session

if TYPE_CHECKING:
    from bizevents.replay.spec import ReplaySpec
    from bizevents.replay.task import TaskReport
    from bizevents.translators.api import Translator
    from bizevents.translators.settings import RuntimeSettings

__all__ = ["Listener", "ReplayRun"]


class Listener(Protocol):
    """Progress of a run, for a terminal or a test."""

    def planned(self, total: int, skipped: int, offsets: int) -> None: ...

    def phase(self, name: str) -> None: ...

    def finished(self, report: TaskReport) -> None: ...


class _Quiet:
    def planned(self, total: int, skipped: int, offsets: int) -> None:
        pass

    def phase(self, name: str) -> None:
        pass

    def finished(self, report: TaskReport) -> None:
        pass


class ReplayRun:
    """One replay run's spec, settings, listener and Spark session."""

    def __init__(
        self,
        spec: ReplaySpec,
        settings: RuntimeSettings,
        *,
        spark: Any = None,
        master: str | None = None,
        listener: Listener | None = None,
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.spark = spark
        self.master = master
        self.listener: Listener = listener or _Quiet()

    def translators(self) -> tuple[Translator, Translator | None]:
        """The translator replayed and the one it is compared with (``--diff``)."""
        from bizevents.translators.registry import discover

        registry = discover(names=(self.spec.translator, self.spec.diff_against))
        ours = registry.resolve(self.spec.translator)
        theirs = None
        if self.spec.diff_against is not None:
            theirs = registry.resolve(self.spec.diff_against)
        return ours, theirs

    def session(self) -> Any:
        """The Spark session: the one given, or one made now (once)."""
        if self.spark is None:
            self.spark = spark_session(self.master, jvm_writes=self.spec.jvm_writes)
        return self.spark
