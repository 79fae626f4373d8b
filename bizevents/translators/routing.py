"""Which member of the transaction worker's group translates a transaction: by business key.

Pure. Every member of the transaction worker's group (:mod:`bizevents.translators.txworker`)
assembles every transaction; a released transaction belongs to the virtual partitions
its business keys hash to (:func:`partitions_of`), and only the members owning one
translate it: each publishes only the events of its own keys (:func:`owner`), so every
event is published once. Every transaction of one business key belongs to the same
virtual partition, owned by one member at a time, so that key's events keep commit
order.

A change's business key is the one its translator declares for the change's table
(``keys=`` of :func:`~bizevents.translators.transaction_api.transaction_translator`,
e.g. ``store.order_items`` by ``order_id``), read from the row (after, else before, else
the primary key); a table without a declaration is keyed by the change's Kafka key.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from bizevents.contracts.envelope import ChangeEvent
from bizevents.contracts.technical.routing import routing_key
from bizevents.translators.assembly import Part, Ready
from bizevents.translators.transaction_api import TransactionTranslator

__all__ = ["business_key", "owner", "partitions_of"]


def business_key(translator: TransactionTranslator, part: Part) -> bytes:
    """The bytes of ``part``'s business key for ``translator`` (deterministic everywhere)."""
    change = part.change
    if change is None:
        return part.origin.key or b""
    columns = translator.key_columns(change.source.qualified_table)
    if columns:
        values = _values(change, columns)
        if values is not None:
            return routing_key(values)
    return part.origin.key or b""


def _values(change: ChangeEvent, columns: Sequence[str]) -> list[object] | None:
    for row in (change.after, change.before, change.key):
        if row is not None and all(c in row for c in columns):
            return [row[c] for c in columns]
    return None


def owner(translator: TransactionTranslator, part: Part, partitions: int) -> int:
    """The virtual partition whose owner publishes the events stemming from ``part``."""
    return zlib.crc32(business_key(translator, part)) % partitions


def partitions_of(
    ready: Ready, translators: Sequence[TransactionTranslator], partitions: int
) -> list[int]:
    """The virtual partitions ``ready`` belongs to: those of every business key of its
    changes, for every translator reading them (sorted; at least one)."""
    found = {
        owner(t, part, partitions)
        for part in ready.parts
        if part.change is not None
        for t in translators
        if t.reads(part.change.source.qualified_table)
    }
    if not found:  # nobody reads it (it is translated to nothing): any one partition
        found.add(zlib.crc32((ready.tx_id or "").encode()) % partitions)
    return sorted(found)
