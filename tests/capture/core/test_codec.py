"""What both sources' table codecs share (pure): the envelope's bytes from encoded rows
and source, the frames once the registry gave the ids, the schemas as registered."""

from __future__ import annotations

import io
import json

import fastavro

from bizevents.capture.core.codec import Converters, RegisteredCodec, encoded_ts
from bizevents.capture.mariadb import types as t
from bizevents.capture.mariadb.codec import MyTable, MyTableCodec
from bizevents.capture.mariadb.types import MyColumn
from bizevents.contracts.binary import zigzag
from bizevents.contracts.technical import EnvelopeSchemas
from bizevents.plumbing.framing import header

_TABLE = MyTable(
    "shop", "t", (MyColumn("id", t.LONG, nullable=False), MyColumn("v", t.VARCHAR)), ("id",)
)


class _Bare(RegisteredCodec):
    def __init__(self, key: dict[str, object] | None) -> None:
        value = {"type": "record", "name": "Envelope", "fields": []}
        self.schemas = EnvelopeSchemas(key=key, value=value)


def test_encoded_ts_is_the_union_branch_the_varint_and_a_null_transaction() -> None:
    for ts in (0, 1, 1_700_000_000_123):
        assert encoded_ts(ts) == b"\x02" + zigzag(ts) + b"\x00"


def test_frames_are_empty_until_the_registry_gave_the_ids() -> None:
    codec = _Bare({"type": "record", "name": "Key", "fields": []})
    assert codec.value_frame == b"" and codec.key_schema_id is None
    codec.set_schema_ids(7, 8)
    assert (codec.key_schema_id, codec.value_schema_id) == (7, 8)
    assert codec.value_frame == header(8) and codec._key_frame == header(7)


def test_a_table_without_key_columns_has_no_key_schema_and_no_key_frame() -> None:
    codec = _Bare(None)
    assert codec.key_schema_json() is None
    codec.set_schema_ids(None, 3)
    assert codec._key_frame == b"" and codec.value_frame == header(3)
    assert json.loads(codec.value_schema_json())["name"] == "Envelope"


def test_the_envelope_is_frame_before_after_source_op_and_time() -> None:
    """The bytes in the value schema's order, each optional row behind its union branch;
    ``ts_ms`` given as a number or already encoded gives the same bytes."""
    codec = _Bare(None)
    codec.set_schema_ids(None, 9)
    got = codec.envelope("u", b"B", b"A", b"SRC", 42)
    assert got == header(9) + b"\x02B" + b"\x02A" + b"SRC" + b"\x02u" + encoded_ts(42)
    assert codec.envelope("u", b"B", b"A", b"SRC", encoded_ts(42)) == got
    deleted = codec.envelope("d", b"B", None, b"SRC", 42)
    assert deleted == header(9) + b"\x02B" + b"\x00" + b"SRC" + b"\x02d" + encoded_ts(42)
    created = codec.envelope("c", None, b"A", b"SRC", 42)
    assert created.startswith(header(9) + b"\x00\x02A")


def test_an_envelope_reads_back_with_the_schema_a_source_registers() -> None:
    """A real table codec's envelope is Avro of its value schema: op, rows, time."""
    codec = MyTableCodec(server="srv", topic="srv.shop.t", table=_TABLE, key_names=("id",))
    codec.set_schema_ids(1, 2)
    src = codec.source(ts_ms=5, snapshot="false", server_id=1, file="b.000001", pos=4, gtid=None)
    before, after = codec.row({"id": 1, "v": "old"}), codec.row({"id": 1, "v": "new"})
    value = codec.envelope("u", before, after, src(3), 1234)
    assert value[:5] == header(2)
    got = fastavro.schemaless_reader(
        io.BytesIO(value[5:]), fastavro.parse_schema(codec.schemas.value)
    )
    assert got["op"] == "u" and got["ts_ms"] == 1234 and got["transaction"] is None
    assert got["before"] == {"id": 1, "v": "old"} and got["after"] == {"id": 1, "v": "new"}
    assert got["source"]["row"] == 3 and got["source"]["table"] == "t"


def test_converters_registered_and_removed_each_change_the_generation() -> None:
    converters = Converters[str]()
    assert not converters and converters.generation == 0
    converters.register("enum", str.upper)
    assert converters.get("enum") is str.upper and converters.get("set") is None
    assert converters and converters.generation == 1
    converters.register("enum", None)
    converters.register("enum", None)  # removing one not registered is no error
    assert converters.get("enum") is None and not converters
    assert converters.generation == 3
