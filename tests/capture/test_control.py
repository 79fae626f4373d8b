"""``bizevents.capture.control``: positions written as each source writes them."""

from __future__ import annotations

from bizevents.capture.config import CaptureConfig
from bizevents.capture.control import position_writer
from bizevents.capture.mariadb.quarantine import describe_position
from bizevents.capture.postgres.messages import format_lsn


def test_a_mariadb_capture_writes_binlog_places_and_a_postgres_one_lsns() -> None:
    for dsn in ("mysql://u:p@h:1/db", "mariadb://u:p@h:1/db"):
        assert (
            position_writer(CaptureConfig(server="s", dsn=dsn, tables=("s.t",)))
            is describe_position
        )
    for dsn in ("postgresql://u@h/db", None):
        assert position_writer(CaptureConfig(server="s", dsn=dsn, tables=("s.t",))) is format_lsn
