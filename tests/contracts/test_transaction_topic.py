"""The transaction metadata topic's records: bytes equal to fastavro's, round trips in
every encoding, and bad bytes named."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bizevents.contracts.exceptions import Coordinates, DecodeError
from bizevents.contracts.technical.transaction import (
    TRANSACTION_KEY_AVRO,
    TRANSACTION_VALUE_AVRO,
    TRANSACTION_VALUE_COUNTED_AVRO,
    TransactionDecoder,
    TransactionRecord,
    encode_transaction_key,
    encode_transaction_value,
    transaction_connect_json,
    transaction_topic,
)
from bizevents.plumbing.framing import header

_VALUE = fastavro.parse_schema(TRANSACTION_VALUE_AVRO)
_COUNTED = fastavro.parse_schema(TRANSACTION_VALUE_COUNTED_AVRO)
_KEY = fastavro.parse_schema(TRANSACTION_KEY_AVRO)
_LONG = st.integers(min_value=0, max_value=2**63 - 1)
_NAME = st.text(min_size=1, max_size=30)

records = st.one_of(
    st.builds(
        TransactionRecord,
        st.just("BEGIN"),
        _NAME,
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
    ),
    st.builds(
        TransactionRecord,
        st.just("END"),
        _NAME,
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        _LONG,
        st.lists(st.tuples(_NAME, _LONG), max_size=5).map(tuple),
    ),
)

_PARTITION = st.integers(min_value=0, max_value=2**31 - 1)

#: A routing capture's records: BEGIN without counts, END with or without them.
counted_records = st.one_of(
    records,
    st.builds(
        lambda end, counts: replace(end, partition_counts=counts),
        records.filter(lambda r: r.status == "END"),
        st.lists(st.tuples(_NAME, _PARTITION, _LONG), max_size=5).map(tuple),
    ),
)


def _fastavro(record: TransactionRecord, counted: bool = False) -> bytes:
    out = io.BytesIO()
    datum: dict[str, object] = {
        "status": record.status,
        "id": record.id,
        "event_count": record.event_count,
        "data_collections": None
        if record.data_collections is None
        else [{"data_collection": n, "event_count": c} for n, c in record.data_collections],
        "ts_ms": record.ts_ms,
    }
    if counted:
        datum["partition_counts"] = (
            None
            if record.partition_counts is None
            else [
                {"data_collection": n, "partition": p, "event_count": c}
                for n, p, c in record.partition_counts
            ]
        )
    fastavro.schemaless_writer(out, _COUNTED if counted else _VALUE, datum)
    return out.getvalue()


def _decoder() -> TransactionDecoder:
    return TransactionDecoder(
        {
            7: json.dumps(TRANSACTION_VALUE_AVRO),
            8: json.dumps(TRANSACTION_VALUE_COUNTED_AVRO),
        }.get
    )


@given(records)
def test_value_bytes_equal_fastavro(record: TransactionRecord) -> None:
    """The hand-written value is fastavro's body behind the Confluent frame."""
    assert encode_transaction_value(7, record) == header(7) + _fastavro(record)


@given(_NAME)
def test_key_bytes_equal_fastavro(tx_id: str) -> None:
    """The key is Debezium's TransactionMetadataKey."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _KEY, {"id": tx_id})
    assert encode_transaction_key(3, tx_id) == header(3) + out.getvalue()


@given(records, st.sampled_from(["avro", "json", "json_schema"]))
def test_round_trip(record: TransactionRecord, encoding: str) -> None:
    """Every encoding decodes to the record written."""
    if encoding == "avro":
        raw = encode_transaction_value(7, record)
    else:
        raw = transaction_connect_json(record, encoding == "json_schema")
    assert _decoder().decode(raw) == record


@given(counted_records)
def test_counted_value_bytes_equal_fastavro(record: TransactionRecord) -> None:
    """With ``partition_counts``: fastavro's body in the counted schema."""
    assert encode_transaction_value(8, record, counted=True) == header(8) + _fastavro(record, True)


@given(counted_records, st.sampled_from(["avro", "json", "json_schema"]))
def test_counted_round_trip(record: TransactionRecord, encoding: str) -> None:
    """``partition_counts`` survives every encoding."""
    if encoding == "avro":
        raw = encode_transaction_value(8, record, counted=True)
    else:
        raw = transaction_connect_json(record, encoding == "json_schema", counted=True)
    assert _decoder().decode(raw) == record


@given(records)
def test_uncounted_is_debeziums_byte_for_byte(record: TransactionRecord) -> None:
    """A capture without routing keeps Debezium's schema and bytes; such an END decodes
    with ``partition_counts=None``, in Avro and both JSON forms."""
    raw = encode_transaction_value(7, record)
    assert raw == header(7) + _fastavro(record)
    assert "partition_counts" not in transaction_connect_json(record, True).decode()
    for encoded in (raw, *(transaction_connect_json(record, s) for s in (False, True))):
        assert _decoder().decode(encoded).partition_counts is None


def test_counted_schema_is_debeziums_plus_one_optional_field() -> None:
    """The counted schema reads Debezium's records (the new field defaults to null), and
    Debezium's schema reads the counted records (the new field is skipped)."""
    assert TRANSACTION_VALUE_COUNTED_AVRO["fields"][:-1] == TRANSACTION_VALUE_AVRO["fields"]
    assert TRANSACTION_VALUE_COUNTED_AVRO["fields"][-1]["default"] is None
    end = TransactionRecord("END", "1:2", 5, 3, (("s.t", 3),), (("s.t", 0, 1), ("s.t", 2, 2)))
    old = fastavro.schemaless_reader(
        io.BytesIO(encode_transaction_value(8, end, counted=True)[5:]), _COUNTED, _VALUE
    )
    assert "partition_counts" not in old
    new = fastavro.schemaless_reader(io.BytesIO(_fastavro(end)), _VALUE, _COUNTED)
    assert new["partition_counts"] is None


def test_counts_need_the_counted_schema() -> None:
    """Counts cannot be written in Debezium's schema (they would be lost silently)."""
    end = TransactionRecord("END", "1:2", 5, 1, (("s.t", 1),), (("s.t", 0, 1),))
    with pytest.raises(ValueError, match="counted schema"):
        encode_transaction_value(7, end)


def test_topic_name() -> None:
    """``<prefix>.transaction``, as Debezium names it."""
    assert transaction_topic("shop") == "shop.transaction"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "has no value"),
        (b"\x00\x00\x00\x00\x09abc", "schema id 9 is not registered"),
        (b"\x00\x00\x00\x07", "shorter than"),
        (header(7) + b"\x02", "not a transaction metadata record"),
        (b'{"status": "MAYBE", "id": "1", "ts_ms": 1}', "status is 'MAYBE'"),
        (b'{"status": "END", "id": "1", "ts_ms": 1}', "END record needs event_count"),
        (b'{"status": "BEGIN", "id": "", "ts_ms": 1}', "id must be"),
        (b"not json", "not a transaction metadata record"),
        (
            b'{"status":"END","id":"1","ts_ms":1,"event_count":1,"data_collections":[3]}',
            "each data_collections item",
        ),
        (
            b'{"status":"END","id":"1","ts_ms":1,"event_count":1,"partition_counts":[{}]}',
            "each partition_counts item",
        ),
        (
            b'{"status":"END","id":"1","ts_ms":1,"event_count":1,"partition_counts":3}',
            "partition_counts must be an array",
        ),
    ],
    ids=[
        "null",
        "unknown-id",
        "short",
        "truncated",
        "status",
        "end-count",
        "id",
        "json",
        "dc",
        "pc-item",
        "pc-array",
    ],
)
def test_bad_records_are_named(raw: bytes | None, reason: str) -> None:
    """A bad record raises DecodeError with the coordinates and what was wrong."""
    where = Coordinates("s.transaction", 0, 12)
    with pytest.raises(DecodeError) as caught:
        _decoder().decode(raw, where)
    assert reason in caught.value.reason
    assert "s.transaction" in str(caught.value)


@given(st.binary(max_size=64))
def test_fuzzed_bytes_never_crash(raw: bytes) -> None:
    """Any bytes either decode or raise DecodeError."""
    with contextlib.suppress(DecodeError):
        _decoder().decode(raw)
