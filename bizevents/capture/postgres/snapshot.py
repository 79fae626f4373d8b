"""The initial snapshot: every table read in the slot's exported snapshot, as op ``r``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.capture import CaptureEndpoints
from bizevents.capture.core.initial import SnapshotTable, SnapshotWriter, write_snapshot
from bizevents.capture.postgres import queries as pg
from bizevents.capture.postgres.codec import TableCodec
from bizevents.capture.postgres.messages import Relation, format_lsn

__all__ = ["SnapshotHost", "initial_snapshot"]


class SnapshotHost(SnapshotWriter, Protocol):
    """What PostgreSQL's initial snapshot asks of its capture, beyond the writer's."""

    config: CaptureConfig
    endpoints: CaptureEndpoints
    #: The captured tables, by oid.
    infos: dict[int, pg.TableInfo]
    snapshot_finished: Callable[[], None] | None

    def codec(self, relation: Relation, info: pg.TableInfo) -> TableCodec: ...

    def wait_acknowledged(self) -> None: ...


def initial_snapshot(capture: SnapshotHost, snapshot_name: str, point: int) -> None:
    """Read the snapshot exported with the slot (step 2 of
    :mod:`bizevents.capture.postgres.runner`)."""
    cfg = capture.config
    session = capture.session
    conn = pg.connect(capture.endpoints.dsn, autocommit=False, application="bizevents-snapshot")
    try:
        pg.begin_snapshot(conn, snapshot_name)
        infos = list(capture.infos.values())
        counts = {i.oid: pg.count_rows(conn, i.relation) for i in infos}
        for info in infos:
            capture.stats.snapshot_expected[info.qualified] = counts[info.oid]
            capture.stats.snapshot_rows[info.qualified] = 0
        last_oid = next((i.oid for i in reversed(infos) if counts[i.oid]), None)
        tracker = session.tracker
        tx = tracker.begin(None)
        started_ms = int(time.time() * 1000)
        capture.log.info("snapshot started", tables=len(infos), rows=sum(counts.values()))

        def table(info: pg.TableInfo) -> SnapshotTable:
            codec = session.codecs[info.oid] = capture.codec(info.relation, info)
            source = codec.source(started_ms, started_ms * 1000, "true", None)
            last = codec.source(started_ms, started_ms * 1000, "last", None)
            return SnapshotTable(
                info.qualified,
                codec,
                pg.read_snapshot_rows(conn, info.relation, cfg.snapshot_fetch_rows),
                source.with_long(point),
                last.with_long(point),
                last=info.oid == last_oid,
                expected=counts[info.oid],
            )

        write_snapshot(
            capture, conn, (table(info) for info in infos), tx, lambda t: tracker.commit(t, point)
        )
    finally:
        conn.close()
    # Done only once every snapshot event is acknowledged.
    capture.wait_acknowledged()
    session.tracker.confirmable()
    if capture.snapshot_finished is not None:
        capture.snapshot_finished()
    capture.log.info("snapshot in Kafka", consistent_point=format_lsn(point))
