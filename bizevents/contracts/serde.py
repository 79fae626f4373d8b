"""Business events on the wire: Confluent framing (magic byte 0, 4-byte schema id, Avro).

Encoding and registry traffic are confluent-kafka's ``AvroSerializer`` and
``AvroDeserializer`` (fastavro underneath), so any microservice with a standard Avro
deserializer reads what this writes. This module adds the domain mapping around them:

- ``to_dict``: a contract instance to an Avro-ready dict. ``model_dump`` already
  yields what fastavro takes for Decimal, aware datetimes, dates, UUIDs and nested
  records; only enums need their label, so a converter compiled once per contract
  touches just the fields that can hold one.
- ``from_dict``: the decoded dict back to the typed model (read with the model's own
  schema as reader schema, so older writer versions resolve into it).
- errors: an event that breaks its contract raises ``ContractError`` naming the
  contract and the field; registry failures become ``RegistryError`` or
  ``RegistryUnavailableError``; never a raw library exception.

Schema ids are cached per (subject, schema): one ``AvroSerializer`` per contract class
remembers the subjects it has registered or looked up. Once it has written an event of
a contract to a topic, later events of that contract and topic skip it: a writer
generated from the contract's schema (:mod:`bizevents.contracts.avro_codegen`) writes the body
straight from the model's attributes behind the header AvroSerializer wrote. It is
checked against AvroSerializer's bytes on that first event, and any value it does not
take goes to AvroSerializer again, so the bytes and the errors are AvroSerializer's.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping
from enum import Enum
from types import NoneType, UnionType
from typing import Annotated, Any, Generic, TypeVar, Union, get_args, get_origin

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import parse_schema
from fastavro.validation import ValidationError as AvroValidationError
from fastavro.validation import validate as avro_validate
from pydantic import BaseModel, ValidationError

from bizevents.contracts.avro_codegen import ModelWriter, Unsupported, compile_model_writer
from bizevents.contracts.avro_codegen.native import compile_native_writer
from bizevents.contracts.business import BusinessEvent, read_lineage, with_lineage
from bizevents.contracts.exceptions import (
    ContractError,
    Coordinates,
    DecodeError,
    IncompatibleSchemaError,
    RegistryError,
)
from bizevents.contracts.subjects import SubjectStrategy, confluent_strategy
from bizevents.contracts.subjects import subject_strategy as _strategy_named
from bizevents.plumbing.framing import HEADER_SIZE, MAGIC_BYTE, FramingError, unframe
from bizevents.plumbing.registry import RegistryUnavailableError

__all__ = [
    "MAGIC_BYTE",
    "BusinessDeserializer",
    "BusinessSerializer",
    "from_dict",
    "schema_id_of",
    "to_dict",
]


E = TypeVar("E", bound=BusinessEvent)


def _network_errors() -> tuple[type[Exception], ...]:
    """The registry client's network failures: it uses httpx2 when installed, else httpx."""
    import httpx

    found: list[type[Exception]] = [httpx.TransportError]
    try:
        import httpx2  # type: ignore[import-not-found, unused-ignore]

        found.append(httpx2.TransportError)
    except ImportError:
        pass
    return tuple(found)


_UNREACHABLE = _network_errors()
_Convert = Callable[[Any], Any]


def schema_id_of(data: bytes) -> int:
    """The schema id of a Confluent-framed message; ``DecodeError`` if it is not one."""
    try:
        return unframe(data)[0]
    except FramingError as exc:
        raise DecodeError(f"the message {exc}: not Confluent-framed Avro") from None


# --- to_dict / from_dict -------------------------------------------------------------


_converters: dict[type[BaseModel], _Convert | None] = {}


def to_dict(event: BaseModel) -> dict[str, Any]:
    """An Avro-ready dict of a contract instance (enums as their labels)."""
    cls = type(event)
    try:
        convert = _converters[cls]
    except KeyError:
        convert = _converters[cls] = _model_converter(cls)
    # warnings=False: a model_construct-ed bad value fails below with a ContractError.
    data = event.model_dump(warnings=False)
    return convert(data) if convert is not None else data


def from_dict(model: type[E], data: Mapping[str, Any]) -> E:
    """The typed model of a decoded Avro record (pydantic turns labels back into enums)."""
    return model.model_validate(data)


def _model_converter(model: type[BaseModel]) -> _Convert | None:
    """A function fixing up ``model_dump`` output in place, or None if nothing needs it."""
    fields: list[tuple[str, _Convert]] = []
    for name, info in model.model_fields.items():
        convert = _converter(info.annotation)
        if convert is not None:
            fields.append((name, convert))
    if not fields:
        return None

    def fix(data: dict[str, Any]) -> dict[str, Any]:
        for name, convert in fields:
            value = data[name]
            if value is not None:
                data[name] = convert(value)
        return data

    return fix


def _converter(annotation: Any) -> _Convert | None:
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:
        return _converter(args[0])
    if isinstance(annotation, type):
        if issubclass(annotation, Enum):
            return _label
        if issubclass(annotation, BaseModel):
            return _model_converter(annotation)
    if origin in (Union, UnionType):
        branches = [a for a in args if a is not NoneType]
        converters = [_converter(b) for b in branches]
        if all(c is None for c in converters):
            return None
        if len(branches) == 1:
            return converters[0]
        return _dynamic
    if origin in (list, tuple, set, frozenset) or (
        origin is not None and getattr(origin, "__name__", "") in ("Sequence", "Iterable")
    ):
        item_converter = _converter(args[0]) if args else None
        if item_converter is None:
            return None
        convert_item: _Convert = item_converter

        def convert_items(items: Any) -> Any:
            return [None if item is None else convert_item(item) for item in items]

        return convert_items
    if origin is dict or (origin is not None and getattr(origin, "__name__", "") == "Mapping"):
        value_converter = _converter(args[1]) if len(args) == 2 else None
        if value_converter is None:
            return None
        convert_value: _Convert = value_converter

        def convert_values(values: Any) -> Any:
            return {k: None if v is None else convert_value(v) for k, v in values.items()}

        return convert_values
    return None


def _label(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _dynamic(value: Any) -> Any:
    """The slow, general walk, for unions of several non-null types."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _dynamic(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_dynamic(item) for item in value]
    return value


# --- serializer ----------------------------------------------------------------------


class _Writer:
    __slots__ = ("headers", "model", "parsed", "serializer", "topic", "write")

    def __init__(self, model: type[BusinessEvent], serializer: AvroSerializer) -> None:
        self.model = model
        self.serializer = serializer
        self.parsed = parse_schema(model.contract_schema())
        self.topic = model.contract_topic()
        #: The body writer: the compiled one (the project's C extension) where it is
        #: built, else the generated one; None where only AvroSerializer writes.
        self.write: ModelWriter | None = None
        for compile_writer in (compile_native_writer, compile_model_writer):
            try:
                self.write = compile_writer(model, self.parsed)
                break
            except Unsupported:
                continue
        #: Per topic, the 5-byte Confluent header AvroSerializer wrote (so the schema
        #: id it registered or looked up): from then on the generated writer writes.
        self.headers: dict[str, bytes] = {}

    def learn(self, event: BusinessEvent, topic: str, data: bytes) -> None:
        """After AvroSerializer wrote ``data``: use the generated writer for ``topic``
        from now on, if it gives the very same bytes."""
        write = self.write
        if write is None:
            return
        try:
            same = write(event) == data[HEADER_SIZE:]
        except Exception:
            return  # a value it does not take: learn from the next event
        if same:
            self.headers[topic] = data[:HEADER_SIZE]
        else:
            self.write = None  # never expected; the reference stays the only writer


class BusinessSerializer:
    """``serializer(event, topic) -> bytes``: a business event in the Confluent format.

    ``subject_strategy`` is ``"topic"`` (default), ``"record"``, ``"topic-record"`` or
    a callable. With ``auto_register=False`` the schema must already be registered
    under the subject (the CI gate's ``register`` did it); otherwise it is registered
    on first use, and the registry refuses it if it breaks the subject's level.
    """

    def __init__(
        self,
        registry_client: SchemaRegistryClient,
        subject_strategy: str | SubjectStrategy = "topic",
        auto_register: bool = True,
    ) -> None:
        self._client = registry_client
        self._strategy = _strategy_named(subject_strategy)
        self._auto_register = auto_register
        self._writers: dict[type[BusinessEvent], _Writer] = {}
        self._contexts: dict[str, SerializationContext] = {}

    def subject(self, model: type[BusinessEvent], topic: str | None = None) -> str:
        """The subject a contract is registered under when written to ``topic``."""
        return self._strategy(topic or model.contract_topic(), model.contract_fullname())

    def __call__(
        self, event: BusinessEvent, topic: str | None = None, lineage: bytes | None = None
    ) -> bytes:
        """Serialize ``event`` for ``topic`` (default: the contract's own topic).

        ``lineage``, when given, is the Avro encoding of the event's lineage
        (bizevents.translators.lineage builds it), written in place of ``event.lineage``.
        """
        cls = type(event)
        writer = self._writers.get(cls)
        if writer is None:
            writer = self._writer(cls)
        if topic is None:
            topic = writer.topic
        header = writer.headers.get(topic)
        if header is not None:
            try:
                return header + writer.write(event, lineage)  # type: ignore[misc]
            except Exception:
                pass  # AvroSerializer below gives the bytes or the reason
        if lineage is not None:
            event = with_lineage(event, read_lineage(lineage))
        ctx = self._contexts.get(topic)
        if ctx is None:
            ctx = self._contexts[topic] = SerializationContext(topic, MessageField.VALUE)
        try:
            data = writer.serializer(event, ctx)
        except SchemaRegistryError as exc:
            raise _registry_error(exc, cls, self.subject(cls, topic)) from exc
        except _UNREACHABLE as exc:
            raise RegistryUnavailableError(
                f"cannot reach the schema registry to resolve {self.subject(cls, topic)}: {exc}"
            ) from exc
        except Exception as exc:  # fastavro raises ValueError/TypeError/KeyError/...
            raise ContractError(_explain(event, writer, exc)) from exc
        assert data is not None
        if header is None:
            writer.learn(event, topic, data)
        return data

    def _writer(self, cls: type[BusinessEvent]) -> _Writer:
        if not (isinstance(cls, type) and issubclass(cls, BusinessEvent)):
            raise ContractError(f"{cls!r} is not a business-event contract (a BusinessEvent)")
        serializer = AvroSerializer(
            self._client,
            cls.contract_schema_text(),
            _to_dict_ctx,
            {
                "auto.register.schemas": self._auto_register,
                "subject.name.strategy": confluent_strategy(self._strategy),
            },
        )
        writer = self._writers[cls] = _Writer(cls, serializer)
        return writer


def _to_dict_ctx(event: object, ctx: SerializationContext) -> dict[str, Any]:
    assert isinstance(event, BaseModel)
    return to_dict(event)


def _registry_error(
    exc: SchemaRegistryError, model: type[BusinessEvent], subject: str
) -> Exception:
    name = model.contract_fullname()
    status, code = exc.http_status_code, exc.error_code
    if status == 409:
        return IncompatibleSchemaError(
            f"contract {name} is incompatible with subject {subject}: {exc.error_message}"
        )
    if status == 404:
        return ContractError(
            f"contract {name} is not registered under subject {subject} "
            "(run `bizevents contracts register`, or enable auto-registration)"
        )
    if status == 422:
        return ContractError(
            f"the registry refused contract {name} for {subject}: {exc.error_message}"
        )
    if status >= 500 or status < 0:
        return RegistryUnavailableError(
            f"the schema registry failed on {subject} ({status}): {exc.error_message}"
        )
    return RegistryError(
        f"the schema registry refused {subject} ({status}): {exc.error_message}",
        status=status,
        error_code=code,
    )


def _explain(event: BusinessEvent, writer: _Writer, exc: Exception) -> str:
    """One sentence naming the contract and the field; only runs when a write failed."""
    name = writer.model.contract_fullname()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            writer.model.model_validate(event.model_dump())
        except ValidationError as invalid:
            problems = "; ".join(
                f"field '{'.'.join(str(p) for p in err['loc'])}': {err['msg']}"
                for err in invalid.errors()
            )
            return f"event {name} breaks its contract: {problems}"
        except Exception:  # model_dump itself failed; fall through to Avro's view
            pass
        try:
            avro_validate(to_dict(event), writer.parsed, raise_errors=True)
        except AvroValidationError as invalid:
            detail = "; ".join(str(e) for e in invalid.errors) or str(invalid)
            return f"event {name} does not fit its Avro schema: {detail}"
        except Exception:
            pass
    return f"event {name} cannot be written with its Avro schema: {exc}"


# --- deserializer --------------------------------------------------------------------


class BusinessDeserializer(Generic[E]):
    """``deserializer(data, topic) -> model``: Confluent-framed Avro back to a contract.

    Give it the contracts a topic may carry. The writer schema's full name (from the
    registry, by the id in the message) picks the contract; with a single contract,
    every message is read into it (a renamed record resolves through its aliases).
    The contract's schema is the reader schema, so older versions resolve into it.
    """

    def __init__(self, registry_client: SchemaRegistryClient, *contracts: type[E]) -> None:
        if not contracts:
            raise ValueError("BusinessDeserializer needs at least one contract")
        self._client = registry_client
        self._by_name = {model.contract_fullname(): model for model in contracts}
        self._single = contracts[0] if len(contracts) == 1 else None
        self._readers: dict[type[E], AvroDeserializer] = {}
        self._by_id: dict[int, tuple[type[E], AvroDeserializer]] = {}

    def __call__(self, data: bytes, topic: str | None = None) -> E:
        where = Coordinates(topic)
        schema_id = schema_id_of(data)
        entry = self._by_id.get(schema_id)
        if entry is None:
            entry = self._resolve(schema_id, where)
        model, reader = entry
        try:
            decoded = reader(data, SerializationContext(topic or "", MessageField.VALUE))
        except SchemaRegistryError as exc:
            raise DecodeError(f"schema id {schema_id}: {exc.error_message}", where) from exc
        except Exception as exc:
            raise DecodeError(
                f"cannot read {model.contract_fullname()} (schema id {schema_id}): {exc}", where
            ) from exc
        if not isinstance(decoded, dict):
            raise DecodeError(f"schema id {schema_id} does not hold a record", where)
        try:
            return from_dict(model, decoded)
        except ValidationError as exc:
            problems = "; ".join(
                f"field '{'.'.join(str(p) for p in err['loc'])}': {err['msg']}"
                for err in exc.errors()
            )
            raise DecodeError(
                f"decoded {model.contract_fullname()} breaks its contract: {problems}", where
            ) from exc

    def _resolve(self, schema_id: int, where: Coordinates) -> tuple[type[E], AvroDeserializer]:
        model = self._single
        if model is None:
            try:
                schema = self._client.get_schema(schema_id)
            except SchemaRegistryError as exc:
                raise DecodeError(f"schema id {schema_id}: {exc.error_message}", where) from exc
            except _UNREACHABLE as exc:
                raise RegistryUnavailableError(
                    f"cannot reach the schema registry for schema id {schema_id}: {exc}"
                ) from exc
            fullname = _fullname(parse_schema(_loads(schema.schema_str or "null")))
            model = self._by_name.get(fullname)
            if model is None:
                raise DecodeError(
                    f"schema id {schema_id} is {fullname}, which is none of the contracts "
                    f"this deserializer reads ({', '.join(sorted(self._by_name))})",
                    where,
                )
        reader = self._readers.get(model)
        if reader is None:
            reader = self._readers[model] = AvroDeserializer(
                self._client, model.contract_schema_text()
            )
        entry = self._by_id[schema_id] = (model, reader)
        return entry


def _loads(text: str) -> Any:
    return json.loads(text)


def _fullname(parsed: Any) -> str:
    return str(parsed.get("name", "")) if isinstance(parsed, dict) else ""
