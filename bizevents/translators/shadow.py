"""A version running in the shadow of the live one: how their events compare, and the
gate a promotion must pass.

Pure: the worker (or a test) hands it, change by change, the events both versions made
of the same change, each as ``(event_id, contract, content)``, the content being the
event's fields (a model's ``__dict__``, or a dict; the top-level ``lineage`` is left
out, since it names the version). Events pair up by deterministic id, which depends
on the translator's *name*, the contract and the change, never on the version, so the
live ``orders@3`` and the shadow ``orders@4`` give one event the same id. Each event is
then identical, differing (naming the fields, dotted for nested records), or made by
one version only.

The figures are kept per contract and per field, merge across partitions and workers
(:meth:`ShadowComparison.merge`), travel as JSON (:meth:`ShadowComparison.as_dict`),
and read as the replay's diff report (:meth:`ShadowComparison.as_diff`), so
``bizevents shadow report`` and ``bizevents replay --diff`` print one format.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, Literal, TypeVar

from pydantic import BaseModel

from bizevents.plumbing.errors import ConfigError
from bizevents.translators.api import Translator
from bizevents.translators.transaction_api import is_transactional

Verdict = Literal["identical", "differing", "only_live", "only_shadow"]
VERDICTS: Final[tuple[Verdict, ...]] = ("identical", "differing", "only_live", "only_shadow")
#: Samples kept per contract and verdict (but ``identical``) for the report.
SAMPLES: Final = 3

#: One event as the comparison sees it: its id, its contract and its content.
Seen = tuple[str, str, Mapping[str, Any]]

# The diff report's names for the verdicts (bizevents.replay.diff.KINDS).
_DIFF_KINDS: Final[dict[Verdict, str]] = {
    "identical": "equal",
    "differing": "changed",
    "only_live": "only_a",
    "only_shadow": "only_b",
}


def differing_fields(live: Mapping[str, Any], shadow: Mapping[str, Any]) -> list[str]:
    """The dotted names of the leaves that differ between two events' contents, sorted
    (the top-level ``lineage`` left out).

    A nested record (a dict or a model) is compared field by field (``address.city``);
    a list, and a field present on one side only, are leaves.
    """
    if live == shadow:
        return []
    found: list[str] = []
    _walk(live, shadow, "", found)
    return sorted(found)


def _walk(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str, found: list[str]) -> None:
    # two events of one contract have the same fields: no set of names to build then
    names = a.keys() if a.keys() == b.keys() else a.keys() | b.keys()
    for name in names:
        if not prefix and name == "lineage":
            continue
        left, right = a.get(name, _ABSENT), b.get(name, _ABSENT)
        if left is right or (left == right and left.__class__ is not float):
            continue
        path = f"{prefix}{name}"
        left, right = _fields(left), _fields(right)
        if isinstance(left, Mapping) and isinstance(right, Mapping):
            _walk(left, right, f"{path}.", found)
        elif not _same(left, right):
            found.append(path)


def _fields(value: Any) -> Any:
    # a nested record built by a translator is a model: compare its fields
    return value.__dict__ if isinstance(value, BaseModel) else value


def plain(content: Mapping[str, Any]) -> dict[str, Any]:
    """An event's content as JSON-able values for a report's samples (lineage left out;
    enums as their names; decimals, times and bytes as text)."""
    return {k: _plain(v) for k, v in content.items() if k != "lineage"}


def _plain(value: Any) -> Any:
    value = _fields(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.name
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _same(a: Any, b: Any) -> bool:
    # NaN is its own value here: a version that keeps a NaN as it was does not differ.
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


_ABSENT: Final = object()


@dataclass(slots=True)
class ContractFigures:
    """One contract's events, by verdict, and per field the events that differ on it."""

    identical: int = 0
    differing: int = 0
    only_live: int = 0
    only_shadow: int = 0
    fields: dict[str, int] = field(default_factory=dict)

    @property
    def events(self) -> int:
        return self.identical + self.differing + self.only_live + self.only_shadow

    def count(self, verdict: Verdict) -> int:
        value: int = getattr(self, verdict)
        return value


@dataclass(slots=True)
class ShadowComparison:
    """The comparison of a shadow version with the live one over the changes both saw."""

    live: str
    shadow: str
    #: Changes both versions read; of them, those either version translated (gave
    #: events or failed on): what the gate counts, since a change neither translates
    #: (a snapshot both skip, an op neither takes) compares nothing.
    changes: int = 0
    translated: int = 0
    contracts: dict[str, ContractFigures] = field(default_factory=dict)
    #: Per contract, per verdict: a few ``{"event_id", "live", "shadow", "fields"}``.
    samples: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    #: Events that differ on anything but the given fields (see :meth:`unexpected`):
    #: counted as they come, since the figures per field cannot tell it afterwards.
    _by_fields: dict[tuple[str, tuple[str, ...]], int] = field(default_factory=dict)
    live_failures: int = 0
    shadow_failures: int = 0

    def add_change(self, live: Sequence[Seen], shadow: Sequence[Seen], changes: int = 1) -> None:
        """The events both versions made of one change (none is a change too); of a
        transaction, ``changes`` is how many of its changes they read."""
        self.changes += changes
        if live or shadow:
            self.translated += changes
        if len(live) == 1 and len(shadow) == 1:
            # the usual case, one event each: no pairing table
            (event_id, contract, content), (other_id, other_contract, other) = live[0], shadow[0]
            if event_id == other_id and contract == other_contract:
                self._pair(event_id, contract, content, other)
                return
        theirs = {event_id: (contract, content) for event_id, contract, content in shadow}
        for event_id, contract, content in live:
            found = theirs.pop(event_id, None)
            if found is None:
                self._add(contract, "only_live", event_id, content, None, ())
            elif found[0] != contract:
                # one id, two contracts: cannot be (the contract is in the id); say so anyway
                self._add(contract, "only_live", event_id, content, None, ())
                self._add(found[0], "only_shadow", event_id, None, found[1], ())
            else:
                self._pair(event_id, contract, content, found[1])
        for event_id, (contract, content) in theirs.items():
            self._add(contract, "only_shadow", event_id, None, content, ())

    def _pair(
        self, event_id: str, contract: str, live: Mapping[str, Any], shadow: Mapping[str, Any]
    ) -> None:
        names = differing_fields(live, shadow)
        if not names:
            figures = self.contracts.get(contract)
            if figures is None:
                figures = self.contracts[contract] = ContractFigures()
            figures.identical += 1
            return
        self._add(contract, "differing", event_id, live, shadow, names)

    def failed(self, *, live: bool) -> None:
        """A change one version could not translate (it dead-lettered it)."""
        if live:
            self.live_failures += 1
        else:
            self.shadow_failures += 1

    def add_failure(self, *, live: bool, changes: int = 1) -> None:
        """A change (of a transaction, ``changes`` of them) read by both versions, that
        one of them could not translate."""
        self.changes += changes
        self.translated += changes
        self.failed(live=live)

    def _add(
        self,
        contract: str,
        verdict: Verdict,
        event_id: str,
        live: Mapping[str, Any] | None,
        shadow: Mapping[str, Any] | None,
        names: Iterable[str],
    ) -> None:
        figures = self.contracts.get(contract)
        if figures is None:
            figures = self.contracts[contract] = ContractFigures()
        setattr(figures, verdict, figures.count(verdict) + 1)
        names = tuple(names)
        for name in names:
            figures.fields[name] = figures.fields.get(name, 0) + 1
        if verdict == "differing":
            key = (contract, names)
            self._by_fields[key] = self._by_fields.get(key, 0) + 1
        if verdict != "identical":
            kept = self.samples.setdefault(contract, {}).setdefault(verdict, [])
            if len(kept) < SAMPLES:
                kept.append(
                    {
                        "event_id": event_id,
                        "live": None if live is None else plain(live),
                        "shadow": None if shadow is None else plain(shadow),
                        "fields": list(names),
                    }
                )

    @property
    def events(self) -> int:
        return sum(figures.events for figures in self.contracts.values())

    def unexpected(self, expected: frozenset[str]) -> int:
        """Events that differ in a way the operator did not expect: made by one version
        only, or differing on a field not in ``expected`` (a bare name matches that field
        at any depth of any contract; ``Contract.field`` one contract's)."""
        count = sum(f.only_live + f.only_shadow for f in self.contracts.values())
        for (contract, names), n in self._by_fields.items():
            if any(not _expected(contract, name, expected) for name in names):
                count += n
        return count

    def merge(self, other: ShadowComparison) -> None:
        """Add another part's figures (another partition, another worker)."""
        self.changes += other.changes
        self.translated += other.translated
        self.live_failures += other.live_failures
        self.shadow_failures += other.shadow_failures
        for contract, theirs in other.contracts.items():
            mine = self.contracts.setdefault(contract, ContractFigures())
            for verdict in VERDICTS:
                setattr(mine, verdict, mine.count(verdict) + theirs.count(verdict))
            for name, n in theirs.fields.items():
                mine.fields[name] = mine.fields.get(name, 0) + n
        for key, n in other._by_fields.items():
            self._by_fields[key] = self._by_fields.get(key, 0) + n
        for contract, by_verdict in other.samples.items():
            for name, samples in by_verdict.items():
                kept = self.samples.setdefault(contract, {}).setdefault(name, [])
                kept.extend(samples[: max(0, SAMPLES - len(kept))])

    def as_dict(self) -> dict[str, Any]:
        """JSON-able, and read back by :meth:`from_dict`."""
        return {
            "live": self.live,
            "shadow": self.shadow,
            "changes": self.changes,
            "translated": self.translated,
            "contracts": {
                contract: {**{v: f.count(v) for v in VERDICTS}, "fields": dict(f.fields)}
                for contract, f in self.contracts.items()
            },
            "by_fields": [
                {"contract": contract, "fields": list(names), "events": n}
                for (contract, names), n in self._by_fields.items()
            ],
            "samples": self.samples,
            "live_failures": self.live_failures,
            "shadow_failures": self.shadow_failures,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ShadowComparison:
        made = cls(str(data["live"]), str(data["shadow"]), int(data["changes"]))
        # written before the figure was kept: every change counted
        made.translated = int(data.get("translated", made.changes))
        for contract, figures in data["contracts"].items():
            made.contracts[contract] = ContractFigures(
                identical=int(figures["identical"]),
                differing=int(figures["differing"]),
                only_live=int(figures["only_live"]),
                only_shadow=int(figures["only_shadow"]),
                fields=dict(figures["fields"]),
            )
        for row in data["by_fields"]:
            made._by_fields[(row["contract"], tuple(row["fields"]))] = int(row["events"])
        made.samples = {c: dict(v) for c, v in data["samples"].items()}
        made.live_failures = int(data["live_failures"])
        made.shadow_failures = int(data["shadow_failures"])
        return made

    def as_diff(self) -> dict[str, Any]:
        """The comparison in the replay's diff report format
        (``bizevents.replay.diff.DiffReport.as_dict``), live as ``a``, shadow as ``b``."""
        counts = {
            contract: {_DIFF_KINDS[v]: f.count(v) for v in VERDICTS}
            for contract, f in self.contracts.items()
        }
        samples = {
            contract: {
                _DIFF_KINDS[verdict]: [  # type: ignore[index]
                    {
                        "event_id": s["event_id"],
                        **({"a": s["live"]} if s["live"] is not None else {}),
                        **({"b": s["shadow"]} if s["shadow"] is not None else {}),
                    }
                    for s in kept
                ]
                for verdict, kept in by_verdict.items()
            }
            for contract, by_verdict in self.samples.items()
        }
        return {
            "counts": counts,
            "samples": samples,
            "dead_letters_a": self.live_failures,
            "dead_letters_b": self.shadow_failures,
        }


def _expected(contract: str, name: str, expected: frozenset[str]) -> bool:
    if f"{contract.rsplit('.', 1)[-1]}.{name}" in expected or f"{contract}.{name}" in expected:
        return True
    # a bare name matches the field itself and any leaf under it (``address`` covers
    # ``address.city``), at the top level or as a nested field's last part
    parts = name.split(".")
    return any(".".join(parts[: i + 1]) in expected for i in range(len(parts))) or (
        parts[-1] in expected
    )


_FRACTION: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(%?)\s*")


def parse_fraction(text: str) -> float:
    """``"0.5%"`` or ``"0.005"`` as a fraction in [0, 1]; a sentence otherwise."""
    match = _FRACTION.fullmatch(text)
    if match is None:
        raise ValueError(
            f"{text!r} is not a fraction: give a percentage (0.5%) or a number (0.005)"
        )
    value = float(match.group(1)) / (100 if match.group(2) else 1)
    if value > 1:
        raise ValueError(f"{text!r} is more than 100%")
    return value


@dataclass(frozen=True, slots=True)
class PromotionGate:
    """What the shadow's comparison must show before it is pinned live.

    - at least ``min_changes`` changes compared: changes either version translated
      (gave events or failed on), not every change read;
    - events that differ in a way not expected (made by one version only, or differing
      on a field not in ``expect_fields``) at most ``max_differ`` of all events compared
      (the default 0: every field that differs must be expected, and both versions must
      make the same events);
    - neither version failed on a change the other translated (a shadow that
      dead-letters what the live version takes is not a fix).
    """

    max_differ: float = 0.0
    min_changes: int = 10_000
    expect_fields: frozenset[str] = frozenset()

    def failures(self, comparison: ShadowComparison) -> list[str]:
        """One sentence per condition not met, with its figures (none: the gate passes)."""
        found: list[str] = []
        if comparison.translated < self.min_changes:
            found.append(
                f"{comparison.shadow} was compared over {comparison.translated:,} changes, "
                f"fewer than the {self.min_changes:,} the gate asks (of {comparison.changes:,} "
                "read, neither version translated the others)"
            )
        events = comparison.events
        unexpected = comparison.unexpected(self.expect_fields)
        share = unexpected / events if events else 0.0
        if unexpected and share > self.max_differ:
            fields = _unexpected_fields(comparison, self.expect_fields)
            named = ", ".join(f"{name} ({n:,})" for name, n in fields) or "none"
            only = sum(f.only_live + f.only_shadow for f in comparison.contracts.values())
            found.append(
                f"{unexpected:,} of {events:,} events ({share:.2%}) differ where not expected, "
                f"more than the {self.max_differ:.2%} allowed: fields {named}; "
                f"{only:,} made by one version only"
            )
        if comparison.shadow_failures > comparison.live_failures:
            found.append(
                f"{comparison.shadow} dead-lettered {comparison.shadow_failures:,} changes, "
                f"{comparison.live} {comparison.live_failures:,}"
            )
        return found


def _unexpected_fields(
    comparison: ShadowComparison, expected: frozenset[str]
) -> list[tuple[str, int]]:
    found: dict[str, int] = {}
    for contract, figures in comparison.contracts.items():
        short = contract.rsplit(".", 1)[-1]
        for name, n in figures.fields.items():
            if not _expected(contract, name, expected):
                found[f"{short}.{name}"] = found.get(f"{short}.{name}", 0) + n
    return sorted(found.items(), key=lambda item: (-item[1], item[0]))


class ShadowBook:
    """The comparisons a worker holds: one per shadow version and technical partition,
    so a partition's figures move with it to the member that takes it over.

    Published to the compacted shadows topic keyed by ``<shadow>|<topic>|<partition>``
    (:meth:`encode`), the latest record per key being that partition's figures so far;
    read back at start and at each assignment (:meth:`load`), merged for a report
    (:meth:`total`).
    """

    def __init__(self) -> None:
        self.parts: dict[tuple[str, str, int], ShadowComparison] = {}
        self._dirty: set[tuple[str, str, int]] = set()

    def add(self, topic: str, partition: int, comparisons: Mapping[str, ShadowComparison]) -> None:
        for ref, comparison in comparisons.items():
            slot = (ref, topic, partition)
            mine = self.parts.get(slot)
            if mine is None:
                mine = self.parts[slot] = ShadowComparison(comparison.live, comparison.shadow)
            mine.merge(comparison)
            self._dirty.add(slot)

    def load(self, key: bytes, value: bytes | None) -> None:
        """A record of the shadows topic (the latest per key wins: read it in order);
        a record that does not read is skipped (its partition counts again from zero)."""
        try:
            ref, topic, partition = key.decode().rsplit("|", 2)
            slot = (ref, topic, int(partition))
            if value is None:
                self.parts.pop(slot, None)
                return
            self.parts[slot] = ShadowComparison.from_dict(json.loads(value))
        except (ValueError, KeyError, TypeError, AttributeError):
            return

    def restore(
        self,
        records: Mapping[bytes, bytes | None],
        held: Iterable[tuple[str, int]],
        topics: Collection[str] | None = None,
    ) -> None:
        """After an assignment: forget the partitions no longer ``held``, and take the
        figures of newly held ones from the shadows topic's latest ``records`` (those
        this worker kept hold of stay as counted here, which is newer). With ``topics``,
        only those topics' partitions are concerned: the row worker's technical
        partitions and the transaction worker's virtual partitions share one book."""
        keep = set(held)
        for slot in [
            slot
            for slot in self.parts
            if (slot[1], slot[2]) not in keep and (topics is None or slot[1] in topics)
        ]:
            del self.parts[slot]
            self._dirty.discard(slot)
        incoming = ShadowBook()
        for key, value in records.items():
            incoming.load(key, value)
        for slot, comparison in incoming.parts.items():
            if (slot[1], slot[2]) in keep and slot not in self.parts:
                self.parts[slot] = comparison

    def dirty(self) -> list[tuple[bytes, bytes]]:
        """The records of the partitions whose figures changed since the last call."""
        out = [self.encode(slot) for slot in sorted(self._dirty)]
        self._dirty.clear()
        return out

    def encode(self, slot: tuple[str, str, int]) -> tuple[bytes, bytes]:
        ref, topic, partition = slot
        value = json.dumps(self.parts[slot].as_dict(), sort_keys=True, separators=(",", ":"))
        return f"{ref}|{topic}|{partition}".encode(), value.encode()

    def shadows(self) -> list[str]:
        return sorted({ref for ref, _, _ in self.parts})

    def total(self, shadow: str) -> ShadowComparison | None:
        """One shadow's figures over every partition (None: no partition has any)."""
        found = [c for (ref, _, _), c in sorted(self.parts.items()) if ref == shadow]
        if not found:
            return None
        whole = ShadowComparison(found[0].live, found[0].shadow)
        for part in found:
            whole.merge(part)
        return whole


_T = TypeVar("_T", bound=Translator)


def shadowed(live: Sequence[_T], shadows: Sequence[_T]) -> dict[str, _T]:
    """Per live version (``ref``) among ``live``: the version of ``shadows`` in its shadow.
    ``ValueError`` for a shadow of no live version, or of the live version itself."""
    found: dict[str, _T] = {}
    for shadow in shadows:
        versions = [t for t in live if t.name == shadow.name]
        if len(versions) != 1 or versions[0].version == shadow.version:
            raise ValueError(f"{shadow.ref} shadows no live version of {shadow.name}")
        found[versions[0].ref] = shadow
    return found


def check_shadows(shadows: Sequence[Translator], live: Sequence[Translator]) -> None:
    """Refuse, with a sentence, a shadow the worker cannot run beside the live versions:
    one of no pinned name, of the live version itself, of other sources, of another kind
    (a transaction translator beside a row translator, or the reverse), or a transaction
    translator declaring other business keys than the live one."""
    seen: set[str] = set()
    for shadow in shadows:
        pinned = [t for t in live if t.name == shadow.name]
        if not pinned:
            raise ConfigError(
                f"{shadow.ref} cannot run in the shadow: no version of {shadow.name} is "
                f"pinned live ([translators] {shadow.name} = N)"
            )
        current = pinned[0]
        if current.version == shadow.version:
            raise ConfigError(f"{shadow.ref} is the live version; shadow another one")
        if shadow.name in seen:
            raise ConfigError(f"one shadow of {shadow.name} at a time, not two")
        seen.add(shadow.name)
        if is_transactional(shadow) != is_transactional(current):
            kinds = {True: "a transaction translator", False: "a row translator"}
            raise ConfigError(
                f"{shadow.ref} is {kinds[is_transactional(shadow)]} and the live {current.ref} "
                f"is {kinds[is_transactional(current)]}: a shadow must translate what the live "
                "version translates (each change, or whole transactions)"
            )
        if tuple(shadow.sources) != tuple(current.sources):
            raise ConfigError(
                f"{shadow.ref} reads {', '.join(shadow.sources)}, the live {current.ref} reads "
                f"{', '.join(current.sources)}: a shadow must read the same sources, so that "
                "both versions see the same changes"
            )
        keys = getattr(shadow, "keys", ()), getattr(current, "keys", ())
        if keys[0] != keys[1]:
            raise ConfigError(
                f"{shadow.ref} declares other business keys than the live {current.ref}: a "
                "shadow must declare the same keys, so that one worker translates each key's "
                "transactions with both versions"
            )
