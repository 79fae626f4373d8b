"""The replay's Avro files, written a block at a time with the project's own encoder, read
exactly as fastavro writes and reads them."""

from __future__ import annotations

from collections.abc import Callable
from io import BytesIO
from pathlib import Path

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bizevents.replay.files import _FILE_PLAN, FILE_SCHEMA, AvroFile, FileRecordEncoder
from bizevents.replay.plan import Range
from bizevents.replay.spec import Output
from bizevents.replay.task import TaskReport, _FileSink
from bizevents.translators.pipeline import OutRecord

PARSED = fastavro.parse_schema(FILE_SCHEMA)

optional_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=20), optional_bytes), max_size=8)


def out_records(values: st.SearchStrategy[bytes | None]) -> st.SearchStrategy[OutRecord]:
    return st.builds(
        OutRecord,
        topic=st.sampled_from(["store.order-placed", "store.order-status-changed"]),
        key=optional_bytes,
        value=values,
        headers=headers,
        translator=st.sampled_from(["orders@2", "", "naïve@1"]),
        event_id=st.sampled_from(["", "0d3c3f8e-6d3c-5a8e-9e1f-1c2d3e4f5a6b"]),
    )


def as_dict(topic: str, record: OutRecord) -> dict[str, object]:
    return {
        "topic": topic,
        "key": record.key,
        "value": record.value,
        "headers": [{"key": k, "value": v} for k, v in record.headers],
        "event_id": record.event_id,
        "translator": record.translator,
    }


@given(out_records(optional_bytes | st.binary(min_size=16_000, max_size=20_000)))
def test_a_record_encodes_as_fastavro_writes_it(record: OutRecord) -> None:
    """Byte for byte fastavro's encoding of the same record."""
    expected = BytesIO()
    fastavro.schemaless_writer(expected, PARSED, as_dict(record.topic, record))
    encoder = FileRecordEncoder()
    assert encoder(record.topic, record) == expected.getvalue()  # compiled, where built
    assert encoder.written(record.topic, record) == expected.getvalue()  # the Python


def test_parts_the_compiled_encoder_does_not_take_are_written_in_python() -> None:
    """A bytearray value and tuple headers (a caller's own types) give the same bytes."""
    record = OutRecord("t", b"k", bytearray(b"v"), (("h", b"x"),), "orders@2", "id")  # type: ignore[arg-type]
    expected = BytesIO()
    fastavro.schemaless_writer(expected, PARSED, as_dict("t", record))
    assert _FILE_PLAN is not None  # the contracts' writer, with FILE_SCHEMA's plan
    with pytest.raises(TypeError):
        _FILE_PLAN(("t", record.key, record.value, record.headers, record.event_id, "orders@2"))
    assert FileRecordEncoder()("t", record) == expected.getvalue()


@settings(max_examples=25, deadline=None)
@given(st.lists(out_records(optional_bytes), max_size=40), st.integers(1, 300))
def test_a_range_file_reads_back_whole(
    tmp_path_factory: object, some: list[OutRecord], times: int
) -> None:
    """fastavro's reader reads every record back, in order, across blocks (a block ends
    at 4,000 records or 1 MiB)."""
    records = some * times
    root = Path(tmp_path_factory.mktemp("files"))  # type: ignore[attr-defined]
    rng = Range("shop.store.orders", 0, 0, 100)
    sink = _FileSink(root, Output.parse(f"path:{root}"), rng)
    report = TaskReport(rng.id)
    sink.write(records, report)
    sink.close(rng)
    read: list[dict[str, object]] = []
    for path in sorted(root.rglob("*.avro")):
        with path.open("rb") as handle:
            read += list(fastavro.reader(handle))
    expected = [as_dict(Output.parse(f"path:{root}").topic_for(r.topic), r) for r in records]
    key = lambda d: str(d["topic"])  # noqa: E731 - files are per topic; order within one
    assert sorted(read, key=key) == sorted(expected, key=key)
    assert not list(root.rglob("*.partial"))


def test_blocks_end_at_the_record_limit(tmp_path: Path) -> None:
    """9,001 records make three blocks (4,000, 4,000, 1,001), every record read back."""
    record = OutRecord("store.order-placed", b"k", b"v", [("h", b"1")], "orders@2", "id")
    rng = Range("shop.store.orders", 0, 0, 9001)
    sink = _FileSink(tmp_path, Output.parse(f"path:{tmp_path}"), rng)
    sink.write([record] * 9001, TaskReport(rng.id))
    sink.close(rng)
    (path,) = tmp_path.rglob("*.avro")
    with path.open("rb") as handle:
        counts = [block.num_records for block in fastavro.block_reader(handle)]
    assert counts == [4000, 4000, 1001]


def test_blocks_end_at_the_byte_limit_as_one_add_at_a_time(tmp_path: Path) -> None:
    """``extend`` (the sink's, a block of records at once) cuts the file's blocks where
    ``add`` (a record at a time) cuts them: at 1 MiB here."""
    bodies = [bytes([n % 251]) * (1000 + 37 * n) for n in range(1500)]

    def blocks(name: str, fill: Callable[[AvroFile], None]) -> list[int]:
        file = AvroFile(tmp_path / f".{name}.partial", tmp_path / f"{name}.avro")
        fill(file)
        file.close()
        with file.final.open("rb") as handle:
            return [block.num_records for block in fastavro.block_reader(handle)]

    def one_at_a_time(file: AvroFile) -> None:
        for body in bodies:
            file.add(body)

    def in_two_blocks(file: AvroFile) -> None:
        file.extend(bodies[:700])
        file.extend(bodies[700:])

    expected = blocks("one", one_at_a_time)
    assert len(expected) > 2
    assert blocks("two", in_two_blocks) == expected


@given(st.lists(out_records(optional_bytes), max_size=60))
def test_a_block_counts_its_events_and_dead_letters(some: list[OutRecord]) -> None:
    """The report counts each event under its output topic and each dead letter once."""
    root = Path("/nonexistent-replay-output")  # nothing written: the files are never made
    rng = Range("shop.store.orders", 0, 0, 100)
    sink = _FileSink(root, Output.parse("replay"), rng)
    sink._file = lambda topic: _NullFile()  # type: ignore[method-assign]
    report = TaskReport(rng.id)
    sink.write(some, report)
    events: dict[str, int] = {}
    for record in some:
        if record.event_id:
            topic = record.topic + ".replay"
            events[topic] = events.get(topic, 0) + 1
    assert report.events == events
    assert report.dead_letters == sum(1 for record in some if not record.event_id)


class _NullFile:
    def extend(self, encoded: object) -> None:
        pass
