"""One PostgreSQL capture run: snapshot, stream, acknowledge, until stopped.

The order of things, and why:

1. The publication and the tables are checked (a table whose deletes cannot be keyed
   is refused with the ``ALTER TABLE`` that fixes it), topics are created.
2. A new slot is created on the replication connection with ``EXPORT_SNAPSHOT``. A
   second connection imports that snapshot (``SET TRANSACTION SNAPSHOT``) and reads
   every table in it; the rows go to Kafka as op ``r``. Only when Kafka acknowledged
   every one of them is the snapshot recorded as done, in the snapshot ledger of the
   compacted state topic (:mod:`bizevents.capture.core.state`), so that a capture started
   elsewhere against the same Kafka does not snapshot again.
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

from bizevents.capture.core.capture import (
    HEADER_CAPTURE_FORMAT,
    HEADER_CAPTURE_TABLE,
    CaptureEndpoints,
)
from bizevents.capture.core.offsets import AckTracker
from bizevents.capture.core.sink import create_dead_letter_topic, create_topics
from bizevents.capture.core.state import Ledger
from bizevents.capture.exceptions import CaptureError
from bizevents.capture.postgres import queries as pg
from bizevents.capture.postgres.messages import format_lsn
from bizevents.capture.postgres.snapshot import initial_snapshot
from bizevents.capture.postgres.stream import Streaming
from bizevents.capture.postgres.types import PgTypeMapper, enum_types_from_rows
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


class PostgresCapture(Streaming):
    """Captures the configured tables of one database into technical topics."""

    LOST = (psycopg2.DatabaseError, psycopg2.InterfaceError, TransientError)

    def lost(self, exc: BaseException) -> bool:
        return not isinstance(exc, psycopg2.DatabaseError) or _connection_lost(exc)

    def connected(self) -> None:
        cfg = self.config
        session = self.session
        side = pg.connect(self.endpoints.dsn)
        repl = None
        try:
            with side.cursor() as cur:
                cur.execute("SELECT current_database()")
                row = cur.fetchone()
                self.database = str(row[0]) if row else ""
            self.prepare(side)
            stored = self.read_ledger()
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
            tables = [i.qualified for i in self.infos.values()]
            done = stored is not None and stored.initial_done
            if slot is not None and not done and cfg.snapshot == "initial":
                # The exported snapshot that went with the slot is gone: start again.
                self.log.warning("slot exists but its snapshot never finished: redoing it")
                pg.drop_slot(side, cfg.slot_name)
                slot = None
            if slot is None:
                if cfg.snapshot == "initial":
                    point, name = pg.create_slot_exporting(cur, cfg.slot_name)
                    self.log.info("slot created", consistent_point=format_lsn(point))
                    initial_snapshot(self, name, point)
                    self.ledger = Ledger(True, tables, [], format_lsn(point)).signals_from(stored)
                else:
                    cur.create_replication_slot(cfg.slot_name, output_plugin="pgoutput")
                    self.ledger = Ledger(True, tables).signals_from(stored)
                self.store_ledger()
            elif stored is None or cfg.snapshot == "never":
                # Stream only: every table counts as present, none is snapshotted.
                self.ledger = Ledger(True, tables).signals_from(stored)
                self.store_ledger()
            else:
                self.ledger = stored
            self.start_incremental(tables)
            self.stats.snapshot_done = True
            self.stream(cur, side)
        finally:
            session.tracker.abandon_open()
            if repl is not None:
                with suppress(Exception):
                    repl.close()
            with suppress(Exception):
                side.close()
            self.drain()
            session.tracker = AckTracker()

    def prepare(self, side: pg.Connection) -> None:
        cfg = self.config
        labels, arrays = enum_types_from_rows(pg.load_enum_rows(side))
        self.types = PgTypeMapper(
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
        if cfg.signal_table is not None:
            # Its inserts reach capture through the slot, in their place in the stream.
            if not pg.table_exists(side, cfg.signal_table):
                raise self.missing_signal_table(cfg.signal_table, mysql=False)
            pg.ensure_publication(side, cfg.publication_name, [cfg.signal_table])
        self.infos = {i.oid: i for i in infos}
        for info in infos:
            # Fails now, naming table and column, when a type has no mapping.
            self.types.fields(info.relation)
        create_topics(self.session.admin, [self.topic(i.relation) for i in infos], cfg)
        create_dead_letter_topic(self.session.admin, cfg)  # a refused record goes there too
        if cfg.on_conversion_error == "park":
            self.restore_parked()
