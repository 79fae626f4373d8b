"""One MySQL table's layout and its writer: decoded rows → Confluent-framed envelopes.

A :class:`MyTable` is a table as one binlog table map describes it (the layout of the
rows that follow it, not today's); :class:`MyTableCodec` turns rows of that layout into
the same Debezium envelope as PostgreSQL's capture, with the ``mysql`` source block.
Pure apart from the schema ids the registrar hands it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from pymysqlreplication.constants import NONE_SOURCE

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.codec import SOURCE_VERSION, RegisteredCodec, encoded_ts
from bizevents.capture.exceptions import CaptureError, ValueConversionError
from bizevents.capture.mariadb.types import (
    TIME2,
    MyColumn,
    binlog_time2,
    converters_generation,
    converters_of,
    field_of,
    inline_form,
    value_writer,
)
from bizevents.contracts.binary import (
    LENGTHS,
    NULL_BRANCH,
    VALUE_BRANCH,
    VARINTS,
    varint,
    zigzag,
)
from bizevents.contracts.technical import AvroEncoder, EnvelopeSchemas, TableSchema
from bizevents.contracts.technical.source import AvroSourceWriter
from bizevents.contracts.technical.topics import table_topic

__all__ = [
    "MyTable",
    "MyTableCodec",
    "Row",
    "binlog_values",
    "encoded_ts",
    "fractional_times",
    "key_columns",
]

Row = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class MyTable:
    """A table's layout at one binlog position."""

    database: str
    name: str
    columns: tuple[MyColumn, ...]
    primary_key: tuple[str, ...]

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.name}"


def key_columns(table: MyTable, configured: Sequence[str] | None) -> tuple[str, ...]:
    """The Kafka key's columns: those the config names, else the primary key; a table
    with neither is refused with a sentence naming it."""
    names = {c.name for c in table.columns}
    if configured:
        missing = [k for k in configured if k not in names]
        if missing:
            raise CaptureError(
                f"the key columns {missing} configured for {table.qualified} are not in the table"
            )
        return tuple(configured)
    if not table.primary_key:
        raise CaptureError(
            f"table {table.qualified} has no primary key, so its changes cannot be keyed: "
            f"add one (ALTER TABLE {table.qualified} ADD PRIMARY KEY (...)) or name the key "
            f'columns in the capture configuration ([keys] "{table.qualified}" = ["col", ...])'
        )
    return table.primary_key


def fractional_times(table: MyTable) -> tuple[str, ...]:
    """The ``TIME(n)`` columns (n > 0) whose negative values :func:`binlog_values` puts right."""
    return tuple(c.name for c in table.columns if c.type == TIME2 and c.fsp > 0)


def binlog_values(row: dict[str, Any], times: tuple[str, ...], prefix: str = "") -> dict[str, Any]:
    """A decoded row's values put right where the library gets them wrong: an empty SET
    is ``''``, not ``None`` (a zero date stays ``None``, as Debezium writes it); a
    negative fractional TIME (``times``) see :func:`binlog_time2`."""
    values: dict[str, Any] = row[f"{prefix}values"]
    sources: dict[str, str] = row.get(f"{prefix}none_sources") or {}
    empty = [name for name, why in sources.items() if why == NONE_SOURCE.EMPTY_SET]
    if not empty and not times:
        return values
    values = {**values, **dict.fromkeys(empty, "")}
    for name in times:
        v = values.get(name)
        if v is not None:
            values[name] = binlog_time2(v)
    return values


Slot = tuple[str, Callable[[Any], bytes], bool, tuple[str, int]]

#: Each in-line form (:func:`bizevents.capture.mariadb.types.inline_form`): the class it covers and
#: the lines that set ``b`` from ``v`` (the column's bytes, without the union branch).
_INLINE: Final = {
    "int": (
        "int",
        ["z = (v << 1) ^ (v >> 63)", "b = _V[z] if 0 <= z < 16384 else varint(z)"],
    ),
    "str": (
        "str",
        ["e = v.encode()", "n = len(e)", "b = (_L[n] if n < 16384 else zigzag(n)) + e"],
    ),
    "decimal": (
        "_Decimal",
        [
            "num, den = v.as_integer_ratio()",
            "times, rest = divmod(arg{n}, den)",
            "if rest:",
            "    raise ValueError",
            "u = num * times",
            'e = u.to_bytes((abs(u).bit_length() + 8) // 8, "big", signed=True)',
            "n = len(e)",
            "b = (_L[n] if n < 16384 else zigzag(n)) + e",
        ],
    ),
    "datetime": (
        "_datetime",
        [
            "u = (v - _EPOCH) // _MICROSECOND // arg{n}",
            "z = (u << 1) ^ (u >> 63)",
            "b = _V[z] if 0 <= z < 16384 else varint(z)",
        ],
    ),
}


def _compile(slots: Sequence[Slot]) -> Callable[[Row], bytes]:
    """One table's record writer as straight-line code: no per-column loop, and the
    common column kinds written in line (no call per value). The hot path. Any
    failure falls back to :meth:`MyTableCodec._record`, which names it."""
    env: dict[str, Any] = {
        "_NULL": NULL_BRANCH,
        "_SOME": VALUE_BRANCH,
        "_V": VARINTS,
        "_L": LENGTHS,
        "varint": varint,
        "zigzag": zigzag,
        "_Decimal": Decimal,
        "_datetime": datetime,
        "_EPOCH": datetime(1970, 1, 1),
        "_MICROSECOND": timedelta(microseconds=1),
    }
    lines = ["def record(row):"]
    for n, (name, write, optional, (form, arg)) in enumerate(slots):
        env[f"w{n}"] = write
        env[f"k{n}"] = name
        env[f"arg{n}"] = 10**arg if form == "decimal" else arg
        lines += [f"    v = row[k{n}]", "    if v is None:"]
        lines.append(f"        b{n} = _NULL" if optional else "        raise ValueError")
        branch = "_SOME + " if optional else ""
        inline = _INLINE.get(form)
        if inline is not None:
            cls, body = inline
            lines.append(f"    elif v.__class__ is {cls}:")
            lines += [f"        {line.format(n=n)}" for line in body]
            lines.append(f"        b{n} = {branch}b")
        lines += ["    else:", f"        b{n} = {branch}w{n}(v)"]
    lines.append(f"    return b''.join(({''.join(f'b{n}, ' for n in range(len(slots)))}))")
    exec(compile("\n".join(lines), f"<mysql record of {len(slots)} columns>", "exec"), env)
    function: Callable[[Row], bytes] = env["record"]
    return function


class MyTableCodec(RegisteredCodec):
    """Rows of one table layout → framed keys and envelopes."""

    def __init__(
        self,
        *,
        server: str,
        topic: str,
        table: MyTable,
        key_names: Sequence[str],
        keep: Callable[[str], bool] = lambda _name: True,
    ) -> None:
        self.table = table
        self.topic = topic
        qualified = table.qualified
        kept = [c for c in table.columns if keep(c.name) or c.name in key_names]
        #: The columns not captured: their values never leave capture, not even in a
        #: dead letter.
        self.dropped = frozenset(
            c.name for c in table.columns if not (keep(c.name) or c.name in key_names)
        )
        by_name = {c.name: c for c in table.columns}
        key_set = set(key_names)
        # Every non-key column is optional in the value schema, NOT NULL ones too: the
        # binlog does not carry column defaults, and without a default a column added
        # NOT NULL would make a schema the registry refuses as backward-incompatible
        # (docs/capture-mysql.md). A NULL in a NOT NULL column cannot come from the
        # server, so nothing is lost.
        value_fields = tuple(field_of(c, qualified, optional=c.name not in key_set) for c in kept)
        key_fields = tuple(field_of(by_name[k], qualified, optional=False) for k in key_names)
        self.key_names = tuple(key_names)
        self.schema = TableSchema(
            server, table.database, table.name, key_fields, value_fields, connector="mysql"
        )
        self.schemas: EnvelopeSchemas = AvroEncoder(self.schema, 1, 1).schemas
        self._value: list[Slot] = [
            (c.name, value_writer(c, f.type), f.optional, inline_form(c, f.type))
            for c, f in zip(kept, value_fields, strict=True)
        ]
        self._key: list[Slot] = [
            (k, value_writer(by_name[k], f.type), False, inline_form(by_name[k], f.type))
            for k, f in zip(key_names, key_fields, strict=True)
        ]
        self._fast_value = _compile(self._value)
        self._fast_key = _compile(self._key)
        #: The converters registered for its columns' types, and when (a fix).
        self.generation = converters_generation()
        self._converters = converters_of(table.columns)
        self._source = AvroSourceWriter(
            "mysql",
            {
                "version": SOURCE_VERSION,
                "connector": "mysql",
                "name": server,
                "db": table.database,
                "table": table.name,
            },
        )
        self.events = 0

    @property
    def reference_encoder(self) -> AvroEncoder:
        """The contracts encoder of the same schemas (what these bytes must equal)."""
        return AvroEncoder(self.schema, self.key_schema_id, self.value_schema_id or 1)

    # -- bytes ----------------------------------------------------------------------------

    def _record(self, slots: list[Slot], row: Row) -> bytes:
        parts: list[bytes] = []
        append = parts.append
        for name, write, optional, _form in slots:
            v = row[name]
            if v is None:
                if not optional:
                    raise ValueConversionError(
                        self.table.qualified, name, "avro", "NULL", "the column is not nullable"
                    )
                append(NULL_BRANCH)
                continue
            try:
                body = write(v)
            except (ValueError, TypeError, ArithmeticError, OverflowError, KeyError) as exc:
                raise ValueConversionError(
                    self.table.qualified, name, "avro", repr(v)[:80], str(exc)
                ) from exc
            if optional:
                append(VALUE_BRANCH)
            append(body)
        return b"".join(parts)

    def _converted(self, row: Row) -> Row:
        out = dict(row)
        for name, convert in self._converters:
            v = out.get(name)
            if v is None:
                continue
            try:
                out[name] = convert(v)
            except Exception as exc:  # a converter's failure is the value's
                raise ValueConversionError(
                    self.table.qualified, name, "converter", repr(v)[:80], str(exc)
                ) from exc
        return out

    def row(self, row: Row) -> bytes:
        """The Avro ``Value`` record of one row."""
        if self._converters:
            row = self._converted(row)
        try:
            return self._fast_value(row)
        except Exception:  # the checked path names the column and the reason
            return self._record(self._value, row)

    def key(self, row: Row) -> bytes:
        """The framed Kafka key of one row."""
        if self._converters:
            row = self._converted(row)
        try:
            return self._key_frame + self._fast_key(row)
        except Exception:
            return self._key_frame + self._record(self._key, row)

    def source(self, **fields: Any) -> Callable[[int], bytes]:
        """The ``source`` bytes of one event group, as a function of the row index
        (``fields`` as :meth:`source_parts` takes them)."""
        head, tail = self.source_parts(**fields)
        return lambda row: head + zigzag(row) + tail

    def source_parts(
        self,
        *,
        ts_ms: int,
        snapshot: str,
        server_id: int,
        file: str,
        pos: int,
        gtid: str | None,
        thread: int | None = None,
    ) -> tuple[bytes, bytes]:
        """The ``source`` bytes of one event group before and after the row index."""
        encoded = self._source.around(
            "row",
            {
                "ts_ms": ts_ms,
                "snapshot": snapshot,
                "server_id": server_id,
                "gtid": gtid,
                "file": file,
                "pos": pos,
                "thread": thread,
            },
        )
        return encoded.head, encoded.tail


def captured_codec(config: CaptureConfig, table: MyTable) -> MyTableCodec:
    """The codec capture writes ``table``'s rows with under ``config``: its key columns,
    its topic and the columns it keeps (its schemas not registered yet)."""
    qualified = table.qualified
    return MyTableCodec(
        server=config.server,
        topic=table_topic(config.prefix, qualified),
        table=table,
        key_names=key_columns(table, config.keys.get(qualified)),
        keep=config.column_filter(qualified).keeps,
    )
