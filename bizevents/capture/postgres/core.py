"""What PostgreSQL's snapshot and stream share: the captured tables as the catalog
describes them, the type mapper, the per-table codecs, and the slot's feedback."""

import json
import time
from typing import Any, Final

import psycopg2.extras
import structlog

from bizevents.capture.core.capture import CaptureCore
from bizevents.capture.core.filters import FilterError, condition_text, parse_condition, resolve
from bizevents.capture.postgres import queries as pg
from bizevents.capture.postgres.codec import TableCodec
from bizevents.capture.postgres.messages import Relation
from bizevents.capture.postgres.types import PgTypeMapper

__all__ = ["PgCore"]

_FEEDBACK_EVERY_S: Final = 0.5


class PgCore(CaptureCore):
    """The PostgreSQL capture's state; :class:`~bizevents.capture.postgres.runner.PostgresCapture`
    is made of its snapshot and stream parts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.log = structlog.get_logger("bizevents.capture.postgres").bind(
            server=cfg.server, slot=cfg.slot_name
        )
        self.infos: dict[int, pg.TableInfo] = {}
        self.types = PgTypeMapper(unknown_as_text=cfg.unknown_as_text)
        self.database = ""
        self._last_feedback = 0.0
        self.last_sent_lsn = 0

    def ledger_source(self) -> str:
        return self.config.slot_name

    def snapshot_raw(self, codec: Any, row: Any) -> tuple[bytes, str]:
        # The values as PostgreSQL gave them, each type's text output; NULL in place of
        # a column not captured.
        values = [None if i in codec.dropped else v for i, v in enumerate(row)]
        return json.dumps(values).encode(), "snapshot-text-json"

    def feedback(self, cursor: psycopg2.extras.ReplicationCursor, force: bool) -> None:
        """Confirm to the slot the newest position Kafka acknowledged (at most every
        half second unless forced; a keepalive at least every heartbeat)."""
        now = time.monotonic()
        if not force and now - self._last_feedback < _FEEDBACK_EVERY_S:
            return
        tracker = self.session.tracker
        lsn = tracker.confirmable()
        if tracker.idle:
            lsn = tracker.advance_idle(cursor.wal_end)
        keepalive = now - self._last_feedback > self.config.heartbeat_interval_s
        if lsn > self.last_sent_lsn or force or keepalive:
            cursor.send_feedback(write_lsn=lsn, flush_lsn=lsn, force=True)
            self.last_sent_lsn = max(lsn, self.last_sent_lsn)
            self.stats.acknowledged_lsn = self.last_sent_lsn
        self._last_feedback = now
        self.stats.in_flight = tracker.in_flight

    def captured_tables(self) -> list[str]:
        return [i.qualified for i in self.infos.values()]

    def checked_condition(self, table: str, where: str) -> str:
        info = self.info_named(table)
        if info is None:
            raise FilterError(f"{table} is not captured")
        columns = [c.name for c in info.relation.columns]
        cond = resolve(parse_condition(where), columns, table)
        conn = pg.connect(self.endpoints.dsn, autocommit=False, application="bizevents-signal")
        try:
            reason = pg.check_condition(
                conn, info.relation, cond, self.config.snapshot_query_timeout_s
            )
        finally:
            conn.close()
        if reason is not None:
            raise FilterError(reason)
        return condition_text(cond)

    def info_named(self, qualified: str) -> pg.TableInfo | None:
        """The captured table ``schema.table``, if it is one."""
        return next((i for i in self.infos.values() if i.qualified == qualified), None)

    def topic(self, relation: Relation) -> str:
        return f"{self.config.prefix}.{relation.namespace}.{relation.name}"

    def codec(self, relation: Relation, info: pg.TableInfo) -> TableCodec:
        """A table's codec, its schemas registered."""
        cfg = self.config
        flagged = relation.key_columns if relation.replica_identity in ("d", "i") else None
        names = [c.name for c in relation.columns]
        keys, nullable = pg.key_columns(
            relation.qualified_name,
            relation.replica_identity,
            names if flagged is None else [c.name for c in flagged],
            info.primary_key,
            names,
        )
        codec = TableCodec(
            server=cfg.server,
            database=self.database,
            topic=self.topic(relation),
            relation=relation,
            key_names=keys,
            types=self.types,
            keep=cfg.column_filter(relation.qualified_name).keeps,
            key_nullable=nullable,
        )
        self.register(codec, relation.qualified_name)
        return codec
