"""Debezium's ``source`` block, described once.

:data:`FIELDS` lists every source field bizevents knows: its wire name, its Avro type,
which part of :class:`~bizevents.contracts.envelope.Source` carries it and whether a decoder
refuses a block without it. :data:`LAYOUT` gives each connector's fields in Debezium's
order with their optionality. Everything else is derived from these two tables: the
Avro and Kafka Connect schemas of the block, the decoders' checks and the model they
build, the encoders' wire dict, and capture's byte writer (:class:`AvroSourceWriter`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from bizevents.contracts.avro_codegen.native import constructor
from bizevents.contracts.binary import NULL_BRANCH, VALUE_BRANCH, text, varint, zigzag
from bizevents.contracts.envelope import NO_EXTRA, SNAPSHOT_FALSE, MySqlPosition, PgPosition, Source
from bizevents.contracts.exceptions import InvalidRecord

__all__ = [
    "FIELDS",
    "LAYOUT",
    "AvroSourceWriter",
    "Connector",
    "EncodedSource",
    "SourceField",
    "read_source",
    "source_avro_schema",
    "source_connect_schema",
    "source_wire",
    "trusts_source",
]

Connector = Literal["postgresql", "mysql"]
AvroType = Literal["string", "long", "int", "snapshot"]
#: Which part of the model carries a field: the Source itself, one position type, or
#: ``Source.extra`` (kept as it came, not read by anything of ours).
Carrier = Literal["source", "postgresql", "mysql", "extra"]


@dataclass(frozen=True, slots=True)
class SourceField:
    """One field of the source block."""

    name: str  # on the wire
    avro: AvroType  # "snapshot" is Debezium's Enum: an Avro string
    carrier: Carrier
    attribute: str = ""  # on Source or its position; defaults to ``name``
    required: bool = False  # a decoder refuses a block (of its carrier) without it

    @property
    def attr(self) -> str:
        return self.attribute or self.name


#: Every known field, in the order the encoders write them (``extra`` ones follow
#: wherever the producer put them).
FIELDS: Final[dict[str, SourceField]] = {
    f.name: f
    for f in (
        SourceField("version", "string", "source"),
        SourceField("connector", "string", "source", required=True),
        SourceField("name", "string", "source", required=True),
        SourceField("ts_ms", "long", "source", required=True),
        SourceField("snapshot", "snapshot", "source", "snapshot_raw"),
        SourceField("db", "string", "source", required=True),
        SourceField("sequence", "string", "source"),
        SourceField("schema", "string", "source"),
        SourceField("table", "string", "source"),
        SourceField("txId", "long", "postgresql", "tx_id"),
        SourceField("lsn", "long", "postgresql"),
        SourceField("xmin", "long", "postgresql"),
        SourceField("server_id", "long", "mysql"),
        SourceField("gtid", "string", "mysql"),
        SourceField("file", "string", "mysql", required=True),
        SourceField("pos", "long", "mysql", required=True),
        SourceField("row", "int", "mysql"),
        SourceField("thread", "long", "mysql"),
        SourceField("ts_us", "long", "extra"),
        SourceField("ts_ns", "long", "extra"),
        SourceField("query", "string", "extra"),
    )
}

_COMMON: Final = (
    ("version", True),
    ("connector", False),
    ("name", False),
    ("ts_ms", False),
    ("snapshot", True),
    ("db", False),
    ("sequence", True),
    ("ts_us", True),
    ("ts_ns", True),
)
#: Each connector's fields in Debezium's order, and whether each is optional.
LAYOUT: Final[dict[Connector, tuple[tuple[str, bool], ...]]] = {
    "postgresql": (
        *_COMMON,
        ("schema", False),
        ("table", False),
        ("txId", True),
        ("lsn", True),
        ("xmin", True),
    ),
    "mysql": (
        *_COMMON,
        ("table", True),
        ("server_id", False),
        ("gtid", True),
        ("file", False),
        ("pos", False),
        ("row", False),
        ("thread", True),
        ("query", True),
    ),
}

_SNAPSHOT_ALLOWED: Final = (
    "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
)
_SNAPSHOT_AVRO: Final = {
    "type": "string",
    "connect.version": 1,
    "connect.parameters": {"allowed": _SNAPSHOT_ALLOWED},
    "connect.default": "false",
    "connect.name": "io.debezium.data.Enum",
}
_CONNECT_TYPE: Final = {"string": "string", "long": "int64", "int": "int32"}
_HALF: Final = 1 << 63  # zigzag's sign bit: below it a long's zigzag is its double


# -- schemas -------------------------------------------------------------------------------


def source_avro_schema(connector: Connector) -> dict[str, Any]:
    """The ``Source`` record Debezium's Avro converter registers for ``connector``."""
    fields: list[dict[str, Any]] = []
    for name, optional in LAYOUT[connector]:
        avro = FIELDS[name].avro
        if avro == "snapshot":
            fields.append({"name": name, "type": [_SNAPSHOT_AVRO, "null"], "default": "false"})
        elif optional:
            fields.append({"name": name, "type": ["null", avro], "default": None})
        else:
            fields.append({"name": name, "type": avro})
    return {
        "type": "record",
        "name": "Source",
        "namespace": f"io.debezium.connector.{connector}",
        "fields": fields,
        "connect.name": f"io.debezium.connector.{connector}.Source",
    }


def source_connect_schema(connector: Connector) -> dict[str, Any]:
    """The Kafka Connect struct of the block, as Debezium's JSON converter embeds it."""
    fields: list[dict[str, Any]] = []
    for name, optional in LAYOUT[connector]:
        avro = FIELDS[name].avro
        if avro == "snapshot":
            fields.append(
                {
                    "type": "string",
                    "optional": True,
                    "name": "io.debezium.data.Enum",
                    "version": 1,
                    "parameters": {"allowed": _SNAPSHOT_ALLOWED},
                    "default": "false",
                    "field": name,
                }
            )
        else:
            fields.append({"type": _CONNECT_TYPE[avro], "optional": optional, "field": name})
    return {
        "type": "struct",
        "fields": fields,
        "optional": False,
        "name": f"io.debezium.connector.{connector}.Source",
        "field": "source",
    }


# -- reading -------------------------------------------------------------------------------

_KNOWN: Final = {
    carrier: frozenset(f.name for f in FIELDS.values() if f.carrier in ("source", carrier))
    for carrier in ("postgresql", "mysql")
}
_CHECKED: Final = tuple(f for f in FIELDS.values() if f.carrier != "extra")
_PYTHON: Final[dict[str, type]] = {"string": str, "long": int, "int": int}


def _check(d: Mapping[str, Any]) -> None:
    """What :func:`read_source` builds from is what the model may hold, or InvalidRecord."""
    mysql = "file" in d
    for f in _CHECKED:
        v = d.get(f.name)
        if v is None:
            if f.required and (f.carrier == "source" or (f.carrier == "mysql" and mysql)):
                raise InvalidRecord(f"source.{f.name} is missing")
            continue
        if f.avro == "snapshot":
            if not isinstance(v, str | bool):  # Debezium before 1.0 wrote a boolean
                raise InvalidRecord(f"source.snapshot must be a string, not {type(v).__name__}")
            continue
        kind = _PYTHON[f.avro]
        if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
            raise InvalidRecord(f"source.{f.name} must be {kind.__name__}, not {type(v).__name__}")
        if f.avro == "int" and not -(2**31) <= d[f.name] < 2**31:
            raise InvalidRecord(f"source.{f.name}: {v} does not fit int32")


def read_source(d: Any, *, checked: bool = True) -> Source:
    """The :class:`Source` of a decoded block.

    ``checked=False`` skips the per-field checks, for a block whose Avro schema already
    guarantees them (:func:`trusts_source`).
    """
    if checked:
        if not isinstance(d, dict):
            raise InvalidRecord("the envelope has no source block")
        _check(d)
    snapshot = d.get("snapshot")
    if snapshot.__class__ is not str:
        snapshot = "true" if snapshot else SNAPSHOT_FALSE
    position: PgPosition | MySqlPosition | None
    if "file" in d:
        position = MySqlPosition(
            d["file"],
            d["pos"],
            d.get("row") or 0,
            d.get("server_id") or 0,
            d.get("gtid"),
            d.get("thread"),
        )
        known = _KNOWN["mysql"]
    else:
        if "lsn" in d or "txId" in d or d["connector"] == "postgresql":
            position = PgPosition(d.get("lsn"), d.get("txId"), d.get("xmin"))
        else:
            position = None
        known = _KNOWN["postgresql"]
    extra = {k: v for k, v in d.items() if v is not None and k not in known}
    return Source(
        d["connector"],
        d["name"],
        d["db"],
        d.get("schema"),
        d.get("table"),
        d["ts_ms"],
        snapshot,
        position,
        d.get("version"),
        d.get("sequence"),
        extra or NO_EXTRA,
    )


# The builder passes every field positionally: the extension's makers apply.
_MAKE_SOURCE: Final = constructor(Source)
_MAKE_PG_POSITION: Final = constructor(PgPosition)
_MAKE_MYSQL_POSITION: Final = constructor(MySqlPosition)


def source_builder(names: tuple[str, ...]) -> Callable[..., Source] | None:
    """``build(*values)``: :func:`read_source` of ``dict(zip(names, values))`` with
    ``checked=False``, written out for one schema's field names so that no dict is
    built (the compiled reader calls it with the block's fields). ``None`` when the
    names lack a field read_source requires."""
    if not {"connector", "name", "db", "ts_ms"} <= set(names) or len(set(names)) != len(names):
        return None
    args = {name: f"_{i}" for i, name in enumerate(names)}

    def get(name: str) -> str:
        return args.get(name, "None")

    lines = [f"def build({', '.join(args.values())}):"]
    lines += [
        f"    snapshot = {get('snapshot')}",
        "    if snapshot.__class__ is not str:",
        "        snapshot = 'true' if snapshot else SNAPSHOT_FALSE",
    ]
    if "file" in names:
        lines.append(
            f"    position = MySqlPosition({get('file')}, {get('pos')}, {get('row')} or 0, "
            f"{get('server_id')} or 0, {get('gtid')}, {get('thread')})"
        )
        known = _KNOWN["mysql"]
    else:
        pg = f"PgPosition({get('lsn')}, {get('txId')}, {get('xmin')})"
        if "lsn" in names or "txId" in names:
            lines.append(f"    position = {pg}")
        else:
            lines.append(f"    position = {pg} if {get('connector')} == 'postgresql' else None")
        known = _KNOWN["postgresql"]
    unknown = [n for n in names if n not in known]
    lines.append("    extra = NO_EXTRA")
    if unknown:
        lines.append("    found = {}")
        for n in unknown:
            lines.append(f"    if {args[n]} is not None:")
            lines.append(f"        found[{n!r}] = {args[n]}")
        lines.append("    if found:")
        lines.append("        extra = found")
    lines.append(
        f"    return Source({get('connector')}, {get('name')}, {get('db')}, {get('schema')}, "
        f"{get('table')}, {get('ts_ms')}, snapshot, position, {get('version')}, "
        f"{get('sequence')}, extra)"
    )
    env: dict[str, Any] = {
        "SNAPSHOT_FALSE": SNAPSHOT_FALSE,
        "NO_EXTRA": NO_EXTRA,
        "MySqlPosition": _MAKE_MYSQL_POSITION,
        "PgPosition": _MAKE_PG_POSITION,
        "Source": _MAKE_SOURCE,
    }
    exec(compile("\n".join(lines), "<source builder>", "exec"), env)
    built: Callable[..., Source] = env["build"]
    return built


def _avro_primitive(t: Any) -> str | None:
    if isinstance(t, dict) and "logicalType" not in t:
        t = t.get("type")
    if t == "int":
        return "long"  # an int field reads as a Python int like a long
    return t if isinstance(t, str) else None


def trusts_source(schema: Any, resolve: Callable[[Any], Any]) -> bool:
    """Whether an Avro source record's field types already guarantee what
    :func:`read_source` checks per record, so decoding may skip the checks.

    ``resolve`` turns a named type reference into its definition.
    """
    schema = resolve(schema)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return False
    names = set()
    for field in schema.get("fields", ()):
        name, t = field.get("name"), field.get("type")
        names.add(name)
        f = FIELDS.get(name)
        if f is None or f.carrier == "extra":
            continue
        if not f.required and isinstance(t, list):
            branches = [b for b in t if b != "null"]
            if len(branches) != 1:
                return False
            t = branches[0]
        want = "string" if f.avro == "snapshot" else f.avro
        if _avro_primitive(t) != ("long" if want == "int" else want):
            return False
    required = {f.name for f in _CHECKED if f.required and f.carrier == "source"}
    return required <= names and ("file" in names) == ("pos" in names)


# -- writing -------------------------------------------------------------------------------


def source_wire(source: Source, connector: Connector) -> dict[str, Any]:
    """The block as a dict for fastavro or JSON: the modelled fields in :data:`FIELDS`'
    order (the position's only for its kind), then ``extra`` as it came."""
    layout = {name for name, _ in LAYOUT[connector]}
    pos = source.position
    kind = "postgresql" if isinstance(pos, PgPosition) else "mysql" if pos is not None else ""
    out: dict[str, Any] = {}
    for f in FIELDS.values():
        if f.carrier == "source":
            value = getattr(source, f.attr)
            if value is not None or f.name in layout:
                out[f.name] = value
        elif f.carrier == kind:
            out[f.name] = getattr(pos, f.attr)
    for k, v in source.extra.items():
        out.setdefault(k, v)
    return out


def _avro_field(name: str, optional: bool, value: Any) -> bytes:
    avro = FIELDS[name].avro
    if value is None:
        if avro == "snapshot":
            return VALUE_BRANCH  # [Enum, "null"]: null is branch 1
        if not optional:
            raise ValueError(f"source.{name} is not optional")
        return NULL_BRANCH
    body = zigzag(value) if avro in ("long", "int") else text(value)
    if avro == "snapshot":
        return NULL_BRANCH + body  # branch 0
    return VALUE_BRANCH + body if optional else body


@dataclass(frozen=True, slots=True)
class EncodedSource:
    """A block's Avro bytes around one field left open (capture's per-event LSN)."""

    head: bytes
    tail: bytes

    def with_long(self, value: int) -> bytes:
        """The whole block with the open optional long field set to ``value``."""
        # Once per captured change: a non-negative long's zigzag is its double's varint,
        # one Python call fewer.
        if 0 <= value < _HALF:
            return self.head + VALUE_BRANCH + varint(value << 1) + self.tail
        return self.head + VALUE_BRANCH + zigzag(value) + self.tail


class AvroSourceWriter:
    """Writes a connector's source record as :func:`source_avro_schema` lays it out,
    from the fields fixed for a table plus those given per transaction."""

    def __init__(self, connector: Connector, fixed: Mapping[str, Any]) -> None:
        self.connector = connector
        self._layout = LAYOUT[connector]
        self._fixed = {
            name: _avro_field(name, optional, fixed[name])
            for name, optional in self._layout
            if name in fixed
        }

    def around(self, open_field: str, values: Mapping[str, Any]) -> EncodedSource:
        """The bytes before and after ``open_field`` with every other field taken from
        the fixed ones or ``values`` (a field in neither is null)."""
        parts: list[bytes] = []
        head = b""
        for name, optional in self._layout:
            if name == open_field:
                head = b"".join(parts)
                parts = []
                continue
            fixed = self._fixed.get(name)
            parts.append(
                fixed if fixed is not None else _avro_field(name, optional, values.get(name))
            )
        return EncodedSource(head, b"".join(parts))
