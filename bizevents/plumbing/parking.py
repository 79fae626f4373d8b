"""Per-key parking: which keys are parked for which translator or consumer, as pure state.

A change that fails parks its source key for the translator that failed: the key's
later changes are parked behind it (written to the dead-letter topic, marked parked,
untranslated) until a re-drive through a fixed version unparks the key. This module
holds the state and its records; it does no I/O. The row worker (the pipeline) asks
it per record, the I/O around it (:mod:`bizevents.plumbing.parkingio`, and the
worker's :mod:`bizevents.translators.parkingio`) restores it from the parked topic and
carries out re-drive requests. It knows nothing of rows, Faust or Kafka clients, so
that the transaction worker can adopt it as it is. It stands on the ground floor
because the consumer kit (:mod:`bizevents.consumers`) parks business events with it
too: the consumer group stands where a translator's name stands (``Ref`` ``(group,
business topic, partition, key)``), with its own parked topic and the same records.

A key is :data:`Ref` ``(translator name, technical topic, partition, record key)``:
the name, not the version, since the fix is another version of the same translator
and event ids hash the name. Records of the parked topic (one compacted partition):

- ``park|<name>|<topic>|<partition>|<hex key>`` → a :class:`Parked` or an
  :class:`Unparked` state, JSON;
- ``request|<id>`` → a re-drive or discard :class:`Request`, and later its result.

See docs/parking.md for the design (ordering, crashes, rebalances).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal, TypeVar

from bizevents.plumbing.errors import TerminalError

__all__ = [
    "PARKED_HEADER",
    "PARKED_MARK",
    "OnError",
    "Parked",
    "ParkedKeys",
    "ParkingBoundError",
    "Ref",
    "Request",
    "Unparked",
    "is_parked",
    "ref_key",
    "refs_behind",
]

#: The header that marks a dead-letter record as parked (value ``1``).
PARKED_HEADER: Final = "bizevents.dlq.parked"
#: That header as a parked record carries it.
PARKED_MARK: Final = (PARKED_HEADER, b"1")
#: Headers the pipeline appends to a parked record after the original ones.
PARKED_EXTRA_HEADERS: Final = 8
#: The stage of a change parked behind its key's failing change (never translated).
STAGE_PARKED: Final = "parked"

OnError = Literal["park", "dead-letter", "fail"]
#: (translator name, technical topic, partition, record key)
Ref = tuple[str, str, int, bytes]
T = TypeVar("T")


class ParkingBoundError(TerminalError):
    """One more key would pass ``translate.max_parked_keys``."""


def is_parked(headers: Mapping[str, Any]) -> bool:
    """Whether a dead-letter record with these ``headers`` (by name) is marked parked."""
    return headers.get(PARKED_HEADER) == PARKED_MARK[1]


def ref_key(ref: Ref) -> bytes:
    """The parked topic's key of ``ref``."""
    name, topic, partition, key = ref
    return f"park|{name}|{topic}|{partition}|{key.hex()}".encode()


def refs_behind(ref: Ref, after: int, parked: Iterable[tuple[Ref, int, T]]) -> list[T]:
    """Of ``parked`` (each with its ref and offset), ``ref``'s past offset ``after``, in
    offset order, each once (a crash may have parked one twice)."""
    found: dict[int, T] = {}
    for its_ref, offset, item in parked:
        if its_ref == ref and offset > after:
            found.setdefault(offset, item)
    return [found[offset] for offset in sorted(found)]


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
    """A parked key: its first and last parked source offsets, how many, and why."""

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
    discarded, ``how`` says which); a worker that reads them again skips them."""

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
    """A re-drive or a discard of one parked key, asked by ``bizevents dlq``, carried out
    by the worker that owns the key's partition; ``status`` is its result once done."""

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
    """The parked keys a worker knows of, and the offsets it must skip once re-driven."""

    bound: int = 10_000
    #: what parks, and the setting of the bound, for the sentence past the bound
    owner: str = "translator"
    bound_setting: str = "translate.max_parked_keys"
    parked: dict[Ref, Parked] = field(default_factory=dict)
    through: dict[Ref, int] = field(default_factory=dict)
    #: technical topic -> keys parked or unparked on it: the pipeline looks a record's
    #: key up only when its topic is here (nothing parked: one dict lookup per record)
    watched: dict[str, int] = field(default_factory=dict)
    #: translator name -> keys parked now (the gauge)
    per_translator: dict[str, int] = field(default_factory=dict)
    #: how each unparked key was unparked (a re-drive names its request)
    unparked_by: dict[Ref, str] = field(default_factory=dict)

    def reset(self) -> None:
        """Forget everything (before a restore), keeping this object (the pipeline's)."""
        self.parked.clear()
        self.through.clear()
        self.watched.clear()
        self.per_translator.clear()
        self.unparked_by.clear()

    def would_pass_bound(self, ref: Ref) -> bool:
        """Whether parking ``ref`` would park one key more than the bound (a caller
        that stops with a sentence of its own asks first, as capture does)."""
        return ref not in self.parked and len(self.parked) >= self.bound

    def park(self, ref: Ref, offset: int, stage: str, reason: str) -> bytes:
        """Park the change at ``offset`` of ``ref``'s key (the first or one behind it);
        the key's parked-topic record. Past the bound: :class:`ParkingBoundError`."""
        state = self.parked.get(ref)
        if state is not None:
            state.last = max(state.last, offset)
            state.count += 1
            if stage != STAGE_PARKED:
                state.latest_reason = reason
            return state.record(ref)
        if self.would_pass_bound(ref):
            name, topic, partition, _ = ref
            raise ParkingBoundError(
                f"{self.owner} {name} cannot park one more key of {topic}[{partition}]: "
                f"{len(self.parked)} keys are parked, the bound {self.bound_setting}; "
                "re-drive or discard parked keys (bizevents dlq), or raise the bound"
            )
        state = self.parked[ref] = Parked(offset, offset, 1, stage, reason, reason)
        self._count(ref, 1)
        return state.record(ref)

    def answer_unparked(self, ref: Ref, request_id: str) -> tuple[str, str]:
        """The answer to request ``request_id`` of ``ref``, a key not parked: done when
        the request unparked it itself (before a crash left it unanswered), else refused."""
        how = self.unparked_by.get(ref, "")
        if request_id in how:
            return "done", how
        return "refused", "the key is not parked"

    def unpark(self, ref: Ref, through: int, how: str) -> bytes:
        """Unpark ``ref``'s key: changes up to ``through`` are handled; its record."""
        if self.parked.pop(ref, None) is not None:
            self._count(ref, -1)
        if ref not in self.through:
            self.watched[ref[1]] = self.watched.get(ref[1], 0) + 1
        self.through[ref] = max(through, self.through.get(ref, -1))
        self.unparked_by[ref] = how
        return Unparked(through, how).record(ref)

    def failed_again(self, ref: Ref, first: int, reason: str) -> bytes | None:
        """A re-drive failed at ``first``: the key stays parked from there, with the new
        reason; its record (None when the key is not parked)."""
        state = self.parked.get(ref)
        if state is None:
            return None
        state.first = first
        state.latest_reason = reason
        return state.record(ref)

    def skipped(self, ref: Ref, offset: int) -> bool:
        """Whether the change at ``offset`` was already re-driven (read again after a
        crash or a rebalance): it must not be translated by the live version."""
        return offset <= self.through.get(ref, -1)

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Fold one parked-topic record (restore); records of other kinds are ignored."""
        ref = ref_of(key)
        if ref is None:
            return
        if self.parked.pop(ref, None) is not None:
            self._count(ref, -1)
        if value is None:
            return
        try:
            state = decode_state(value)
        except (ValueError, TypeError):
            return  # not ours to judge here: `dlq list` names such a record
        if isinstance(state, Parked):
            self.parked[ref] = state
            self._count(ref, 1)
        else:
            if ref not in self.through:
                self.watched[ref[1]] = self.watched.get(ref[1], 0) + 1
            self.through[ref] = max(state.through, self.through.get(ref, -1))
            self.unparked_by[ref] = state.how

    def _count(self, ref: Ref, delta: int) -> None:
        name, topic = ref[0], ref[1]
        self.per_translator[name] = self.per_translator.get(name, 0) + delta
        left = self.watched.get(topic, 0) + delta
        if left > 0:
            self.watched[topic] = left
        else:
            self.watched.pop(topic, None)
