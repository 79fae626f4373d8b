"""What a replay is asked to do: topics, translator versions, bounds, output, run id."""

from __future__ import annotations

import re
import secrets
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from bizevents.replay.exceptions import ReplayConfigError

OutputKind = Literal["contract", "topic", "replay", "path"]
FileFormat = Literal["avro", "parquet"]
FILE_FORMATS: Final[tuple[FileFormat, ...]] = ("avro", "parquet")
#: Suffix of the dedicated replay topics: ``<contract topic>.replay``.
REPLAY_SUFFIX: Final = ".replay"
DEFAULT_SLICE_SIZE: Final = 250_000


@dataclass(frozen=True, slots=True)
class Output:
    """Where replayed events go.

    ``contract``: each contract's own business topic (the live one, so corrections
    supersede in place); ``topic``: one named topic for every event; ``replay``:
    ``<contract topic>.replay``; ``path``: files under a directory, Avro container
    files (``file_format="avro"``, the default) or a Parquet dataset written by Spark.
    """

    kind: OutputKind
    target: str = ""
    file_format: FileFormat = "avro"

    @classmethod
    def parse(cls, text: str, file_format: str | None = None) -> Output:
        kind, sep, target = text.partition(":")
        found: Output | None = None
        if kind == "topic" and not sep:
            found = cls("contract")
        elif kind == "topic" and target:
            found = cls("topic", target)
        elif kind == "replay" and not sep:
            found = cls("replay")
        elif kind == "path" and target:
            found = cls("path", target)
        if found is None:
            raise ReplayConfigError(
                f"--to {text!r} is not an output: use topic (the contracts' own topics), "
                "topic:NAME, replay (<contract topic>.replay) or path:DIR"
            )
        if file_format is None:
            return found
        if found.kind != "path":
            raise ReplayConfigError(
                f"--format {file_format} is for files: it needs --to path:DIR, not --to {text}"
            )
        if file_format not in FILE_FORMATS:
            raise ReplayConfigError(
                f"--format {file_format!r} is not a file format: use avro or parquet"
            )
        return cls("path", target, file_format)

    def topic_for(self, contract_topic: str) -> str:
        """The topic an event of ``contract_topic`` is written to (files: its folder)."""
        if self.kind == "topic":
            return self.target
        if self.kind == "replay":
            return contract_topic + REPLAY_SUFFIX
        return contract_topic

    def dead_letter_topic(self, live: str) -> str:
        """Replay's dead letters never mix with the live worker's."""
        return live + REPLAY_SUFFIX

    def __str__(self) -> str:
        text = {"contract": "topic", "replay": "replay"}.get(
            self.kind, f"{self.kind}:{self.target}"
        )
        # Avro stays unmarked, so run states written before Parquet existed still resume
        return text if self.file_format == "avro" else f"{text} --format {self.file_format}"


@dataclass(frozen=True, slots=True)
class Bound:
    """``--from``/``--until``: an offset (every partition) or a record timestamp (ms)."""

    offset: int | None = None
    timestamp_ms: int | None = None

    @classmethod
    def parse(cls, text: str, option: str) -> Bound:
        text = text.strip()
        if re.fullmatch(r"\d+", text):
            return cls(offset=int(text))
        if text.startswith("ts:") and re.fullmatch(r"\d+", text[3:]):
            return cls(timestamp_ms=int(text[3:]))
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ReplayConfigError(
                f"{option} {text!r} is neither an offset (e.g. 1000), a timestamp in ms "
                "(ts:1700000000000) nor an ISO date-time (2026-01-31T12:00:00Z)"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return cls(timestamp_ms=int(moment.timestamp() * 1000))

    def __str__(self) -> str:
        return str(self.offset) if self.offset is not None else f"ts:{self.timestamp_ms}"


@dataclass(frozen=True, slots=True)
class ReplaySpec:
    """The arguments of one replay run (a rerun with the same run id must repeat them)."""

    topics: str
    translator: str
    output: Output | None  # None: a --diff dry run
    compact: bool = False
    start: Bound | None = None
    until: Bound | None = None
    diff_against: str | None = None
    slice_size: int = DEFAULT_SLICE_SIZE
    run_id: str = ""

    def __post_init__(self) -> None:
        if self.slice_size < 1:
            raise ReplayConfigError(f"--slice-size must be at least 1, not {self.slice_size}")
        if self.output is None and self.diff_against is None:
            raise ReplayConfigError("--to is required unless --diff asks for a dry run")
        if self.output is not None and self.diff_against is not None:
            raise ReplayConfigError(
                "--diff is a dry run that publishes nothing; it does not take --to"
            )
        if (
            self.start is not None
            and self.until is not None
            and self.start.offset is not None
            and self.until.offset is not None
            and self.start.offset > self.until.offset
        ):
            raise ReplayConfigError(
                f"--from {self.start} is after --until {self.until}: the range is empty"
            )
        if not self.run_id:
            object.__setattr__(self, "run_id", new_run_id())
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", self.run_id):
            raise ReplayConfigError(
                f"--run-id {self.run_id!r} must be letters, digits, '.', '_' or '-' "
                "(it names a folder)"
            )

    @property
    def dry_run(self) -> bool:
        return self.diff_against is not None

    @property
    def jvm_writes(self) -> bool:
        """Whether Spark's JVM writes the output itself (Parquet files), not the tasks."""
        return self.output is not None and self.output.file_format == "parquet"

    def fingerprint(self) -> dict[str, Any]:
        """What a rerun must repeat (the slice size may not change: it shapes the ranges)."""
        data = asdict(self)
        data.pop("run_id")
        data["output"] = None if self.output is None else str(self.output)
        data["start"] = None if self.start is None else str(self.start)
        data["until"] = None if self.until is None else str(self.until)
        return data


def new_run_id() -> str:
    return datetime.now(UTC).strftime("replay-%Y%m%d-%H%M%S-") + secrets.token_hex(2)
