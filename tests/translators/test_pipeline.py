"""The translation core: events with lineage, drops counted, bad input dead-lettered."""

from __future__ import annotations

import json
from typing import Any

from bizevents import TranslationError, translator
from bizevents.contracts.business import (
    HEADER_DLQ_ERROR,
    HEADER_DLQ_REASON,
    HEADER_DLQ_STAGE,
    HEADER_EVENT_ID,
    HEADER_TRANSLATOR,
    BusinessEvent,
    read_lineage,
    with_lineage,
)
from bizevents.contracts.change import Change
from bizevents.contracts.exceptions import ContractError
from bizevents.contracts.technical import AutoDecoder
from bizevents.translators.pipeline import Pipeline
from bizevents.translators.records import DEAD_LETTER_TOPIC, SourceRecord
from tests.translators.sample import ThingCreated, things_v1

TOPIC = "shop.public.things"


def envelope(
    op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, lsn: int
) -> bytes:
    return json.dumps(
        {
            "before": before,
            "after": after,
            "op": op,
            "ts_ms": 1,
            "source": {
                "connector": "postgresql",
                "name": "shop",
                "db": "shop",
                "schema": "public",
                "table": "things",
                "ts_ms": 1,
                "snapshot": "false",
                "lsn": lsn,
                "txId": 3,
            },
        }
    ).encode()


def record(offset: int, value: bytes | None, key: bytes = b'{"id": 1}') -> SourceRecord:
    return SourceRecord(TOPIC, 0, offset, key, value, [("trace", b"t-1")])


def fake_serializer(
    event: BusinessEvent, topic: str | None = None, lineage: bytes | None = None
) -> bytes:
    if lineage is not None:
        event = with_lineage(event, read_lineage(lineage))
    return event.model_dump_json().encode()


def pipeline(*translators: Any, serializer: Any = fake_serializer) -> Pipeline:
    return Pipeline(translators or [things_v1], AutoDecoder(), serializer)


def test_change_becomes_event_keyed_by_source_key_with_lineage() -> None:
    result = pipeline().process([record(5, envelope("c", None, {"id": 1, "label": "a"}, 100))])
    (out,) = result.records
    assert out.topic == ThingCreated.contract_topic()
    assert out.key == b'{"id": 1}'  # same row, same partition of the business topic
    assert json.loads(out.value or b"")["label"] == "a"
    headers = dict(out.headers)
    assert headers[HEADER_TRANSLATOR] == b"things@1"
    assert headers[HEADER_EVENT_ID] == out.event_id.encode()
    assert result.counts["things@1"].emitted == 1


def test_irrelevant_change_is_dropped_and_counted() -> None:
    row = {"id": 1, "label": "a"}
    result = pipeline().process([record(6, envelope("u", row, row, 101))])
    assert result.records == []
    assert result.counts["things@1"].dropped == 1


def test_poison_record_is_dead_lettered_and_the_stream_goes_on() -> None:
    poison = b"\x00\x00\x00\x00\x07garbage"
    good = envelope("c", None, {"id": 2, "label": "b"}, 102)
    result = pipeline().process([record(7, poison), record(8, good)])
    dead, event = result.records
    assert (dead.topic, dead.value, dead.key) == (DEAD_LETTER_TOPIC, poison, b'{"id": 1}')
    headers = dict(dead.headers)
    assert headers[HEADER_DLQ_STAGE] == b"decode"
    assert b"Avro" in (headers[HEADER_DLQ_REASON] or b"")  # framed Avro, no registry to read it
    assert headers["trace"] == b"t-1"  # the original headers are kept
    assert headers["bizevents.source.offset"] == b"7"
    assert event.topic == ThingCreated.contract_topic()
    assert result.undecodable == 1


def test_translator_exception_is_dead_lettered() -> None:
    @translator(name="boom", version=3, sources=["public.things"], emits=[ThingCreated])
    def boom(change: Change) -> None:
        raise RuntimeError("kaput")

    value = envelope("c", None, {"id": 1, "label": "a"}, 103)
    result = pipeline(boom, things_v1).process([record(9, value)])
    dead = [r for r in result.records if r.dead_letter]
    assert len(dead) == 1 and dead[0].value == value
    assert dict(dead[0].headers)[HEADER_DLQ_STAGE] == b"translate"
    at = f"{__file__}:{boom.func.__code__.co_firstlineno + 2}"  # the raise, under @translator
    assert dict(dead[0].headers)[HEADER_DLQ_REASON] == f"RuntimeError: kaput (at {at})".encode()
    assert result.counts["boom@3"].dead_lettered == 1
    assert result.counts["things@1"].emitted == 1  # the other translator is unaffected


def test_translation_error_with_a_message_alone_reaches_the_dead_letter() -> None:
    """``raise TranslationError("...")`` as docs/writing-a-translator.md shows: the
    change is dead-lettered with the author's message as its reason."""

    @translator(name="picky", version=2, sources=["public.things"], emits=[ThingCreated])
    def picky(change: Change) -> None:
        raise TranslationError(f"label {change.after['label']!r} is not for us")

    value = envelope("c", None, {"id": 1, "label": "a"}, 105)
    (dead,) = pipeline(picky).process([record(11, value)]).records
    headers = dict(dead.headers)
    assert headers[HEADER_DLQ_STAGE] == b"translate"
    assert headers[HEADER_DLQ_REASON] == b"label 'a' is not for us"
    assert headers[HEADER_DLQ_ERROR] == b"TranslationError"
    assert headers[HEADER_TRANSLATOR] == b"picky@2"


def test_event_failing_its_contract_is_dead_lettered() -> None:
    def refuse(event: BusinessEvent, topic: str | None, lineage: bytes | None = None) -> bytes:
        raise ContractError("contract test.things.ThingCreated: field 'label' is too long")

    value = envelope("c", None, {"id": 1, "label": "a"}, 104)
    result = pipeline(serializer=refuse).process([record(10, value)])
    (dead,) = result.records
    assert dict(dead.headers)[HEADER_DLQ_STAGE] == b"contract"
    assert b"field 'label'" in (dict(dead.headers)[HEADER_DLQ_REASON] or b"")


class _Unplaced:
    """A Kafka client's record of a fetched block: no topic or partition of its own."""

    __slots__ = ("headers", "key", "offset", "value")

    def __init__(self, placed: SourceRecord) -> None:
        self.offset, self.key, self.value = placed.offset, placed.key, placed.value
        self.headers = placed.headers


def test_a_partitions_records_that_do_not_name_it_give_the_same_records() -> None:
    """process_partition (the worker's blocks of aiokafka's records) gives what process
    gives for the same records named by their partition: events, their lineage and
    ids, and dead letters with the source's coordinates."""
    placed = [
        SourceRecord(TOPIC, 3, 20, b'{"id": 1}', envelope("c", None, {"id": 1, "label": "a"}, 200)),
        SourceRecord(TOPIC, 3, 21, b'{"id": 1}', b"\x00\x00\x00\x00\x07garbage", [("t", b"1")]),
        SourceRecord(TOPIC, 3, 22, b'{"id": 2}', envelope("c", None, {"id": 2, "label": "b"}, 201)),
        SourceRecord(TOPIC, 3, 23, b'{"id": 2}', None),
    ]
    expected = pipeline().process(placed)
    got = pipeline().process_partition(TOPIC, 3, [_Unplaced(r) for r in placed])
    assert got.records == expected.records
    counted = [
        (ref, c.consumed, c.emitted, c.dropped, c.dead_lettered) for ref, c in got.counts.items()
    ]
    assert counted == [
        (ref, c.consumed, c.emitted, c.dropped, c.dead_lettered)
        for ref, c in expected.counts.items()
    ]
    assert (
        (got.undecodable, got.tombstones) == (expected.undecodable, expected.tombstones) == (1, 1)
    )
    assert [r.dead_letter for r in got.records] == [False, True, False]
    dead = dict(got.records[1].headers)
    assert (dead["t"], dead["bizevents.source.topic"], dead["bizevents.source.partition"]) == (
        b"1",
        TOPIC.encode(),
        b"3",
    )
    assert json.loads(got.records[0].value or b"")["lineage"]["source_partition"] == 3


def test_tombstone_produces_nothing_and_is_counted() -> None:
    result = pipeline().process([record(11, None)])
    assert result.records == [] and result.tombstones == 1


def test_table_no_translator_reads_is_counted() -> None:
    other = envelope("c", None, {"id": 1}, 105).replace(b'"things"', b'"other"')
    result = pipeline().process([record(12, other)])
    assert result.records == [] and result.unrouted == 1


def test_bad_key_dead_letter_says_it_is_the_key_and_gives_the_keys_byte() -> None:
    """A key that does not decode, beside a good value: the reason names the key and
    the key's own first byte, never as if it were the value's."""
    value = envelope("c", None, {"id": 1, "label": "a"}, 106)
    result = pipeline().process([record(13, value, key=b"\x07not a key")])
    (dead,) = result.records
    assert (dead.topic, dead.key, dead.value) == (DEAD_LETTER_TOPIC, b"\x07not a key", value)
    reason = (dict(dead.headers)[HEADER_DLQ_REASON] or b"").decode()
    assert reason.startswith("the key is neither Confluent Avro")
    assert "its first byte is 0x07" in reason and "value" not in reason
    assert result.undecodable == 1


def test_bad_value_dead_letter_says_it_is_the_value() -> None:
    """A value that does not decode, beside a good key: the reason names the value."""
    result = pipeline().process([record(14, b"\x05junk")])
    (dead,) = result.records
    reason = (dict(dead.headers)[HEADER_DLQ_REASON] or b"").decode()
    assert reason.startswith("the value is neither Confluent Avro")
    assert "its first byte is 0x05" in reason and "key" not in reason


def test_key_column_out_of_range_names_the_key() -> None:
    """A key whose column does not fit its declared type is dead-lettered as the key's."""
    key = json.dumps(
        {
            "schema": {"type": "struct", "fields": [{"type": "int32", "field": "id"}]},
            "payload": {"id": 2**40},
        }
    ).encode()
    value = envelope("c", None, {"id": 1, "label": "a"}, 107)
    (dead,) = pipeline().process([record(15, value, key=key)]).records
    reason = dict(dead.headers)[HEADER_DLQ_REASON]
    assert reason == b"column 'id' of the key: 1099511627776 does not fit int32"


def test_a_replay_gives_a_snapshot_read_the_live_id() -> None:
    """The replay runs this core: a read replayed (another offset, the replay flag) has
    the id the live worker gave it, and both carry the snapshot header."""
    row = {"id": 1, "label": "a"}
    live = pipeline().process([record(12, envelope("r", None, row, 100))]).records
    replayed = Pipeline([things_v1], AutoDecoder(), fake_serializer, replay=True).process(
        [record(40, envelope("r", None, row, 900))]
    )
    assert [r.event_id for r in live] == [r.event_id for r in replayed.records]
    for out in (*live, *replayed.records):
        assert dict(out.headers)["bizevents.snapshot"] == b"true"
