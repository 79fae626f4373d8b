"""One PostgreSQL capture run: snapshot, stream, acknowledge, until stopped.

The order of things, and why:

1. The publication and the tables are checked (a table whose deletes cannot be keyed
   is refused with the ``ALTER TABLE`` that fixes it), topics are created.
2. A new slot is created on the replication connection with ``EXPORT_SNAPSHOT``. A
   second connection imports that snapshot (``SET TRANSACTION SNAPSHOT``) and reads
   every table in it; the rows go to Kafka as op ``r``. Only when Kafka acknowledged
   every one of them is the snapshot recorded as done (:class:`SnapshotState`).
   Streaming then starts at the slot's consistent point: changes committed after the
   snapshot arrive from the slot, those before it are in the snapshot, none in both
   or neither. Because streaming starts only after the snapshot is in Kafka, a row's
   snapshot event precedes its first streamed change in its partition.
3. Streaming: each pgoutput change becomes a Debezium envelope produced to its
   table's topic. The slot's flush position advances only to the end of a
   transaction all of whose events (and all earlier ones) Kafka acknowledged
   (:class:`AckTracker`). A restart resumes from there: duplicates, never loss.
4. Kafka slow or away: when ``max_in_flight`` events wait for acknowledgement the
   slot is not read (the walsender blocks on its socket) until they drain.
   The database away: reconnect with exponential backoff, resume from the slot.
5. SIGTERM/SIGINT: stop reading, wait for every acknowledgement, confirm, exit 0.
   A second signal gives up waiting.
"""

from collections.abc import Sequence
from contextlib import suppress

import psycopg2
import psycopg2.extras

from bizevents.capture import postgres as pg
from bizevents.capture.core import HEADER_CAPTURE_FORMAT, HEADER_CAPTURE_TABLE, CaptureEndpoints
from bizevents.capture.exceptions import CaptureError
from bizevents.capture.offsets import AckTracker, SnapshotState
from bizevents.capture.pgoutput import (
    format_lsn,
)
from bizevents.capture.pgtypes import PgTypeMapper, enum_types_from_rows
from bizevents.capture.sink import create_topics
from bizevents.capture.snapshot import Snapshotting
from bizevents.capture.stream import Streaming
from bizevents.plumbing.errors import TransientError

__all__ = ["HEADER_CAPTURE_FORMAT", "HEADER_CAPTURE_TABLE", "CaptureEndpoints", "PostgresCapture"]


def _connection_lost(exc: psycopg2.DatabaseError) -> bool:
    """Whether a psycopg2 error is the database going away rather than a bad statement.

    A fast shutdown or restart ends the replication stream with the bare
    ``DatabaseError`` libpq-level failures take ("no COPY in progress", "server closed
    the connection"); its subclasses other than ``OperationalError`` (a terminated
    session, a refused connection) are errors of a statement, which a retry repeats.
    """
    return type(exc) is psycopg2.DatabaseError or isinstance(exc, psycopg2.OperationalError)


class PostgresCapture(Snapshotting, Streaming):
    """Captures the configured tables of one database into technical topics."""

    LOST = (psycopg2.DatabaseError, psycopg2.InterfaceError, TransientError)

    def _lost(self, exc: BaseException) -> bool:
        return not isinstance(exc, psycopg2.DatabaseError) or _connection_lost(exc)

    def _session(self) -> None:
        cfg = self.config
        side = pg.connect(self.endpoints.dsn)
        repl = None
        try:
            with side.cursor() as cur:
                cur.execute("SELECT current_database()")
                row = cur.fetchone()
                self._database = str(row[0]) if row else ""
            self.state = SnapshotState.for_slot(
                self.endpoints.state_dir, self._database, cfg.slot_name
            )
            self._prepare(side)
            repl = pg.replication_connect(self.endpoints.dsn)
            cur = repl.cursor()
            slot = pg.slot_info(side, cfg.slot_name)
            if slot is not None and slot.active_pid is not None:
                raise TransientError(
                    f"slot {cfg.slot_name} is in use by backend pid {slot.active_pid}"
                )
            if slot is not None and slot.plugin != "pgoutput":
                raise CaptureError(
                    f"slot {cfg.slot_name} uses plugin {slot.plugin}, not pgoutput; drop it or "
                    "configure another slot name"
                )
            if slot is not None and not self.state.done():
                if cfg.snapshot == "initial":
                    self.log.warning("slot exists but its snapshot never finished: redoing it")
                    pg.drop_slot(side, cfg.slot_name)
                    slot = None
                else:
                    self.state.write(snapshot_done=True, snapshot="never", slot=cfg.slot_name)
            if slot is None:
                self.state.clear()
                if cfg.snapshot == "initial":
                    point, name = pg.create_slot_exporting(cur, cfg.slot_name)
                    self.log.info("slot created", consistent_point=format_lsn(point))
                    self._snapshot(name, point)
                    self.state.write(
                        snapshot_done=True, slot=cfg.slot_name, consistent_point=format_lsn(point)
                    )
                else:
                    cur.create_replication_slot(cfg.slot_name, output_plugin="pgoutput")
                    self.state.write(snapshot_done=True, snapshot="never", slot=cfg.slot_name)
            self.stats.snapshot_done = True
            self._stream(cur, side)
        finally:
            self._tracker.abandon_open()
            if repl is not None:
                with suppress(Exception):
                    repl.close()
            with suppress(Exception):
                side.close()
            self._drain()
            self._tracker = AckTracker()

    def _prepare(self, side: pg.Connection) -> None:
        cfg = self.config
        labels, arrays = enum_types_from_rows(pg.load_enum_rows(side))
        self._types = PgTypeMapper(
            enum_labels=labels, array_elements=arrays, unknown_as_text=cfg.unknown_as_text
        )
        if cfg.tables:
            names: Sequence[str] = cfg.tables
        else:
            found = pg.publication_tables(side, cfg.publication_name)
            if found is None:
                raise CaptureError(
                    f"publication {cfg.publication_name} does not exist; create it or list "
                    "the tables to capture (tables = [...])"
                )
            names = found
        # Checked before publishing: a published table without a replica identity
        # would make the application's own UPDATEs and DELETEs fail.
        infos = pg.describe_tables(side, names)
        if cfg.tables:
            pg.ensure_publication(side, cfg.publication_name, cfg.tables)
        self._infos = {i.oid: i for i in infos}
        for info in infos:
            # Fails now, naming table and column, when a type has no mapping.
            self._types.fields(info.relation)
        assert self._admin is not None
        topics = [self._topic(i.relation) for i in infos]
        if cfg.on_conversion_error == "dead-letter":
            topics.append(cfg.dlq_topic)
        create_topics(self._admin, topics, cfg)
