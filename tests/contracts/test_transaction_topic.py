"""The transaction metadata topic's records: bytes equal to fastavro's, round trips in
every encoding, and bad bytes named."""

from __future__ import annotations

import contextlib
import io
import json

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bizevents.contracts.exceptions import Coordinates, DecodeError
from bizevents.contracts.technical.transaction import (
    TRANSACTION_KEY_AVRO,
    TRANSACTION_VALUE_AVRO,
    TransactionDecoder,
    TransactionRecord,
    encode_transaction_key,
    encode_transaction_value,
    transaction_connect_json,
    transaction_topic,
)
from bizevents.plumbing.framing import header

_VALUE = fastavro.parse_schema(TRANSACTION_VALUE_AVRO)
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


def _fastavro(record: TransactionRecord) -> bytes:
    out = io.BytesIO()
    datum = {
        "status": record.status,
        "id": record.id,
        "event_count": record.event_count,
        "data_collections": None
        if record.data_collections is None
        else [{"data_collection": n, "event_count": c} for n, c in record.data_collections],
        "ts_ms": record.ts_ms,
    }
    fastavro.schemaless_writer(out, _VALUE, datum)
    return out.getvalue()


def _decoder() -> TransactionDecoder:
    return TransactionDecoder({7: json.dumps(TRANSACTION_VALUE_AVRO)}.get)


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
    ],
    ids=["null", "unknown-id", "short", "truncated", "status", "end-count", "id", "json", "dc"],
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
