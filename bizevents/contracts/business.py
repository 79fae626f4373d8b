"""Business-event contracts: typed pydantic models whose Avro schema is generated from them.

A contract is a subclass of :class:`BusinessEvent` with a ``Meta`` naming its Avro
namespace (and optionally its record name and topic)::

    class OrderPlaced(BusinessEvent):
        order_id: UUID
        placed_at: Timestamp
        total: Annotated[Decimal, Field(max_digits=12, decimal_places=2)]
        status: OrderStatus
        class Meta:
            namespace = "store.orders"          # fullname: store.orders.OrderPlaced
            # schema_name = "OrderPlaced"       # defaults to the class name
            # topic = "store.order-placed"      # defaults to <domain>.<kebab-case name>

The schema comes from ``dataclasses-avroschema``, so the model and its Avro schema
cannot disagree at run time. What can drift is the ``.avsc`` file kept under version
control (the contract the CI gate checks); :func:`schema_drift` compares the two.

Every event carries its lineage twice: in the ``lineage`` record field of its body
(the envelope) and in Kafka headers (:func:`lineage_headers`). Translator authors
never fill it; the runtime does, with :func:`with_lineage`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, TypeVar

from dataclasses_avroschema import types as avro_types
from dataclasses_avroschema.pydantic import AvroBaseModel
from pydantic import AfterValidator, ConfigDict

from bizevents.contracts.binary import NULL_BRANCH, VALUE_BRANCH, text, zigzag
from bizevents.contracts.compatibility import parse_schema
from bizevents.contracts.exceptions import ContractError, InvalidSchemaError

__all__ = [
    "HEADER_EVENT_ID",
    "HEADER_REPLAY",
    "HEADER_SNAPSHOT",
    "HEADER_SOURCE_OFFSET",
    "HEADER_SOURCE_PARTITION",
    "HEADER_SOURCE_POSITION",
    "HEADER_SOURCE_TOPIC",
    "HEADER_TRANSLATOR",
    "HEADER_TX_ID",
    "LINEAGE_HEADERS",
    "TOPIC_PROPERTY",
    "BusinessEvent",
    "ContractFile",
    "Int32",
    "Lineage",
    "Record",
    "Timestamp",
    "avsc_text",
    "dead_letter_cause",
    "default_topic",
    "lineage_avro",
    "lineage_avro_change",
    "lineage_avro_translator",
    "lineage_from_headers",
    "lineage_headers",
    "read_avsc",
    "read_lineage",
    "schema_drift",
    "with_lineage",
    "write_avsc",
    "write_catalogue",
]

E = TypeVar("E", bound="BusinessEvent")


def _require_aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("a timestamp must be timezone-aware (an instant, not a wall-clock time)")
    return value


#: An aware datetime, on the wire as Avro ``timestamp-micros``. Plain ``datetime`` would
#: become ``timestamp-millis`` and lose precision, so contracts refuse it.
Timestamp = Annotated[avro_types.DateTimeMicro, AfterValidator(_require_aware)]
#: A 32-bit Avro ``int`` (Python ``int`` alone maps to ``long``).
Int32 = avro_types.Int32

#: The ``.avsc`` property that names a contract's default topic. It is metadata of the
#: file only: it is stripped before a schema is compared, checked or registered.
TOPIC_PROPERTY = "bizevents.topic"

# Kafka header names of the lineage, defined once.
HEADER_EVENT_ID = "bizevents.event_id"
HEADER_TRANSLATOR = "bizevents.translator"
HEADER_SOURCE_TOPIC = "bizevents.source.topic"
HEADER_SOURCE_PARTITION = "bizevents.source.partition"
HEADER_SOURCE_OFFSET = "bizevents.source.offset"
HEADER_SOURCE_POSITION = "bizevents.source.position"
HEADER_TX_ID = "bizevents.source.tx_id"
HEADER_REPLAY = "bizevents.replay"
#: ``true`` on an event made from a snapshot read (op ``r``): the row's state when it was
#: read, not something that happened then; absent on every other event.
HEADER_SNAPSHOT = "bizevents.snapshot"
#: Dead-letter headers, of capture's and the translators' dead-letter topics alike.
HEADER_DLQ_STAGE = "bizevents.dlq.stage"
HEADER_DLQ_REASON = "bizevents.dlq.reason"
HEADER_DLQ_ERROR = "bizevents.dlq.error"


def dead_letter_cause(headers: Mapping[str, bytes | None]) -> tuple[str, str]:
    """A dead-letter record's ``(stage, reason)`` read from its ``headers`` ("" where one
    is absent; bytes that are not UTF-8 read as replacement characters)."""
    stage = (headers.get(HEADER_DLQ_STAGE) or b"").decode(errors="replace")
    return stage, (headers.get(HEADER_DLQ_REASON) or b"").decode(errors="replace")


LINEAGE_HEADERS = (
    HEADER_EVENT_ID,
    HEADER_TRANSLATOR,
    HEADER_SOURCE_TOPIC,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_POSITION,
    HEADER_TX_ID,
    HEADER_REPLAY,
)


class Lineage(AvroBaseModel):
    """Where an event came from; set by the runtime, never by a translator.

    The defaults (empty strings, -1) mean "not set yet": an event built in a test or
    by a translator carries them until the runtime stamps the real lineage.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str = ""
    translator: str = ""
    source_topic: str = ""
    source_partition: Int32 = -1
    source_offset: int = -1
    source_position: str = ""
    tx_id: str | None = None
    replay: bool = False

    class Meta:
        namespace = "bizevents"
        schema_name = "Lineage"
        # The docstring would become the record's "doc"; the envelope stays terse.
        schema_doc = False


#: The lineage of an event no runtime has stamped yet. Lineage is frozen, so every such
#: event shares this one instance (a default factory built one per event, ~1 µs each).
UNSET_LINEAGE: Final = Lineage()


class Record(AvroBaseModel):
    """A record nested in a contract (an order's line, an address): immutable, and
    nothing beyond its fields. Give it ``class Meta`` with ``namespace``."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class BusinessEvent(AvroBaseModel):
    """Base class of every business-event contract.

    Subclasses declare ``class Meta`` with ``namespace`` (required), and optionally
    ``schema_name`` (default: the class name) and ``topic`` (default:
    :func:`default_topic`). Instances are immutable.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    lineage: Lineage = UNSET_LINEAGE

    _contract_schema: ClassVar[dict[str, Any] | None] = None

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._contract_schema = None
        if "Meta" in cls.__dict__:
            # Fail when the class is defined, not on the first event in production.
            cls.contract_schema()

    @classmethod
    def contract_name(cls) -> str:
        meta = getattr(cls, "Meta", None)
        return str(getattr(meta, "schema_name", None) or cls.__name__)

    @classmethod
    def contract_namespace(cls) -> str:
        namespace = getattr(getattr(cls, "Meta", None), "namespace", None)
        if not namespace:
            raise ContractError(
                f"contract {cls.__qualname__} declares no Meta.namespace; "
                "every business event needs one (e.g. 'store.orders')"
            )
        return str(namespace)

    @classmethod
    def contract_fullname(cls) -> str:
        """The Avro full name, e.g. ``store.orders.OrderPlaced``."""
        return f"{cls.contract_namespace()}.{cls.contract_name()}"

    @classmethod
    def contract_topic(cls) -> str:
        """``Meta.topic`` if given, else ``<domain>.<kebab-case name>``."""
        topic = getattr(getattr(cls, "Meta", None), "topic", None)
        return str(topic) if topic else default_topic(cls.contract_fullname())

    @classmethod
    def contract_schema(cls) -> dict[str, Any]:
        """The generated Avro schema as parsed JSON (cached; do not mutate)."""
        if cls.__dict__.get("_contract_schema") is None:
            cls.contract_namespace()
            try:
                schema: dict[str, Any] = cls.avro_schema_to_python()
            except Exception as exc:  # the generator raises many kinds; name the contract
                raise ContractError(
                    f"contract {cls.__qualname__} has no Avro schema: {exc}"
                ) from exc
            millis = _millis_fields(schema, schema.get("name", cls.__name__))
            if millis:
                raise ContractError(
                    f"contract {cls.__qualname__}: field(s) {', '.join(millis)} use a plain "
                    "datetime; use bizevents.contracts.business.Timestamp (aware, timestamp-micros)"
                )
            try:
                parse_schema(schema)
            except InvalidSchemaError as exc:
                raise ContractError(f"contract {cls.__qualname__}: {exc}") from None
            cls._contract_schema = schema
        cached: dict[str, Any] = cls.__dict__["_contract_schema"]
        return cached

    @classmethod
    def contract_schema_text(cls) -> str:
        """The schema as compact JSON, as registered and as serializers are given it."""
        return json.dumps(cls.contract_schema(), separators=(",", ":"))


def default_topic(fullname: str) -> str:
    """``store.orders.OrderPlaced`` → ``store.order-placed``: the namespace's first
    segment is the domain, the record name in kebab case is the event."""
    namespace, _, name = fullname.rpartition(".")
    domain = namespace.split(".", 1)[0] if namespace else ""
    event = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name).lower()
    return f"{domain}.{event}" if domain else event


def with_lineage(event: E, lineage: Lineage) -> E:
    """The same event with its lineage set (events are immutable, so this is a copy)."""
    return event.model_copy(update={"lineage": lineage})


def lineage_headers(lineage: Lineage) -> list[tuple[str, bytes]]:
    """The lineage as Kafka headers (UTF-8 text values; ``tx_id`` only when known)."""
    headers = [
        (HEADER_EVENT_ID, lineage.event_id.encode()),
        (HEADER_TRANSLATOR, lineage.translator.encode()),
        (HEADER_SOURCE_TOPIC, lineage.source_topic.encode()),
        (HEADER_SOURCE_PARTITION, str(lineage.source_partition).encode()),
        (HEADER_SOURCE_OFFSET, str(lineage.source_offset).encode()),
        (HEADER_SOURCE_POSITION, lineage.source_position.encode()),
    ]
    if lineage.tx_id is not None:
        headers.append((HEADER_TX_ID, lineage.tx_id.encode()))
    headers.append((HEADER_REPLAY, b"true" if lineage.replay else b"false"))
    return headers


# -- the lineage's Avro encoding, in the parts that change at different rates ----------
# An event's lineage record is its body's first field. The runtime encodes it from three
# parts: its translator, source topic and partition (once per translator and partition),
# its source offset, position and transaction (once per change) and its event id (per
# event), so no Lineage object is built per event. Tests hold the parts equal to the
# contract's own writer.


def lineage_avro_translator(translator: str, source_topic: str, source_partition: int) -> bytes:
    """The Avro bytes of the lineage's ``translator``, ``source_topic``, ``source_partition``."""
    return text(translator) + text(source_topic) + zigzag(source_partition)


def lineage_avro_change(source_offset: int, source_position: str, tx_id: str | None) -> bytes:
    """The Avro bytes of the lineage's ``source_offset``, ``source_position``, ``tx_id``."""
    tx = NULL_BRANCH if tx_id is None else VALUE_BRANCH + text(tx_id)
    return zigzag(source_offset) + text(source_position) + tx


def lineage_avro(event_id: str, translator: bytes, change: bytes, replay: bool) -> bytes:
    """The lineage record's Avro bytes, from its parts."""
    return text(event_id) + translator + change + (b"\x01" if replay else b"\x00")


def read_lineage(data: bytes) -> Lineage:
    """The :class:`Lineage` of a lineage record's Avro bytes."""
    import io

    import fastavro

    parsed = fastavro.parse_schema(Lineage.avro_schema_to_python())
    return Lineage.model_validate(fastavro.schemaless_reader(io.BytesIO(data), parsed, None))


def lineage_from_headers(
    headers: Iterable[tuple[str, bytes | str | None]] | None,
) -> Lineage:
    """Read the lineage back from headers; other headers are ignored.

    Raises ``ContractError`` naming the header when a lineage header is missing or
    malformed, since a business event without its lineage is not a valid one.
    """
    found: dict[str, str] = {}
    for name, value in headers or ():
        if name in LINEAGE_HEADERS and value is not None:
            try:
                found[name] = value.decode() if isinstance(value, bytes) else value
            except UnicodeDecodeError:
                raise ContractError(f"lineage header {name!r} is not UTF-8 text") from None

    def need(name: str) -> str:
        if name not in found:
            raise ContractError(f"lineage header {name!r} is missing")
        return found[name]

    def integer(name: str) -> int:
        try:
            return int(need(name))
        except ValueError:
            raise ContractError(f"lineage header {name!r} is not an integer") from None

    values: dict[str, Any] = {
        "event_id": need(HEADER_EVENT_ID),
        "translator": need(HEADER_TRANSLATOR),
        "source_topic": need(HEADER_SOURCE_TOPIC),
        "source_partition": integer(HEADER_SOURCE_PARTITION),
        "source_offset": integer(HEADER_SOURCE_OFFSET),
        "source_position": need(HEADER_SOURCE_POSITION),
        "tx_id": found.get(HEADER_TX_ID),
    }
    replay = need(HEADER_REPLAY)
    if replay not in ("true", "false"):
        raise ContractError(f"lineage header {HEADER_REPLAY!r} must be 'true' or 'false'")
    return Lineage.model_validate({**values, "replay": replay == "true"})


# --- contracts as .avsc files ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContractFile:
    """A contract read from an ``.avsc`` file: its schema and the topic it names."""

    path: Path
    schema: dict[str, Any]  # without TOPIC_PROPERTY
    topic: str | None

    @property
    def fullname(self) -> str:
        name = str(self.schema.get("name", ""))
        namespace = self.schema.get("namespace")
        return f"{namespace}.{name}" if namespace and "." not in name else name

    @property
    def schema_text(self) -> str:
        return json.dumps(self.schema, separators=(",", ":"))

    @property
    def default_topic(self) -> str:
        return self.topic or default_topic(self.fullname)


def avsc_text(model: type[BusinessEvent]) -> str:
    """The ``.avsc`` of a contract: its schema, indented, with its topic as metadata."""
    document = {**model.contract_schema(), TOPIC_PROPERTY: model.contract_topic()}
    return json.dumps(document, indent=2) + "\n"


def write_avsc(model: type[BusinessEvent], path: str | os.PathLike[str]) -> Path:
    """Write the contract's ``.avsc`` and return its path.

    ``path`` is the file when it ends in ``.avsc`` (or is an existing file); otherwise it is
    a folder, which gets ``<fullname>.avsc`` inside it. Missing folders are created."""
    where = Path(path)
    if where.is_file() or (where.suffix == ".avsc" and not where.is_dir()):
        target = where
    else:
        target = where / f"{model.contract_fullname()}.avsc"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(avsc_text(model))
    return target


def write_catalogue(
    models: Sequence[type[BusinessEvent]], directory: str | os.PathLike[str]
) -> list[Path]:
    """Write one ``<fullname>.avsc`` per contract into ``directory`` (created if needed)."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    return [write_avsc(model, folder) for model in models]


def read_avsc(path: Path) -> ContractFile:
    """Read and validate an ``.avsc``; a bad file raises a ``ContractError`` naming it."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ContractError(f"{path}: no such contract file") from None
    except OSError as exc:
        raise ContractError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise InvalidSchemaError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("type") not in ("record", "error"):
        raise InvalidSchemaError(f"{path}: a contract must be an Avro record schema")
    topic = document.pop(TOPIC_PROPERTY, None)
    if topic is not None and not isinstance(topic, str):
        raise InvalidSchemaError(f"{path}: {TOPIC_PROPERTY!r} must be a string")
    try:
        parse_schema(document)
    except InvalidSchemaError as exc:
        raise InvalidSchemaError(f"{path}: {exc}") from None
    return ContractFile(path=path, schema=document, topic=topic)


def schema_drift(model: type[BusinessEvent], avsc_path: Path) -> list[str]:
    """How the model and its ``.avsc`` differ, one sentence each; empty means in sync."""
    contract = read_avsc(avsc_path)
    problems = _diff(
        _plain(model.contract_schema()), _plain(contract.schema), model.contract_name()
    )
    if contract.topic != model.contract_topic():
        problems.append(
            f"topic: the model says {model.contract_topic()!r}, the .avsc says {contract.topic!r}"
        )
    return problems


def _plain(schema: Any) -> Any:
    return json.loads(json.dumps(schema))


def _diff(model: Any, file: Any, path: str) -> list[str]:
    if (
        isinstance(model, dict)
        and isinstance(file, dict)
        and model.get("type") in ("record", "error")
        and file.get("type") in ("record", "error")
    ):
        found: list[str] = []
        for key in sorted((set(model) | set(file)) - {"fields"}):
            if model.get(key) != file.get(key):
                found.append(
                    f"at '{path}': record {key} is {model.get(key)!r} in the model, "
                    f"{file.get(key)!r} in the .avsc"
                )
        model_fields = {f["name"]: f for f in model.get("fields", [])}
        file_fields = {f["name"]: f for f in file.get("fields", [])}
        for name, field in model_fields.items():
            where = f"{path}.{name}"
            other = file_fields.get(name)
            if other is None:
                found.append(f"field '{where}' is in the model but not in the .avsc")
                continue
            for key in sorted((set(field) | set(other)) - {"name", "type"}):
                if field.get(key) != other.get(key):
                    found.append(
                        f"field '{where}': {key} is {field.get(key)!r} in the model, "
                        f"{other.get(key)!r} in the .avsc"
                    )
            found += _diff(field["type"], other["type"], where)
        found += [
            f"field '{path}.{name}' is in the .avsc but not in the model"
            for name in file_fields
            if name not in model_fields
        ]
        if not found and list(model_fields) != list(file_fields):
            found.append(f"at '{path}': the fields are in a different order")
        return found
    if isinstance(model, list) and isinstance(file, list) and len(model) == len(file):
        return [p for m, f in zip(model, file, strict=True) for p in _diff(m, f, path)]
    if isinstance(model, dict) and isinstance(file, dict) and model.get("type") == file.get("type"):
        if model.get("type") == "array":
            found = _diff(model.get("items"), file.get("items"), f"{path}[]")
            rest = {k for k in set(model) | set(file) if k not in ("items", "name")}
        elif model.get("type") == "map":
            found = _diff(model.get("values"), file.get("values"), f"{path}{{}}")
            rest = {k for k in set(model) | set(file) if k != "values"}
        else:
            found, rest = [], set(model) | set(file)
        if any(model.get(k) != file.get(k) for k in rest):
            found.append(
                f"at '{path}': the model has type {json.dumps(model)}, "
                f"the .avsc has {json.dumps(file)}"
            )
        return found
    if model != file:
        return [
            f"at '{path}': the model has type {json.dumps(model)}, the .avsc has {json.dumps(file)}"
        ]
    return []


def _millis_fields(schema: Any, path: str) -> list[str]:
    """Field paths whose type is ``timestamp-millis`` (a plain ``datetime``)."""
    if isinstance(schema, list):
        return [p for branch in schema for p in _millis_fields(branch, path)]
    if not isinstance(schema, dict):
        return []
    if schema.get("logicalType") in ("timestamp-millis", "local-timestamp-millis"):
        return [f"'{path}'"]
    if schema.get("type") in ("record", "error"):
        return [
            p
            for field in schema.get("fields", [])
            for p in _millis_fields(field["type"], f"{path}.{field['name']}")
        ]
    if schema.get("type") == "array":
        return _millis_fields(schema.get("items"), f"{path}[]")
    if schema.get("type") == "map":
        return _millis_fields(schema.get("values"), f"{path}{{}}")
    return []
