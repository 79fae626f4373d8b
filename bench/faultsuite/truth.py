"""The truth: each source database's own history of committed changes, and the
order rule the suite holds every key's records to."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any


def history(conn: Any, witness: str, publication: str) -> list[tuple[int, str, str]]:
    """Every committed row change since the witness slot: ``(lsn, schema.table, op)``,
    in commit order (logical decoding hands out whole transactions as they commit)."""
    from bizevents.capture.postgres.messages import Delete, Insert, Update, parse_lsn
    from bizevents.capture.postgres.pgoutput import PgOutputDecoder

    decoder = PgOutputDecoder()
    out: list[tuple[int, str, str]] = []
    with conn.cursor() as cur:
        cur.execute(
            "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
            "'proto_version', '1', 'publication_names', %s)",
            (witness, publication),
        )
        for lsn, data in cur:
            m = decoder.decode(bytes(data))
            if isinstance(m, Insert | Update | Delete):
                op = {Insert: "c", Update: "u", Delete: "d"}[type(m)]
                table = f"{m.relation.namespace}.{m.relation.name}"
                out.append((parse_lsn(lsn), table, op))
    return out


def binlog_history(dsn: str, schema: str) -> list[tuple[Any, str, str]]:
    """Every row change of ``schema`` in MariaDB's binlog, from its first file to its
    current end: ``((file, pos, row), schema.table, op)`` in commit order (the binlog
    holds only committed transactions, each whole). ``(file, pos, row)`` is where
    capture's ``source`` says the change is: the rows event's start and the row's
    index in it."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import HeartbeatLogEvent, RotateEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    from bizevents.capture.mariadb import queries as my

    conn = my.connect(dsn)
    try:
        end = my.master_position(conn)
    finally:
        conn.close()
    ops = {WriteRowsEvent: "c", UpdateRowsEvent: "u", DeleteRowsEvent: "d"}
    # Blocking, to the end read first: a non-blocking dump of this MariaDB (10.11) was
    # reset by the server part-way through the first file, every time.
    stream = BinLogStreamReader(
        connection_settings={**my.connection_settings(dsn), "charset": "utf8mb4"},
        server_id=random.randint(10_000, 2**31),  # a replica id of its own
        blocking=True,
        is_mariadb=True,  # with no GTID state: from the first binlog file
        slave_heartbeat=0.5,
        only_schemas=[schema],
        only_events=[*ops, XidEvent, RotateEvent, HeartbeatLogEvent],
    )
    out: list[tuple[Any, str, str]] = []
    deadline = time.monotonic() + 300  # the heartbeats bring the loop here when idle
    try:
        for event in stream:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the binlog's end {end} not reached in 300 s")
            op = ops.get(type(event))
            if op is not None:
                # where the event begins (the packet's size has the header and checksum in):
                # Debezium's source.pos, and capture's
                start = int(event.packet.log_pos) - int(event.packet.event_size)
                table = f"{event.schema}.{event.table}"
                for row, _ in enumerate(event.rows):
                    out.append(((str(stream.log_file), start, row), table, op))
            if (str(stream.log_file), int(stream.log_pos)) >= (end.file, end.pos):
                break
    finally:
        stream.close()
    return out


def change_identity(source: Any) -> Any:
    """A captured change's place in its database's log, as :func:`history` and
    :func:`binlog_history` name it; ``None`` for a position of neither kind."""
    from bizevents.contracts.envelope import MySqlPosition, PgPosition

    position = source.position
    if isinstance(position, PgPosition):
        return position.lsn
    if isinstance(position, MySqlPosition):
        return (position.file, position.pos, position.row)
    return None


def gtid_seq(state: str | None, domain: int = 0) -> int:
    """The sequence number of ``domain`` in a MariaDB GTID state (``0-1-42,1-1-7``)."""
    for part in (state or "").split(","):
        fields = part.strip().split("-")
        if len(fields) == 3 and fields[0] == str(domain):
            return int(fields[2])
    return -1


def order_breaks(sequences: dict[Any, list[tuple[int, Any]]]) -> list[str]:
    """Per key, ``(commit index, identity)`` in arrival order: a record older than one
    already seen is fine only as a copy of a record already seen (a re-sent suffix)."""
    breaks: list[str] = []
    for key, seq in sequences.items():
        latest = -1
        seen: set[Any] = set()
        for index, identity in seq:
            if index < latest and identity not in seen:
                breaks.append(f"{key}: commit #{index} after #{latest}")
            seen.add(identity)
            latest = max(latest, index)
    return breaks


def missing_neighbours(
    truth: list[tuple[Any, str, str]],
    seen: Mapping[tuple[str, Any], int],
    places: Mapping[tuple[str, Any], list[str]],
    at: int,
    around: int = 3,
) -> str:
    """The committed changes around a missing one (``truth[at]``), each with the copies
    the technical topics hold and where (partition@offset): whether its whole
    transaction went missing, or its table's changes alone, and what capture wrote
    just before and after it."""
    parts = []
    for n in range(max(0, at - around), min(len(truth), at + around + 1)):
        position, table, op = truth[n]
        ident = (table, position)
        where = ",".join(places.get(ident, [])[:3])
        mark = ">" if n == at else " "
        parts.append(f"{mark}{table} {op} {position} x{seen.get(ident, 0)} {where}".rstrip())
    return "around it: " + " | ".join(parts)
