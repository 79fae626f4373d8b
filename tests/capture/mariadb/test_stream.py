"""The binlog reader's own logic (``mariadb.stream.BinlogReader``), its capture a fake
host and its events plain objects: the GTID state per domain, transactions opened by a
GTID event or a BEGIN, committed at the stream's position, a transaction the library
read again after a reconnect, TRUNCATE of a table not captured. The real binlog:
tests/capture/mariadb/test_capture.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import structlog

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.offsets import AckTracker, Tx
from bizevents.capture.core.transactions import NoBlocks
from bizevents.capture.mariadb.queries import BinlogPosition
from bizevents.capture.mariadb.stream import BinlogReader


class _Capture:
    """What the reader asks of its capture here; commits recorded."""

    def __init__(self, gtid: str | None) -> None:
        self.config = CaptureConfig(server="m", tables=("shop.t",))
        self.position = BinlogPosition("bin.000002", 4, gtid)
        self.tables: frozenset[str] = frozenset()  # no DDL re-read of JSON columns
        self.incremental = None
        self.parking = None
        self.log = structlog.get_logger("test")
        self.session = SimpleNamespace(producer=None, tracker=AckTracker())
        self.committed: list[tuple[Tx, BinlogPosition]] = []

    def commit(self, tx: Tx, position: BinlogPosition) -> None:
        self.committed.append((tx, position))


def _reader(gtid: str | None = "0-1-5,2-1-9") -> Any:
    stream = SimpleNamespace(log_file="bin.000002", log_pos=120)
    return BinlogReader(_Capture(gtid), stream, NoBlocks())  # type: ignore[arg-type]


def _event(**fields: Any) -> Any:
    # the packet's size is the whole event's (19 bytes of header and 4 of checksum in)
    packet = SimpleNamespace(log_pos=fields.pop("log_pos", 200), event_size=63, server_id=1)
    return SimpleNamespace(packet=packet, event_size=40, timestamp=1_700_000_000, **fields)


def test_the_gtid_state_starts_from_the_stored_position_and_moves_per_domain() -> None:
    reader = _reader()
    assert reader.gtid_state() == "0-1-5,2-1-9"
    reader.on_begin(_event(gtid="2-1-10"))
    reader.on_begin(_event(gtid="1-3-1"))
    assert reader.gtid_state() == "0-1-5,1-3-1,2-1-10"
    assert reader.position() == BinlogPosition("bin.000002", 120, "0-1-5,1-3-1,2-1-10")


def test_a_server_without_gtids_has_no_gtid_state() -> None:
    assert _reader(None).gtid_state() is None


def test_a_gtid_event_opens_the_transaction_a_commit_closes_at_the_position() -> None:
    reader = _reader()
    reader.on_begin(_event(gtid="0-1-6"))
    tx = reader.tx
    assert tx is not None and reader.gtid == "0-1-6"
    reader.stream.log_pos = 300
    reader.on_commit(_event())
    assert reader.tx is None
    assert reader.capture.committed == [(tx, BinlogPosition("bin.000002", 300, "0-1-6,2-1-9"))]


def test_a_begin_without_a_gtid_event_opens_a_transaction_of_its_own() -> None:
    """A server without GTIDs: BEGIN opens it, COMMIT (a query event) closes it; a BEGIN
    after a GTID event opens nothing more."""
    reader = _reader(None)
    reader.on_query(_event(query="BEGIN"))
    first = reader.tx
    assert first is not None
    reader.on_query(_event(query="COMMIT"))
    assert reader.tx is None and [t for t, _ in reader.capture.committed] == [first]
    reader.on_begin(_event(gtid="0-1-7"))
    opened = reader.tx
    reader.on_query(_event(query="BEGIN"))
    assert reader.tx is opened


def test_a_transaction_read_again_after_a_reconnect_confirms_nothing() -> None:
    """The library reconnected inside a transaction and reads it again from its start:
    the open one is abandoned, not left to hold back every later position."""
    reader = _reader()
    reader.on_begin(_event(gtid="0-1-6"))
    abandoned = reader.tx
    reader.on_begin(_event(gtid="0-1-6"))
    assert reader.tx is not abandoned and abandoned.end_lsn == -1


def test_ddl_is_a_transaction_of_its_own_at_its_position() -> None:
    """A DDL statement commits by itself: its position is stored once what came before
    is acknowledged."""
    reader = _reader()
    reader.stream.log_pos = 555
    reader.on_query(_event(query="ALTER TABLE t ADD COLUMN x int", schema="shop"))
    ((_tx, position),) = reader.capture.committed
    assert position.pos == 555 and reader.tx is None


def test_a_truncate_of_a_table_not_captured_writes_nothing() -> None:
    reader = _reader()
    reader.capture.config = CaptureConfig(server="m", tables=("shop.t",), truncate_events=True)
    reader.on_query(_event(query="TRUNCATE TABLE other", schema="shop"))
    assert reader.tx is None and len(reader.capture.committed) == 1  # the DDL's own


def test_where_a_row_is_names_its_event_and_index() -> None:
    reader = _reader()
    reader.on_begin(_event(gtid="0-1-6"))
    at = reader.row_at(_event(log_pos=1000), 3)
    assert (at.file, at.pos, at.row, at.gtid, at.ts_ms) == (
        "bin.000002",
        937,  # where the event begins, as Debezium's source.pos
        3,
        "0-1-6",
        1_700_000_000_000,
    )


def test_a_table_id_that_names_another_table_after_a_restart_forgets_the_old_one() -> None:
    """Table ids are the server's and start again after its restart, while the library
    reconnects on its own and this reader's maps stay: an id that named a captured
    table, or the signal table, may name a table not captured. Its rows were read with
    the captured table's codec (written to that table's topic), or as signals."""
    reader = _reader()
    reader.capture.config = CaptureConfig(
        server="m", tables=("shop.t",), signal_table="shop.signals"
    )
    reader.codecs[42] = object()  # shop.t's, before the restart
    reader.fractional_times[42] = ("at",)
    reader.on_table_map(_event(schema="shop", table="signals", table_id=43))
    assert reader.signal_table_id == 43
    reader.on_table_map(_event(schema="shop", table="other", table_id=42))
    reader.on_table_map(_event(schema="shop", table="another", table_id=43))
    assert 42 not in reader.codecs and 42 not in reader.fractional_times
    assert reader.signal_table_id is None
    signals: list[Any] = []
    reader.on_signal_row = signals.append
    for table_id in (42, 43):  # rows of the tables not captured: nothing written
        reader.on_rows(_event(table_id=table_id, rows=[{"values": {"id": 1}}]))
    assert signals == [] and reader.tx is None
