"""Issue 11: no single change halts capture (real PostgreSQL, broker and registry)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bizevents.devstack import Endpoints
from contracts.envelope import ChangeEvent
from contracts.logical import UNAVAILABLE
from tests.capture.capture_helpers import (
    Db,
    capture_endpoints,
    database,
    in_process,
    read_topic,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def db(bizevents_stack: Endpoints) -> Any:
    with database(bizevents_stack) as made:
        yield made


def _changes(db: Db, table: str) -> list[ChangeEvent]:
    records = sorted(read_topic(db.endpoints, db.topic(table)), key=lambda r: r.offset)
    return [r.decoded for r in records if isinstance(r.decoded, ChangeEvent)]


# Each a type family PostgreSQL can store out of line, and a value big enough to be.
_TOASTED = {
    "ints": ("int[]", "(SELECT array_agg(g) FROM generate_series(1, 3000) g)"),
    "big_ints": ("bigint[]", "(SELECT array_agg(g) FROM generate_series(1, 3000) g)"),
    "moods": ("{s}.mood[]", "(SELECT array_agg('ok'::{s}.mood) FROM generate_series(1, 3000))"),
    "amount": ("numeric(1000, 2)", "(repeat('7', 990) || '.25')::numeric"),
    "free": ("numeric", "(repeat('9', 3000))::numeric"),
    "amounts": (
        "numeric(10, 2)[]",
        "(SELECT array_agg(g::numeric) FROM generate_series(1, 3000) g)",
    ),
    "body": ("text", "repeat('x', 9000)"),
    "doc": ("jsonb", "(SELECT jsonb_agg(g) FROM generate_series(1, 3000) g)"),
    "blob": ("bytea", "decode(repeat('ab', 9000), 'hex')"),
    "ids": ("uuid[]", "(SELECT array_agg(gen_random_uuid()) FROM generate_series(1, 300))"),
    "stamps": ("timestamptz[]", "(SELECT array_agg(now()) FROM generate_series(1, 600))"),
    "days": ("date[]", "(SELECT array_agg(current_date + g) FROM generate_series(1, 3000) g)"),
    "flags": ("boolean[]", "(SELECT array_agg(g % 2 = 0) FROM generate_series(1, 9000) g)"),
    "ratios": ("float8[]", "(SELECT array_agg(g / 3.0::float8) FROM generate_series(1, 900) g)"),
}


def test_unchanged_toasted_values_of_every_type_are_unavailable(db: Db, tmp_path: Path) -> None:
    """An UPDATE that leaves a TOASTed value of any type alone: UNAVAILABLE, no halt."""
    s = db.schema
    db.sql(f"CREATE TYPE {s}.mood AS ENUM ('sad', 'ok', 'happy')")
    cols = ", ".join(f"{n} {t.format(s=s)}" for n, (t, _) in _TOASTED.items())
    db.sql(f"CREATE TABLE {s}.t (id int PRIMARY KEY, small text, {cols})")
    # Every value out of line, even a 500-byte numeric, once the row is big at all.
    db.sql(f"ALTER TABLE {s}.t SET (toast_tuple_target = 128)")
    for name in _TOASTED:
        db.sql(f"ALTER TABLE {s}.t ALTER COLUMN {name} SET STORAGE EXTERNAL")
    values = ", ".join(v.format(s=s) for _, v in _TOASTED.values())
    config = db.config(["t"])
    with in_process(config, capture_endpoints(db.endpoints, tmp_path)) as run:
        run.wait_snapshot()
        db.sql(f"INSERT INTO {s}.t VALUES (1, 'a', {values})")
        db.sql(f"UPDATE {s}.t SET small = 'b'")
        db.sql(f"INSERT INTO {s}.t (id, small) VALUES (2, 'after')")
        run.wait_acked(db.wal_lsn())
        run.stop()
    events = _changes(db, "t")
    assert [e.op for e in events] == ["c", "u", "c"]
    created, updated, _ = events
    assert created.after is not None and updated.after is not None
    assert updated.after["small"] == "b"
    for name in _TOASTED:
        assert created.after[name] is not UNAVAILABLE, name
        assert updated.after[name] is UNAVAILABLE, name
