"""Test a translator without a broker: build changes in one line, run the live core on them.

::

    from bizevents.testing import change, run

    result = run(orders_v2, [change("store.orders", "c", after={"id": 9, ...})])
    assert [type(e) for e in result.events] == [OrderPlaced]

:func:`change` builds a realistic :class:`~translators.Change` (a PostgreSQL
``source`` block with sensible defaults). :func:`run` writes the changes as capture
does (Debezium Avro envelopes, Confluent-framed, their schemas in an in-memory
registry), and feeds those bytes to the same :class:`~bizevents.translators.pipeline.Pipeline`
the worker and the replay run: the same decoder, routing, skip policies, drops,
dead letters, lineage, event ids and serializer. Each event's bytes are then read back
with its contract's Avro schema, and must give the event again.

:func:`assert_matches_golden` pins a translator version's output in a file, in one line.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from bizevents.contracts.business import (
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_TOPIC,
    BusinessEvent,
    Lineage,
    dead_letter_cause,
)
from bizevents.contracts.change import Change
from bizevents.contracts.envelope import OP_READ, OPS, ChangeEvent, PgPosition, Row, Source
from bizevents.contracts.logical import UNAVAILABLE, ColumnType, Field, JsonDocument, Kind
from bizevents.contracts.serde import BusinessDeserializer, BusinessSerializer
from bizevents.contracts.technical import AutoDecoder, AvroEncoder, TableSchema
from bizevents.translators.api import Translator
from bizevents.translators.exceptions import TranslationError
from bizevents.translators.pipeline import (
    Counts,
    OutRecord,
    Pipeline,
    SourceRecord,
)
from bizevents.translators.registry import Registry

__all__ = [
    "GOLDEN_ENV",
    "DeadLetter",
    "Emitted",
    "RunResult",
    "assert_matches_golden",
    "change",
    "run",
]

#: Set to ``1`` to (re)write golden files instead of comparing with them.
GOLDEN_ENV: Final = "BIZEVENTS_UPDATE_GOLDEN"
SERVER: Final = "test"
TS_MS: Final = 1_767_225_600_000  # 2026-01-01T00:00:00Z: a fixed clock, stable goldens
_FRAME_SIZE: Final = 5  # magic byte and schema id


def change(
    table: str,
    op: str,
    *,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    key: Mapping[str, Any] | None = None,
    position: int | None = None,
    txid: int | None = None,
    server: str = SERVER,
    ts_ms: int = TS_MS,
) -> Change:
    """A change of ``schema.table`` as capture reads it from PostgreSQL.

    ``op`` is ``c`` (insert), ``u`` (update), ``d`` (delete) or ``r`` (a snapshot
    read). ``key`` defaults to the row's ``id`` column when it has one. ``position``
    is the LSN and ``txid`` the transaction; :func:`run` numbers the changes that
    leave them out in the order given, as the database would.
    """
    schema, dot, name = table.partition(".")
    if not dot or not schema or not name:
        raise ValueError(f"table {table!r} must be schema.table, e.g. store.orders")
    if op not in OPS or op == "t":
        raise ValueError(f"op {op!r} must be one of c, u, d, r")
    needs = {"c": (False, True), "r": (False, True), "u": (None, True), "d": (True, False)}
    want_before, want_after = needs[op]
    if want_after and after is None:
        raise ValueError(f"a change with op {op!r} needs after={{...}}")
    if not want_after and after is not None:
        raise ValueError(f"a change with op {op!r} has no after row")
    if want_before and before is None:
        raise ValueError(f"a change with op {op!r} needs before={{...}}")
    if want_before is False and before is not None:
        raise ValueError(f"a change with op {op!r} has no before row")
    row = after if after is not None else before or {}
    if key is None and "id" in row:
        key = {"id": row["id"]}
    source = Source(
        connector="postgresql",
        name=server,
        db=server,
        schema=schema,
        table=name,
        ts_ms=ts_ms,
        snapshot_raw="true" if op == OP_READ else "false",
        position=PgPosition(lsn=position, tx_id=txid),
        version="bizevents-testing",
    )
    return Change(
        ChangeEvent(
            op=op,  # type: ignore[arg-type]  # checked against OPS above
            source=source,
            before=None if before is None else dict(before),
            after=None if after is None else dict(after),
            key=None if key is None else dict(key),
            ts_ms=ts_ms,
        )
    )


@dataclass(frozen=True, slots=True)
class Emitted:
    """One business event as the live path produces it, and the change it came from."""

    change: int  # index of the change in the list given to run()
    event: BusinessEvent  # read back from ``value`` with the contract's schema
    topic: str
    key: bytes | None
    value: bytes  # Confluent wire format: magic byte, schema id, Avro body
    headers: list[tuple[str, bytes | None]]
    translator: str

    @property
    def event_id(self) -> str:
        return self.event.lineage.event_id

    @property
    def lineage(self) -> Lineage:
        return self.event.lineage


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A change the live path would send to the dead-letter topic, and why."""

    change: int
    stage: str
    reason: str
    translator: str


@dataclass(slots=True)
class RunResult:
    """What :func:`run` produced: events, dead letters and the per-translator counts."""

    changes: list[Change]
    emitted: list[Emitted] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    counts: dict[str, Counts] = field(default_factory=dict)

    @property
    def events(self) -> list[BusinessEvent]:
        return [e.event for e in self.emitted]

    @property
    def payloads(self) -> list[BusinessEvent]:
        """The events without their lineage, to compare with events built by hand."""
        bare = Lineage()
        return [e.event.model_copy(update={"lineage": bare}) for e in self.emitted]

    @property
    def event_ids(self) -> list[str]:
        return [e.event_id for e in self.emitted]

    def of(self, index: int) -> list[BusinessEvent]:
        """The events of the change at ``index``."""
        return [e.event for e in self.emitted if e.change == index]

    def golden(self) -> list[dict[str, Any]]:
        """A plain, stable view of the outcome per change, as golden files hold it."""
        out = []
        for index, item in enumerate(self.changes):
            entry: dict[str, Any] = {"change": _describe(item)}
            entry["events"] = [_event_view(e) for e in self.emitted if e.change == index]
            dead = [dataclasses.asdict(d) for d in self.dead_letters if d.change == index]
            if dead:
                entry["dead_letters"] = dead
            out.append(entry)
        return out


def run(
    translators: Translator | Sequence[Translator],
    changes: Change | Iterable[Change],
    *,
    replay: bool = False,
    allow_dead_letters: bool = False,
) -> RunResult:
    """Run ``translators`` on ``changes`` through the live path's core, in-process.

    A dead letter (the translator raised, or an event broke its contract) fails with
    its reason unless ``allow_dead_letters`` is set; then it is in the result. Two
    translators of one ``name@version`` are refused, as the worker refuses them.
    """
    chosen = [translators] if isinstance(translators, Translator) else list(translators)
    Registry(chosen)  # the worker's check: a name@version registered twice
    given = [changes] if isinstance(changes, Change) else list(changes)
    numbered = [_numbered(item, index) for index, item in enumerate(given)]
    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    records, origin = _records(client, numbered)

    def schema_for_id(schema_id: int) -> str:
        return str(client.get_schema(schema_id).schema_str)

    serializer = BusinessSerializer(client)
    pipeline = Pipeline(chosen, AutoDecoder(schema_for_id), serializer, replay=replay)
    outcome = pipeline.process(records)
    readers = {t.ref: BusinessDeserializer(client, *t.emits) for t in chosen}
    result = RunResult(numbered, counts=outcome.counts)
    for out in outcome.records:
        index = origin[_origin_of(out)]
        if out.dead_letter:
            stage, reason = dead_letter_cause(dict(out.headers))
            result.dead_letters.append(DeadLetter(index, stage, reason, out.translator))
            continue
        assert out.value is not None
        event = readers[out.translator](out.value, out.topic)
        if event.lineage.event_id != out.event_id or serializer(event, out.topic) != out.value:
            raise AssertionError(
                f"{out.translator}: event {out.event_id} ({type(event).__name__}) does not "
                "survive a round trip through its contract's Avro schema"
            )
        result.emitted.append(
            Emitted(index, event, out.topic, out.key, out.value, out.headers, out.translator)
        )
    if result.dead_letters and not allow_dead_letters:
        first = result.dead_letters[0]
        raise AssertionError(
            f"{first.translator} dead-lettered change #{first.change} "
            f"({_describe(numbered[first.change])}) at stage {first.stage}: {first.reason}"
        ) from _raised(chosen, first, numbered[first.change])
    return result


def _raised(chosen: Sequence[Translator], dead: DeadLetter, item: Change) -> BaseException | None:
    """The translator's own exception for a ``translate`` dead letter, run once more on
    its change (a translator is a pure function), so that pytest shows its traceback."""
    if dead.stage != "translate":
        return None
    for translator in chosen:
        if translator.ref == dead.translator:
            try:
                translator.translate(item)
            except TranslationError as exc:
                return exc.__cause__ or exc
    return None


def assert_matches_golden(
    translators: Translator | Sequence[Translator],
    changes: Iterable[Change],
    path: str | os.PathLike[str],
    *,
    replay: bool = False,
) -> RunResult:
    """Run the changes and compare the outcome with the golden file at ``path``.

    With ``BIZEVENTS_UPDATE_GOLDEN=1`` the file is (re)written instead; review the
    diff and commit it. A difference fails with a readable unified diff.
    """
    result = run(translators, changes, replay=replay, allow_dead_letters=True)
    text = json.dumps(result.golden(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    golden = Path(path)
    if os.environ.get(GOLDEN_ENV) == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
        return result
    if not golden.exists():
        raise AssertionError(
            f"golden file {golden} does not exist; run the test with {GOLDEN_ENV}=1 to write it"
        )
    expected = golden.read_text(encoding="utf-8")
    if expected != text:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"{golden} (golden)",
                "this run",
            )
        )
        raise AssertionError(
            f"the output differs from golden file {golden} "
            f"(if the change is intended, rerun with {GOLDEN_ENV}=1):\n{diff}"
        )
    return result


# -- encoding the changes as capture writes them ----------------------------------------


def _numbered(item: Change, index: int) -> Change:
    """The change with an LSN and a transaction id: capture always writes both."""
    event = item.event
    position = event.source.position
    if isinstance(position, PgPosition) and None not in (position.lsn, position.tx_id):
        return item
    lsn = position.lsn if isinstance(position, PgPosition) else None
    tx_id = position.tx_id if isinstance(position, PgPosition) else None
    filled = PgPosition(
        lsn=lsn if lsn is not None else 0x1000000 + 0x100 * index,
        tx_id=tx_id if tx_id is not None else 1000 + index,
    )
    source = dataclasses.replace(event.source, position=filled)
    return Change(dataclasses.replace(event, source=source))


def _records(
    client: SchemaRegistryClient, changes: Sequence[Change]
) -> tuple[list[SourceRecord], dict[tuple[str, int], int]]:
    """The Kafka records of ``changes``, and ``(topic, offset) -> change index``."""
    tables: dict[tuple[str, str, str], list[int]] = {}
    for index, item in enumerate(changes):
        source = item.event.source
        tables.setdefault((source.name, source.namespace, source.table or ""), []).append(index)
    encoders: dict[tuple[str, str, str], AvroEncoder] = {}
    for (server, schema, table), indexes in tables.items():
        events = [changes[i].event for i in indexes]
        shape = TableSchema(
            server,
            schema,
            table,
            _fields([e.key for e in events], optional=False),
            _fields([row for e in events for row in (e.before, e.after)], optional=True),
        )
        ids: list[int | None] = []
        schemas = AvroEncoder(shape, None, 0).schemas
        for part, avro in (("key", schemas.key), ("value", schemas.value)):
            if avro is None:
                ids.append(None)
                continue
            subject = f"{shape.namespace}-{part}"
            ids.append(client.register_schema(subject, Schema(json.dumps(avro), "AVRO")))
        assert ids[1] is not None
        encoders[(server, schema, table)] = AvroEncoder(shape, ids[0], ids[1])
    records: list[SourceRecord] = []
    origin: dict[tuple[str, int], int] = {}
    offsets: dict[str, int] = {}
    for index, item in enumerate(changes):
        source = item.event.source
        where = (source.name, source.namespace, source.table or "")
        topic = ".".join(where)
        offset = offsets.get(topic, 0)
        offsets[topic] = offset + 1
        key, value = encoders[where].encode(item.event)
        records.append(SourceRecord(topic, 0, offset, key, value))
        origin[(topic, offset)] = index
    return records, origin


def _origin_of(out: OutRecord) -> tuple[str, int]:
    # events (in their lineage headers) and dead letters both name their source record
    headers = dict(out.headers)
    topic = (headers.get(HEADER_SOURCE_TOPIC) or b"").decode()
    return topic, int(headers.get(HEADER_SOURCE_OFFSET) or b"-1")


def _fields(rows: Iterable[Row | None], *, optional: bool) -> tuple[Field, ...]:
    """The columns of ``rows``, in first-seen order, typed by their first real value."""
    types: dict[str, ColumnType | None] = {}
    for row in rows:
        for column, value in (row or {}).items():
            if types.get(column) is None:
                types[column] = _column_type(column, value)
    return tuple(
        Field(column, found or ColumnType(Kind.STRING), optional) for column, found in types.items()
    )


def _column_type(column: str, value: Any) -> ColumnType | None:
    """The column type capture would give a column holding ``value`` (None: unknown yet)."""
    if value is None or value is UNAVAILABLE:
        return None
    for python, kind in _KINDS:
        if isinstance(value, python):
            # aware datetimes and times are timestamptz / timetz columns
            if isinstance(value, (datetime, time)) and value.tzinfo is not None:
                zoned = Kind.ZONED_TIMESTAMP if kind is Kind.TIMESTAMP_MICROS else Kind.ZONED_TIME
                return ColumnType(zoned)
            return ColumnType(kind)
    if isinstance(value, list):
        items = next((t for v in value if (t := _column_type(column, v)) is not None), None)
        return ColumnType(Kind.ARRAY, items=items or ColumnType(Kind.STRING))
    raise TypeError(
        f"column {column!r}: {type(value).__name__} is not a column value capture writes "
        "(use int, str, Decimal, datetime, date, UUID, JsonDocument, bytes, a list, ...)"
    )


# bool before int (bool is an int); datetime before date (datetime is a date)
_KINDS: Final[list[tuple[type | tuple[type, ...], Kind]]] = [
    (bool, Kind.BOOLEAN),
    (int, Kind.INT64),
    (float, Kind.FLOAT64),
    (str, Kind.STRING),
    ((bytes, bytearray), Kind.BYTES),
    (Decimal, Kind.VARIABLE_DECIMAL),
    (datetime, Kind.TIMESTAMP_MICROS),
    (date, Kind.DATE),
    (time, Kind.TIME_MICROS),
    (timedelta, Kind.INTERVAL_MICROS),
    (uuid.UUID, Kind.UUID),
    (JsonDocument, Kind.JSON),
]


# -- golden views ------------------------------------------------------------------------


def _describe(item: Change) -> str:
    event = item.event
    key = json.dumps(dict(event.key or {}), sort_keys=True, default=str)
    return f"{event.op} {event.source.qualified_table} key={key} at {event.source.position}"


def _event_view(emitted: Emitted) -> dict[str, Any]:
    event = emitted.event
    return {
        "contract": type(event).contract_fullname(),
        "topic": emitted.topic,
        "translator": emitted.translator,
        "lineage": emitted.lineage.model_dump(mode="json"),
        "fields": event.model_dump(mode="json", exclude={"lineage"}),
        "avro": emitted.value[_FRAME_SIZE:].hex(),
    }
