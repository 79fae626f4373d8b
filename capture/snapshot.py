"""The initial snapshot: every table read in the slot's exported snapshot, as op ``r``."""

import time

from bizevents.capture import postgres as pg
from bizevents.capture.core import Stop
from bizevents.capture.encoding import encoded_ts
from bizevents.capture.pgcore import PgCore
from bizevents.capture.pgoutput import format_lsn

__all__ = ["Snapshotting"]


class Snapshotting(PgCore):
    """Reads the snapshot exported with the slot (step 2 of :mod:`bizevents.capture.runner`)."""

    def initial_snapshot(self, snapshot_name: str, point: int) -> None:
        cfg = self.config
        session = self.session
        producer = session.producer
        conn = pg.connect(self.endpoints.dsn, autocommit=False, application="bizevents-snapshot")
        try:
            pg.begin_snapshot(conn, snapshot_name)
            infos = list(self.infos.values())
            counts = {i.oid: pg.count_rows(conn, i.relation) for i in infos}
            for info in infos:
                self.stats.snapshot_expected[info.qualified] = counts[info.oid]
                self.stats.snapshot_rows[info.qualified] = 0
            last_oid = next((i.oid for i in reversed(infos) if counts[i.oid]), None)
            tracker = session.tracker
            tx = tracker.begin(None)
            row = self.snapshot_row
            started_ms = int(time.time() * 1000)
            self.log.info("snapshot started", tables=len(infos), rows=sum(counts.values()))
            for info in infos:
                codec = self.codec(info.relation, info)
                session.codecs[info.oid] = codec
                table = info.qualified
                log = self.log.bind(table=table)
                src = codec.source(started_ms, started_ms * 1000, "true", None).with_long(point)
                last_src = codec.source(started_ms, started_ms * 1000, "last", None).with_long(
                    point
                )
                total = counts[info.oid]
                done = 0
                for rows in pg.read_snapshot_rows(conn, info.relation, cfg.snapshot_fetch_rows):
                    now_ms = encoded_ts(int(time.time() * 1000))
                    for values in rows:
                        done += 1
                        s = last_src if (done == total and info.oid == last_oid) else src
                        row(codec, table, None, values, s, now_ms, tx)
                    codec.events += len(rows)
                    self.stats.snapshot_rows[table] = done
                    self.stats.events[table] = codec.events
                    if self.progress is not None:
                        self.progress(table, done, max(total, done))
                    producer.poll(0)
                    self.check_delivery()
                    self.backpressure()
                    if self.stopping:
                        raise Stop
                log.info("table snapshot read", rows=done)
            conn.commit()
            tracker.commit(tx, point)
        finally:
            conn.close()
        # Done only once every snapshot event is acknowledged.
        self.wait_acknowledged()
        session.tracker.confirmable()
        if self.snapshot_finished is not None:
            self.snapshot_finished()
        self.log.info("snapshot in Kafka", consistent_point=format_lsn(point))
