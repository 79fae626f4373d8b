"""Lineage of business events, and their deterministic ids.

An event id is a UUIDv5 of the source change's identity, the translator's *name*
(not its version), the contract and the event's ordinal among that contract's
events from the change. The same change translated again (a restart, a replay
through a fixed version) gives the same ids, so a consumer can deduplicate, and a
corrected event supersedes the one a buggy version emitted.

The identity of a change is where the database logged it (server, table, position
and key), so it survives a re-read of the technical topic; without a position it falls
back to the Kafka coordinates.

A snapshot read (op ``r``) is not something that happened: it is the row's state when
read. Its identity is the row itself (server, table, key and the canonical JSON of its
whole ``after`` row), not where it was read, so a re-snapshot, a repair or a lost slot
that reads an unchanged row again gives its events the ids they had; a changed row gives
new ones. Its events carry the ``bizevents.snapshot`` header (docs/consuming.md says what
a consumer makes of them).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

from bizevents.contracts.business import (
    HEADER_EVENT_ID,
    HEADER_REPLAY,
    HEADER_SNAPSHOT,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_POSITION,
    HEADER_SOURCE_TOPIC,
    HEADER_TRANSLATOR,
    HEADER_TX_ID,
    BusinessEvent,
    Lineage,
    lineage_avro,
    lineage_avro_change,
    lineage_avro_translator,
    with_lineage,
)
from bizevents.contracts.envelope import OP_READ, ChangeEvent, PgPosition

try:  # translators/_lineage.c, built with the codec's extension by scripts/setup
    import bizevents.translators._lineage as _extension
except ImportError:  # not built: the Python below does it
    _extension = None

#: The translators' extension (``wire``, ``origin`` and ``change_part``), or None: not
#: built, or built from an older source (``scripts/setup`` rebuilds it).
_compiled: Final[Any] = _extension if hasattr(_extension, "origin_of") else None
#: Whether lineage goes on the wire through the compiled helpers; the Python below does
#: it otherwise.
COMPILED: Final = _compiled is not None

EVENT_ID_NAMESPACE: Final = uuid.UUID("6f1c5b1e-2d0a-5c9e-9a59-6b1d6f0e7a11")

# json.dumps(sort_keys=True, separators=(",", ":"), default=str) builds this encoder
# on every call; one instance gives the same text.
_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str).encode
# uuid5 hashes the namespace's bytes first: hash them once, copy the state per id.
# What the encoder quotes a string with (ensure_ascii, its default).
_quote: Final = json.encoder.encode_basestring_ascii
_NAMESPACE_SHA1: Final = hashlib.sha1(EVENT_ID_NAMESPACE.bytes, usedforsecurity=False)
_set: Final = object.__setattr__


def _canonical(value: Any) -> str:
    return _CANONICAL(value)


def canonical_key(key: Mapping[str, Any]) -> str:
    """``_canonical(dict(key))``: the key as sorted, compact JSON, built directly for the
    usual keys (integer and text columns: 2.5 -> 0.6 µs); any other value takes the
    encoder. The same text either way (a hypothesis test holds them together)."""
    parts = []
    for name in sorted(key):
        value = key[name]
        cls = value.__class__
        if cls is int:
            text = int.__repr__(value)
        elif cls is str:
            text = _quote(value)
        else:
            return _CANONICAL(dict(key))
        parts.append(f"{_quote(name)}:{text}")
    return "{" + ",".join(parts) + "}"


def _where(event: ChangeEvent, position: str | None) -> str:
    if position is not None:
        return position
    c = event.coordinates
    return f"{c.topic}/{c.partition}/{c.offset}"


def _identity(event: ChangeEvent, position: str | None, table: str | None = None) -> str:
    source = event.source
    key = canonical_key(event.key) if event.key is not None else ""
    table = source.qualified_table if table is None else table
    if event.op == OP_READ:
        return read_identity(source.name, table, key, event.after)
    return f"{source.name}.{table}|{event.op}|{_where(event, position)}|{key}"


def read_identity(server: str, table: str, key: str, after: Mapping[str, Any] | None) -> str:
    """A snapshot read's identity: the row (``key``: its canonical JSON) and its content,
    wherever and whenever it was read. ``after`` is the whole row as decoded (the
    pipeline decodes reads with every column, whatever its translators declare, so the
    id does not depend on which translators or versions run)."""
    content = "" if after is None else _CANONICAL(dict(after))
    return f"{server}.{table}|r|{key}|{content}"


def change_identity(event: ChangeEvent) -> str:
    position = event.source.position
    return _identity(event, None if position is None else str(position))


def event_id(identity: str, translator_name: str, contract: str, ordinal: int) -> str:
    """``str(uuid.uuid5(EVENT_ID_NAMESPACE, ...))``, without building the UUID object."""
    sha1 = _NAMESPACE_SHA1.copy()
    sha1.update(f"{identity}|{translator_name}|{contract}|{ordinal}".encode())
    d = bytearray(sha1.digest()[:16])
    d[6] = (d[6] & 0x0F) | 0x50  # version 5
    d[8] = (d[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = d.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_LINEAGE_FIELDS: Final = frozenset(Lineage.model_fields)
# Lineage is built from values this module computed with the right types, so it
# skips pydantic's validation (as model_construct does, without its generic walk).
_TRUSTED_LINEAGE: Final = not Lineage.__pydantic_post_init__ and not Lineage.__private_attributes__


def _lineage(
    event_id: str,
    translator: str,
    source_topic: str,
    source_partition: int,
    source_offset: int,
    source_position: str,
    tx_id: str | None,
    replay: bool,
) -> Lineage:
    values: dict[str, Any] = {
        "event_id": event_id,
        "translator": translator,
        "source_topic": source_topic,
        "source_partition": source_partition,
        "source_offset": source_offset,
        "source_position": source_position,
        "tx_id": tx_id,
        "replay": replay,
    }
    if not _TRUSTED_LINEAGE:
        return Lineage.model_construct(**values)
    lineage = Lineage.__new__(Lineage)
    _set(lineage, "__dict__", values)
    _set(lineage, "__pydantic_fields_set__", set(_LINEAGE_FIELDS))
    _set(lineage, "__pydantic_extra__", None)
    _set(lineage, "__pydantic_private__", None)
    return lineage


def _with_lineage(event: BusinessEvent, lineage: Lineage) -> BusinessEvent:
    """``with_lineage`` (pydantic's ``model_copy(update=...)``) for the usual contract:
    no extra fields, no private attributes."""
    if event.__pydantic_extra__ is not None or event.__pydantic_private__ is not None:
        return with_lineage(event, lineage)
    cls = event.__class__
    copied = cls.__new__(cls)
    values = event.__dict__.copy()
    values["lineage"] = lineage
    fields_set = set(event.__pydantic_fields_set__)
    fields_set.add("lineage")
    _set(copied, "__dict__", values)
    _set(copied, "__pydantic_extra__", None)
    _set(copied, "__pydantic_fields_set__", fields_set)
    _set(copied, "__pydantic_private__", None)
    return copied


_fullnames: dict[type[BusinessEvent], str] = {}


def stamp(
    events: Sequence[BusinessEvent],
    change: ChangeEvent,
    translator_name: str,
    translator_version: int,
    *,
    replay: bool = False,
) -> list[BusinessEvent]:
    """The events with their lineage set: ids, translator, source coordinates, position.

    For callers that want stamped event objects (tests, tools); the cores put the same
    lineage on the wire without building them (:class:`Stamper`, tested equal to this).
    """
    if not events:
        return []
    source = change.source
    position = source.position
    position_text = None if position is None else str(position)
    identity = _identity(change, position_text)
    where = change.coordinates
    topic = where.topic or ""
    partition = where.partition if where.partition is not None else -1
    offset = where.offset if where.offset is not None else -1
    tx_id = source.tx_id
    tx_text = str(tx_id) if tx_id is not None else None
    translator = f"{translator_name}@{translator_version}"
    replayed = bool(replay)
    ordinals: dict[str, int] = {}
    stamped = []
    for event in events:
        cls = type(event)
        contract = _fullnames.get(cls)
        if contract is None:
            contract = _fullnames[cls] = cls.contract_fullname()
        ordinal = ordinals.get(contract, 0)
        ordinals[contract] = ordinal + 1
        lineage = _lineage(
            event_id(identity, translator_name, contract, ordinal),
            translator,
            topic,
            partition,
            offset,
            position_text or "",
            tx_text,
            replayed,
        )
        stamped.append(_with_lineage(event, lineage))
    return stamped


# -- lineage on the wire, without a Lineage per event ------------------------------------

Header = tuple[str, bytes | None]


class Origin(NamedTuple):
    """What every event of one change shares: the identity its ids hash, and its
    lineage's source offset, position and transaction, encoded once (Avro and headers).
    A named tuple: built once per change, at a third of a frozen dataclass's cost."""

    identity: str
    avro: bytes
    headers: tuple[Header, ...]


#: The header of an event made from a snapshot read, after its change's others.
_SNAPSHOT_HEADERS: Final[tuple[Header, ...]] = ((HEADER_SNAPSHOT, b"true"),)


def origin(
    identity: str, offset: int, position: str, tx_id: str | None, snapshot: bool = False
) -> Origin:
    """The :class:`Origin` of events whose ids hash ``identity``, from a source record at
    ``offset``, ``position`` (text) and transaction ``tx_id``; ``snapshot``: a snapshot
    read's (its events carry the snapshot header)."""
    if _compiled is not None:
        avro, headers = _compiled.change_part(
            offset, position, tx_id, HEADER_SOURCE_OFFSET, HEADER_SOURCE_POSITION, HEADER_TX_ID
        )
        made = Origin(identity, avro, headers)
    else:
        made = _origin(identity, offset, position, tx_id)
    if snapshot:
        return Origin(identity, made.avro, made.headers + _SNAPSHOT_HEADERS)
    return made


def _origin(identity: str, offset: int, position: str, tx_id: str | None) -> Origin:
    """:func:`origin` in Python (the compiled helper is tested equal to it)."""
    offset_text = str(offset).encode()
    if tx_id is None:
        return Origin(
            identity,
            lineage_avro_change(offset, position, None),
            ((HEADER_SOURCE_OFFSET, offset_text), (HEADER_SOURCE_POSITION, position.encode())),
        )
    return Origin(
        identity,
        lineage_avro_change(offset, position, tx_id),
        (
            (HEADER_SOURCE_OFFSET, offset_text),
            (HEADER_SOURCE_POSITION, position.encode()),
            (HEADER_TX_ID, tx_id.encode()),
        ),
    )


#: The headers of a change's part, in :func:`origin`'s order.
_CHANGE_HEADERS: Final = (HEADER_SOURCE_OFFSET, HEADER_SOURCE_POSITION, HEADER_TX_ID)


def origin_of(change: ChangeEvent, table: str | None = None) -> Origin:
    """The :class:`Origin` of a change (the values :func:`stamp` puts in its Lineage);
    ``table``: its source's ``qualified_table`` where the caller has it already. A
    snapshot read's is the Python's (the compiled helpers answer None for it)."""
    if _compiled is not None:  # the usual change (PostgreSQL's position) in one call
        made: Origin | None = _compiled.origin_of(
            Origin, change, table, _CHANGE_HEADERS, PgPosition
        )
        if made is not None:
            return made
    return _origin_of(change, table)


def _origin_of(change: ChangeEvent, table: str | None = None) -> Origin:
    """:func:`origin_of` in Python (the compiled helpers are tested equal to it)."""
    source = change.source
    position = source.position
    position_text = "" if position is None else str(position)
    where = change.coordinates
    offset = -1 if where.offset is None else where.offset
    tx_id = source.tx_id
    tx_text = None if tx_id is None else str(tx_id)
    if change.op == OP_READ:
        identity = _identity(change, None, table)
        return origin(identity, offset, position_text, tx_text, snapshot=True)
    if _compiled is not None:
        made: Origin | None = _compiled.origin(
            Origin,
            source.name,
            source.qualified_table if table is None else table,
            change.op,
            _where(change, None if position is None else position_text),
            change.key,
            offset,
            position_text,
            tx_text,
            _CHANGE_HEADERS,
        )
        if made is not None:
            return made
    identity = _identity(change, None if position is None else position_text, table)
    return origin(identity, offset, position_text, tx_text)


class Stamper:
    """Lineage on the wire for one translator over one source partition: its translator,
    topic and partition are encoded once; per event only the id is hashed and encoded.

    :meth:`wire` gives what :func:`stamp` and ``lineage_headers`` give for the same
    event, as bytes: the event id, the lineage record's Avro bytes (for the serializer's
    ``lineage`` argument) and the Kafka headers.
    """

    __slots__ = ("_avro", "_compiled", "_headers", "_name", "_replay")

    def __init__(
        self, name: str, version: int, topic: str | None, partition: int | None, replay: bool
    ) -> None:
        translator = f"{name}@{version}"
        topic = topic or ""
        partition = partition if partition is not None else -1
        self._name = name
        self._avro = lineage_avro_translator(translator, topic, partition)
        self._headers = (
            (HEADER_TRANSLATOR, translator.encode()),
            (HEADER_SOURCE_TOPIC, topic.encode()),
            (HEADER_SOURCE_PARTITION, str(partition).encode()),
        )
        self._replay = replay
        #: What the compiled wire() takes of this stamper, in its order.
        self._compiled = (
            EVENT_ID_NAMESPACE.bytes,
            f"|{name}|".encode(),
            self._avro,
            self._headers,
            replay,
            HEADER_EVENT_ID,
            (HEADER_REPLAY, b"true" if replay else b"false"),
        )

    def wire(self, origin: Origin, contract: str, ordinal: int) -> tuple[str, bytes, list[Header]]:
        """The event id, the lineage's Avro bytes and the headers of one event."""
        if _compiled is not None:
            wired: tuple[str, bytes, list[Header]] = _compiled.wire(
                self._compiled, origin.identity, contract, ordinal, origin.avro, origin.headers
            )
            return wired
        return self._wire(origin, contract, ordinal)

    def _wire(self, origin: Origin, contract: str, ordinal: int) -> tuple[str, bytes, list[Header]]:
        """:meth:`wire` in Python (the compiled helper is tested equal to it)."""
        eid = event_id(origin.identity, self._name, contract, ordinal)
        headers = [(HEADER_EVENT_ID, eid.encode()), *self._headers, *origin.headers]
        headers.append((HEADER_REPLAY, b"true" if self._replay else b"false"))
        return eid, lineage_avro(eid, self._avro, origin.avro, self._replay), headers


def contract_name(cls: type[BusinessEvent]) -> str:
    """The contract's Avro fullname (cached per class): what event ids hash."""
    name = _fullnames.get(cls)
    if name is None:
        name = _fullnames[cls] = cls.contract_fullname()
    return name
