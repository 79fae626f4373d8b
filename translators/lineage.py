"""Lineage of business events, and their deterministic ids.

An event id is a UUIDv5 of the source change's identity, the translator's *name*
(not its version), the contract and the event's ordinal among that contract's
events from the change. The same change translated again (a restart, a replay
through a fixed version) gives the same ids, so a consumer can deduplicate, and a
corrected event supersedes the one a buggy version emitted.

The identity of a change is where the database logged it (server, table, position
and key: the key tells apart the rows of one snapshot, which share a position), so
it survives a re-read of the technical topic; without a position it falls back to
the Kafka coordinates.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any, Final

from contracts.business import BusinessEvent, Lineage, with_lineage
from contracts.envelope import ChangeEvent

EVENT_ID_NAMESPACE: Final = uuid.UUID("6f1c5b1e-2d0a-5c9e-9a59-6b1d6f0e7a11")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def change_identity(event: ChangeEvent) -> str:
    source = event.source
    position = event.source.position
    where = (
        str(position)
        if position is not None
        else f"{event.coordinates.topic}/{event.coordinates.partition}/{event.coordinates.offset}"
    )
    key = _canonical(dict(event.key)) if event.key is not None else ""
    return f"{source.name}.{source.qualified_table}|{event.op}|{where}|{key}"


def event_id(identity: str, translator_name: str, contract: str, ordinal: int) -> str:
    return str(uuid.uuid5(EVENT_ID_NAMESPACE, f"{identity}|{translator_name}|{contract}|{ordinal}"))


def stamp(
    events: Sequence[BusinessEvent],
    change: ChangeEvent,
    translator_name: str,
    translator_version: int,
    *,
    replay: bool = False,
) -> list[BusinessEvent]:
    """The events with their lineage set: ids, translator, source coordinates, position."""
    if not events:
        return []
    identity = change_identity(change)
    where = change.coordinates
    position = change.source.position
    tx_id = change.source.tx_id
    ordinals: dict[str, int] = {}
    stamped = []
    for event in events:
        contract = type(event).contract_fullname()
        ordinal = ordinals.get(contract, 0)
        ordinals[contract] = ordinal + 1
        lineage = Lineage(
            event_id=event_id(identity, translator_name, contract, ordinal),
            translator=f"{translator_name}@{translator_version}",
            source_topic=where.topic or "",
            source_partition=where.partition if where.partition is not None else -1,
            source_offset=where.offset if where.offset is not None else -1,
            source_position=str(position) if position is not None else "",
            tx_id=str(tx_id) if tx_id is not None else None,
            replay=replay,
        )
        stamped.append(with_lineage(event, lineage))
    return stamped
