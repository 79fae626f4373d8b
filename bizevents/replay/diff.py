"""``--diff``: two translator versions over the same input, compared event by event.

Both versions run through the same :class:`~bizevents.translators.pipeline.Pipeline`, with a
serializer that writes nothing anywhere: it checks the event against its contract's
Avro schema (as the real serializer would) and returns the event's content without
its lineage, as canonical JSON. Events pair up by ``event_id``, which depends on the
source change and the translator's *name*, not its version.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from bizevents.contracts.business import BusinessEvent
from bizevents.contracts.exceptions import ContractError
from bizevents.translators.pipeline import OutRecord

Kind = Literal["equal", "changed", "only_a", "only_b"]
KINDS: Final[tuple[Kind, ...]] = ("equal", "changed", "only_a", "only_b")
SAMPLES: Final = 3


class ContentSerializer:
    """``(event, topic, lineage) -> bytes``: the contract's name and content, lineage left
    out (so ``lineage`` is ignored)."""

    def __init__(self) -> None:
        self._schemas: dict[type[BusinessEvent], Any] = {}

    def __call__(
        self, event: BusinessEvent, topic: str | None = None, lineage: bytes | None = None
    ) -> bytes:
        import fastavro

        from bizevents.contracts.serde import to_dict

        cls = type(event)
        parsed = self._schemas.get(cls)
        if parsed is None:
            parsed = self._schemas[cls] = fastavro.parse_schema(cls.contract_schema())
        data = to_dict(event)
        try:
            fastavro.schemaless_writer(io.BytesIO(), parsed, data)
        except Exception as exc:
            raise ContractError(
                f"event {cls.contract_fullname()} cannot be written with its Avro schema: {exc}"
            ) from exc
        data.pop("lineage", None)
        return json.dumps(
            {"contract": cls.contract_fullname(), "event": data},
            sort_keys=True,
            separators=(",", ":"),
            default=str,
        ).encode()


@dataclass
class DiffReport:
    """Per contract: counts of each kind, and a few samples of each kind but ``equal``."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    samples: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    dead_letters_a: int = 0
    dead_letters_b: int = 0

    def add(self, contract: str, kind: Kind, sample: dict[str, Any] | None = None) -> None:
        counts = self.counts.setdefault(contract, dict.fromkeys(KINDS, 0))
        counts[kind] += 1
        if sample is not None and kind != "equal":
            kept = self.samples.setdefault(contract, {}).setdefault(kind, [])
            if len(kept) < SAMPLES:
                kept.append(sample)

    def merge(self, other: DiffReport) -> None:
        for contract, counts in other.counts.items():
            mine = self.counts.setdefault(contract, dict.fromkeys(KINDS, 0))
            for kind, n in counts.items():
                mine[kind] += n
        for contract, by_kind in other.samples.items():
            for kind, samples in by_kind.items():
                kept = self.samples.setdefault(contract, {}).setdefault(kind, [])
                kept.extend(samples[: max(0, SAMPLES - len(kept))])
        self.dead_letters_a += other.dead_letters_a
        self.dead_letters_b += other.dead_letters_b

    def as_dict(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "samples": self.samples,
            "dead_letters_a": self.dead_letters_a,
            "dead_letters_b": self.dead_letters_b,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiffReport:
        return cls(data["counts"], data["samples"], data["dead_letters_a"], data["dead_letters_b"])


def _content(record: OutRecord) -> tuple[str, dict[str, Any]]:
    assert record.value is not None
    doc = json.loads(record.value)
    return str(doc["contract"]), doc["event"]


def compare(a: Iterable[OutRecord], b: Iterable[OutRecord], report: DiffReport) -> None:
    """Pair the events of one batch by event id and count each pair's kind."""
    only_b: dict[str, OutRecord] = {}
    for record in b:
        if record.dead_letter:
            report.dead_letters_b += 1
        else:
            only_b[record.event_id] = record
    for record in a:
        if record.dead_letter:
            report.dead_letters_a += 1
            continue
        contract, event_a = _content(record)
        other = only_b.pop(record.event_id, None)
        if other is None:
            report.add(contract, "only_a", {"event_id": record.event_id, "a": event_a})
            continue
        contract_b, event_b = _content(other)
        if contract_b == contract and event_b == event_a:
            report.add(contract, "equal")
        else:
            report.add(
                contract, "changed", {"event_id": record.event_id, "a": event_a, "b": event_b}
            )
    for record in only_b.values():
        contract, event_b = _content(record)
        report.add(contract, "only_b", {"event_id": record.event_id, "b": event_b})
