"""A run's state on disk: its plan (the snapshot of ranges) and the ranges it finished.

``<state_dir>/replay/<run id>/state.json``, rewritten atomically (a temporary file,
fsync, rename) each time a range finishes. A rerun with the same run id reads the
plan from here, so it reads exactly the ranges the first attempt planned, and skips
the finished ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from bizevents.replay.exceptions import RunStateError
from bizevents.replay.plan import Range

STATE_FILE: Final = "state.json"
VERSION: Final = 1


@dataclass
class RunState:
    path: Path
    run_id: str
    spec: dict[str, Any]
    ranges: list[Range]
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    created: str = ""
    finished: str | None = None
    #: what else a kind of run plans (a transaction replay: its bounds)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def folder(cls, state_dir: Path, run_id: str) -> Path:
        return state_dir / "replay" / run_id

    @classmethod
    def load(cls, state_dir: Path, run_id: str) -> RunState | None:
        path = cls.folder(state_dir, run_id) / STATE_FILE
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
            if data.get("version") != VERSION:
                raise ValueError(f"version {data.get('version')!r}")
            return cls(
                path=path,
                run_id=data["run_id"],
                spec=data["spec"],
                ranges=[Range.from_dict(r) for r in data["ranges"]],
                done=data["done"],
                created=data["created"],
                finished=data.get("finished"),
                extra=data.get("extra", {}),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise RunStateError(f"the run state {path} is unreadable ({exc}); remove it") from exc

    @classmethod
    def create(
        cls,
        state_dir: Path,
        run_id: str,
        spec: dict[str, Any],
        ranges: Sequence[Range],
        *,
        extra: dict[str, Any] | None = None,
    ) -> RunState:
        path = cls.folder(state_dir, run_id) / STATE_FILE
        state = cls(path, run_id, spec, list(ranges), created=_now(), extra=extra or {})
        state.save()
        return state

    def check(self, spec: dict[str, Any]) -> None:
        """A rerun must repeat the arguments of the run it resumes."""
        changed = sorted(k for k in set(spec) | set(self.spec) if spec.get(k) != self.spec.get(k))
        if changed:
            detail = ", ".join(
                f"{k}: {self.spec.get(k)!r} then, {spec.get(k)!r} now" for k in changed
            )
            raise RunStateError(
                f"run {self.run_id} was started with other arguments ({detail}); "
                "repeat them or choose another --run-id"
            )

    def pending(self) -> list[Range]:
        return [r for r in self.ranges if r.id not in self.done]

    def mark_done(self, range_id: str, report: dict[str, Any]) -> None:
        self.done[range_id] = report
        self.save()

    def finish(self) -> None:
        self.finished = _now()
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "version": VERSION,
            "run_id": self.run_id,
            "spec": self.spec,
            "created": self.created,
            "finished": self.finished,
            "ranges": [r.as_dict() for r in self.ranges],
            "done": self.done,
            **({"extra": self.extra} if self.extra else {}),
        }
        partial = self.path.with_suffix(".partial")
        with partial.open("w") as handle:
            json.dump(data, handle, separators=(",", ":"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, self.path)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
