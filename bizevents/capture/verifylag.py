"""Whether capture has caught up with the database before verify compares: PostgreSQL's
slot confirmed, or MariaDB/MySQL's binlog position stored in capture's state topic, at
or past the database's position of the call."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from bizevents.capture.postgres import queries as pg
from bizevents.capture.verifytables import is_mysql

__all__ = ["capture_progress", "wait_until"]


def capture_progress(
    config: Any, dsn: str, side: Any, kafka: dict[str, Any], wait_s: float
) -> Callable[[], str | None]:
    """A check of capture against the database, on the catalog connection ``side``:
    ``None`` once capture confirmed a position at or past the database's position of
    the call (PostgreSQL: the slot's confirmed position; MySQL/MariaDB: the binlog
    position in capture's state topic), waiting up to ``wait_s``; else one sentence
    saying capture is behind or stopped, and by how much."""
    if is_mysql(dsn):
        return partial(_binlog_behind, config, side, kafka, wait_s)
    return partial(_slot_behind, config.slot_name, side, wait_s)


_LAG = "so a difference may be a change capture has not written yet"


def _slot_behind(slot_name: str, side: Any, wait_s: float) -> str | None:
    from bizevents.capture.postgres.messages import format_lsn, parse_lsn

    def now() -> int:
        with side.cursor() as cur:
            cur.execute("SELECT pg_current_wal_lsn()::text")
            row = cur.fetchone()
        return parse_lsn(str(row[0]))

    def confirmed() -> int:
        slot = pg.slot_info(side, slot_name)
        return (slot.confirmed_flush_lsn or 0) if slot is not None else 0

    lsn = now()
    if wait_until(lambda: confirmed() >= lsn, wait_s):
        return None
    slot = pg.slot_info(side, slot_name)
    if slot is None:
        return (
            f"capture's slot {slot_name} does not exist (capture has not run, or its slot "
            f"was dropped), {_LAG}"
        )
    at = slot.confirmed_flush_lsn or 0
    state = "stopped" if slot.active_pid is None else "running but behind"
    return (
        f"capture is {state}: its slot {slot_name} confirmed {format_lsn(at)}, "
        f"{lsn - at} bytes of WAL before the database's {format_lsn(lsn)} after {wait_s:g} s, "
        f"{_LAG}"
    )


def _binlog_behind(config: Any, side: Any, kafka: dict[str, Any], wait_s: float) -> str | None:
    from bizevents.capture.core.state import StateStore
    from bizevents.capture.mariadb import queries as my

    store = StateStore(kafka, config.offsets_topic_name, config.server)

    def stored() -> tuple[str, int]:
        at = store.read(store.position_key()) or {}
        return str(at.get("file", "")), int(at.get("pos", 0))

    now = my.master_position(side)
    if wait_until(lambda: stored() >= (now.file, now.pos), wait_s):
        return None
    file, pos = stored()
    if not file:
        return (
            f"capture has stored no binlog position in {config.offsets_topic_name} "
            f"(it has not run, or its position was lost), {_LAG}"
        )
    if file == now.file:
        gap = f"{now.pos - pos} bytes of binlog"
    else:
        files = my.binlog_files(side)
        later = files.index(now.file) - files.index(file) if file in files else None
        gap = f"{later} binlog files" if later is not None else "binlogs the server no longer has"
    return (
        f"capture is behind or stopped: its stored position {file}:{pos} is {gap} before "
        f"the server's {now.file}:{now.pos} after {wait_s:g} s, {_LAG}"
    )


def wait_until(passed: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``passed`` until true or ``timeout_s``; whether it became true."""
    deadline = time.monotonic() + timeout_s
    while not passed():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
