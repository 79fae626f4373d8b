"""Capture's parked keys as pure state: the interface of the worker's parking module.

The row worker keeps its parked keys in ``bizevents.translators.parking`` (docs/parking.md);
capture may not import translators (the floors' rule, docs/architecture.md), and that
module is being moved down to ``bizevents.plumbing``. Until it lands there, this module
holds the part of its interface capture needs, with the same names, the same record
layout in the parked topic and the same semantics, so that capture's I/O
(:mod:`bizevents.capture.quarantine`) can switch to the moved module by changing one
import. Pure: no I/O, no Kafka, no PostgreSQL.

A :data:`Ref` is ``(name, technical topic, partition, record key)``; capture parks per
technical key whatever the partition, so its refs carry :data:`CAPTURE` as the name and
:data:`ANY_PARTITION`, and an "offset" is the change's position (a PostgreSQL LSN).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "ANY_PARTITION",
    "CAPTURE",
    "PARKED_HEADER",
    "STAGE_PARKED",
    "Parked",
    "ParkedKeys",
    "Ref",
    "Request",
    "Unparked",
    "decode_state",
    "ref_key",
    "ref_of",
]

#: The header that marks a dead-letter record as parked (value ``1``), as the worker's.
PARKED_HEADER: Final = "bizevents.dlq.parked"
#: The stage of a change parked behind its key's failing change (never converted).
STAGE_PARKED: Final = "parked"
#: The name in capture's refs (the worker's are translator names).
CAPTURE: Final = "capture"
#: Capture parks a technical key whatever partition it is produced to.
ANY_PARTITION: Final = -1

#: (name, technical topic, partition, record key)
Ref = tuple[str, str, int, bytes]


def ref_key(ref: Ref) -> bytes:
    """The parked topic's key of ``ref``."""
    name, topic, partition, key = ref
    return f"park|{name}|{topic}|{partition}|{key.hex()}".encode()


def ref_of(key: bytes) -> Ref | None:
    """The :data:`Ref` a parked-topic key names (None: not a key's state)."""
    parts = key.decode(errors="replace").split("|")
    if len(parts) != 5 or parts[0] != "park":
        return None
    try:
        return parts[1], parts[2], int(parts[3]), bytes.fromhex(parts[4])
    except ValueError:
        return None


@dataclass(slots=True)
class Parked:
    """A parked key: its first and last parked positions, how many, and why."""

    first: int
    last: int
    count: int
    stage: str
    reason: str
    latest_reason: str

    def record(self, ref: Ref) -> bytes:
        return _encode(ref, {"state": "parked", **asdict(self)})


@dataclass(slots=True)
class Unparked:
    """A key no longer parked: its changes up to ``through`` were re-driven (or
    discarded, ``how`` says which)."""

    through: int
    how: str

    def record(self, ref: Ref) -> bytes:
        return _encode(ref, {"state": "unparked", **asdict(self)})


def _encode(ref: Ref, fields: dict[str, Any]) -> bytes:
    name, topic, partition, key = ref
    body = {"translator": name, "topic": topic, "partition": partition, "key": key.hex()}
    return json.dumps({**body, **fields}, separators=(",", ":")).encode()


def decode_state(value: bytes) -> Parked | Unparked:
    """A key's state from its parked-topic value (ValueError when it is not one)."""
    fields = json.loads(value)
    state = fields.pop("state", None)
    for name in ("translator", "topic", "partition", "key"):
        fields.pop(name, None)
    if state == "parked":
        return Parked(**fields)
    if state == "unparked":
        return Unparked(**fields)
    raise ValueError(f"not a parked-key state: {state!r}")


@dataclass(frozen=True, slots=True)
class Request:
    """A re-drive of one parked key, asked by ``bizevents capture redrive`` and carried
    out by the running capture; ``status`` is its result once done."""

    id: str
    kind: Literal["redrive", "discard"]
    translator: str
    topic: str
    partition: int
    key: str  # hex
    version: int | None = None
    reason: str = ""
    status: Literal["pending", "done", "failed", "refused"] = "pending"
    message: str = ""

    @property
    def ref(self) -> Ref:
        return self.translator, self.topic, self.partition, bytes.fromhex(self.key)

    def record_key(self) -> bytes:
        return f"request|{self.id}".encode()

    def record(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> Request:
        return cls(**json.loads(value))


@dataclass
class ParkedKeys:
    """The parked keys capture knows of, and the positions it must skip once re-driven.

    The bound is checked by the caller (:meth:`would_pass_bound`), which names its own
    setting in the sentence that stops it."""

    bound: int = 10_000
    parked: dict[Ref, Parked] = field(default_factory=dict)
    through: dict[Ref, int] = field(default_factory=dict)
    #: technical topic -> keys parked or unparked on it: a change's key is looked up
    #: only when its topic is here (nothing parked: one dict lookup per change)
    watched: dict[str, int] = field(default_factory=dict)

    def reset(self) -> None:
        """Forget everything (before a restore)."""
        self.parked.clear()
        self.through.clear()
        self.watched.clear()

    def would_pass_bound(self, ref: Ref) -> bool:
        """Whether parking ``ref`` would park one key more than the bound."""
        return ref not in self.parked and len(self.parked) >= self.bound

    def park(self, ref: Ref, offset: int, stage: str, reason: str) -> bytes:
        """Park the change at ``offset`` of ``ref``'s key (the first or one behind it);
        the key's parked-topic record."""
        state = self.parked.get(ref)
        if state is not None:
            state.last = max(state.last, offset)
            state.count += 1
            if stage != STAGE_PARKED:
                state.latest_reason = reason
            return state.record(ref)
        state = self.parked[ref] = Parked(offset, offset, 1, stage, reason, reason)
        self._watch(ref, 1)
        return state.record(ref)

    def unpark(self, ref: Ref, through: int, how: str) -> bytes:
        """Unpark ``ref``'s key: changes up to ``through`` are handled; its record."""
        if self.parked.pop(ref, None) is not None:
            self._watch(ref, -1)
        if ref not in self.through:
            self._watch(ref, 1)
        self.through[ref] = max(through, self.through.get(ref, -1))
        return Unparked(through, how).record(ref)

    def failed_again(self, ref: Ref, reason: str) -> bytes | None:
        """A re-drive failed: the key stays parked with the new reason; its record
        (None when the key is not parked)."""
        state = self.parked.get(ref)
        if state is None:
            return None
        state.latest_reason = reason
        return state.record(ref)

    def skipped(self, ref: Ref, offset: int) -> bool:
        """Whether the change at ``offset`` was already re-driven (sent again after a
        restart): it must not be written again by the live path."""
        return offset <= self.through.get(ref, -1)

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Fold one parked-topic record (restore); records of other kinds are ignored."""
        ref = ref_of(key)
        if ref is None:
            return
        if self.parked.pop(ref, None) is not None:
            self._watch(ref, -1)
        if value is None:
            return
        try:
            state = decode_state(value)
        except (ValueError, TypeError):
            return  # not a state record: nothing to restore from it
        if isinstance(state, Parked):
            self.parked[ref] = state
            self._watch(ref, 1)
        else:
            if ref not in self.through:
                self._watch(ref, 1)
            self.through[ref] = max(state.through, self.through.get(ref, -1))

    def _watch(self, ref: Ref, delta: int) -> None:
        topic = ref[1]
        left = self.watched.get(topic, 0) + delta
        if left > 0:
            self.watched[topic] = left
        else:
            self.watched.pop(topic, None)
