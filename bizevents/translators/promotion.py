"""Promotions: which version of a translator takes a change, across a hand-over.

``bizevents promote orders@4`` writes a :class:`Promotion` (the translator's name, the
version going live, the one leaving, when, and the shadow's figures that passed the
gate) to the compacted promotions topic. Each worker then hands over each partition it
owns at one offset: before translating the first block of that partition with the new
version, it commits that block's first offset (so every offset before it, translated by
the old version, is never read again), then writes a :class:`Handover` naming that
offset, and waits for the broker's acknowledgement. So every offset below the hand-over
was translated by the old version and every one from it on by the new one: no change is
translated by both versions, none by neither. A kill at any line leaves either no
hand-over record (the old version goes on; the partition is handed over at its next
block) or one (it holds, and a successor reading from the committed offset gives each
offset the version it had).

Pure: :class:`Pins` folds the topic's records, in order, and answers
:meth:`Pins.version` per record; the worker does the I/O. Records are JSON, keyed so that
compaction keeps the last promotion of each translator and every hand-over (one per
partition and promotion: a handful of records).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from bizevents.plumbing.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Promotion:
    """A request to put ``to`` live in place of ``previous`` (the version live when it was
    asked: what the figures compare), with the figures behind it."""

    name: str
    to: int
    previous: int
    at: str  # ISO 8601, UTC
    figures: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> bytes:
        return f"promotion|{self.name}".encode()


@dataclass(frozen=True, slots=True)
class Handover:
    """Partition ``topic``/``partition`` takes ``to`` from ``offset`` on, ``previous`` before."""

    name: str
    to: int
    previous: int
    topic: str
    partition: int
    offset: int
    at: str

    @property
    def key(self) -> bytes:
        return f"handover|{self.name}|{self.to}|{self.at}|{self.topic}|{self.partition}".encode()


def encode(record: Promotion | Handover) -> tuple[bytes, bytes]:
    """The record's key and value for the promotions topic."""
    kind = "promotion" if isinstance(record, Promotion) else "handover"
    value = {"kind": kind, **asdict(record)}
    return record.key, json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def write(kafka: dict[str, Any], topic: str, record: Promotion | Handover) -> None:
    """Write ``record`` to the promotions topic (made compacted when missing) and return
    once the broker acknowledged it; a sentence (nothing changed) when it did not."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from bizevents.plumbing.kafka import DeliveryError, ensure_topics, send_confirmed

    ensure_topics(AdminClient(kafka), [topic], 1, config={"cleanup.policy": "compact"})
    producer = Producer({**kafka, "acks": "all", "enable.idempotence": True})
    key, value = encode(record)
    try:
        send_confirmed(producer, topic, [(key, value, 0)])
    except DeliveryError as exc:
        raise ConfigError(
            f"the broker did not take the promotion in {topic}: {exc.reason}; nothing changed"
        ) from None


def decode(value: bytes, where: str) -> Promotion | Handover:
    """A record of the promotions topic; a sentence naming ``where`` if it is not one."""
    try:
        data = json.loads(value)
        kind = data.pop("kind")
        if kind == "promotion":
            return Promotion(
                str(data["name"]),
                int(data["to"]),
                int(data["previous"]),
                str(data["at"]),
                dict(data.get("figures", {})),
            )
        if kind == "handover":
            return Handover(
                str(data["name"]),
                int(data["to"]),
                int(data["previous"]),
                str(data["topic"]),
                int(data["partition"]),
                int(data["offset"]),
                str(data["at"]),
            )
        raise ValueError(f"unknown kind {kind!r}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"the promotion record at {where} cannot be read: {exc}") from exc


class Pins:
    """The version of each translator per partition and offset, from the configured pins
    and the promotions topic's records (folded in the topic's order)."""

    def __init__(self, configured: Mapping[str, int]) -> None:
        self.configured = dict(configured)
        #: The last promotion of each translator.
        self.promotions: dict[str, Promotion] = {}
        #: Per (name, topic, partition): the hand-overs, by offset.
        self._handovers: dict[tuple[str, str, int], list[Handover]] = {}

    def apply(self, record: Promotion | Handover) -> None:
        if isinstance(record, Promotion):
            self.promotions[record.name] = record
            return
        found = self._handovers.setdefault((record.name, record.topic, record.partition), [])
        if record not in found:
            found.append(record)
            found.sort(key=lambda h: h.offset)

    def referenced(self, name: str) -> set[int]:
        """Every version of ``name`` a partition may be on, or be handed over to."""
        found = {self.configured[name]} if name in self.configured else set()
        promotion = self.promotions.get(name)
        if promotion is not None:
            found |= {promotion.to, promotion.previous}
        for (handed, _, _), handovers in self._handovers.items():
            if handed == name:
                found |= {v for h in handovers for v in (h.to, h.previous)}
        return found

    def live(self, name: str) -> int:
        """The version a partition not yet handed over ends on: the last promotion's, else
        the configured pin."""
        promotion = self.promotions.get(name)
        return promotion.to if promotion is not None else self.configured[name]

    def version(self, name: str, topic: str, partition: int, offset: int) -> int:
        """The version that translates the record at ``offset``: the last hand-over's at
        or before it, else the one the partition was on before its first hand-over."""
        found = self._handovers.get((name, topic, partition))
        if found:
            for handover in reversed(found):
                if handover.offset <= offset:
                    return handover.to
            return found[0].previous
        # never handed over: the worker has translated it with the configured pin
        return self.configured[name]

    def pending(self, name: str, topic: str, partition: int) -> int | None:
        """The version this partition must be handed over to before its next block
        (None: it is on the live version)."""
        promotion = self.promotions.get(name)
        if promotion is None:
            return None
        found = self._handovers.get((name, topic, partition))
        current = found[-1].to if found else self.configured[name]
        return promotion.to if current != promotion.to else None
