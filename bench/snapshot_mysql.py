"""MariaDB incremental snapshots: the stream's latency while one runs, and its rate.

Per run, on a fresh table of ``--rows`` rows (and a small probe table), with
``capture mysql`` in this process:

1. a writer changes the big table at ``--rate`` changes/s (transactions of 50 rows) and
   the probe table 50 times a second, without a snapshot: the probe's commit ->
   technical-topic latency (the Kafka timestamp minus the client's clock written into the
   probe row; the binlog's own timestamps are whole seconds);
2. an incremental snapshot of the big table under the same load, with the probe's
   latency during it, its rows/s, and how long each turn of the binlog loop spent on the
   snapshot's work (p99 and max: what a change read next waits for).

``--slice N`` sets the rows fetched or written per turn of the binlog loop (128 by
default); ``--slice 0`` a whole chunk per turn, as before slices. Prints each run, then
the median of the runs with min-max.

    .venv/bin/python bench/snapshot_mysql.py                  # a private stack on free ports
    .venv/bin/python bench/snapshot_mysql.py --slice 0        # a chunk per turn
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import kit  # noqa: E402

#: Seconds of snapshot work per busy turn of the binlog loop (idle turns left out).
TURNS: list[float] = []


def mysql_writer(dsn: str, big: str, probe: str, rows: int, rate: int) -> kit.RateWriter:
    """Updates ``rate`` rows/s of the big table and 50/s of the probe table (each probe
    change carries the client's clock in ms)."""
    from bizevents.capture.mariadb import queries as my

    def step(cur: Any, ids: list[int], probe_id: int | None) -> None:
        cur.execute("START TRANSACTION")
        cur.execute(f"UPDATE {big} SET qty = qty + 1 WHERE id IN %s", (ids,))
        cur.execute("COMMIT")
        if probe_id is not None:
            cur.execute(
                f"UPDATE {probe} SET t = %s WHERE id = %s", (int(time.time() * 1000), probe_id)
            )

    return kit.RateWriter(lambda: my.connect(dsn), step, rows, rate)


def client_ms(event: Any) -> int | None:
    """A probe change's time on the client's clock, written into the row."""
    return int(dict(event.after)["t"]) if event.after is not None else None


def one_run(
    endpoints: Any, rows: int, rate: int, load_s: float, chunk: int, tmp: Path
) -> dict[str, float]:
    from bizevents.capture.config import CaptureConfig
    from bizevents.capture.mariadb import queries as my
    from bizevents.capture.mariadb.capture import MysqlCapture

    tag = uuid.uuid4().hex[:8]
    database = f"snap_{tag}"
    big, probe = f"{database}.big", f"{database}.probe"
    dsn = endpoints.mysql_dsn
    admin = my.connect(dsn)
    kafka = {"bootstrap.servers": endpoints.bootstrap_servers}
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
        cur.execute(f"USE {database}")  # for the sequence tables seq_1_to_N
        cur.execute(
            f"CREATE TABLE {big} (id BIGINT PRIMARY KEY, name VARCHAR(40), qty INT, "
            "price DECIMAL(12,2), at DATETIME(6), flag BOOLEAN)"
        )
        cur.execute(f"CREATE TABLE {probe} (id INT PRIMARY KEY, t BIGINT)")
        cur.execute(f"INSERT INTO {probe} SELECT seq, 0 FROM seq_1_to_100")
    with admin.cursor() as cur:
        cur.execute(
            f"INSERT INTO {big} SELECT seq, CONCAT('customer ', seq), seq % 97, seq * 1.25, "
            f"NOW(6), seq % 2 FROM seq_1_to_{rows}"
        )
    # From the binlog's end: the big table's rows come by an incremental snapshot on demand.
    config = CaptureConfig(
        server=f"snap{tag}",
        dsn=dsn,
        tables=(big, probe),
        partitions=3,
        snapshot="never",
        incremental_chunk_rows=chunk,
    )
    runner, stats, thread = kit.capture_thread(MysqlCapture, config, dsn, endpoints, "binlog", tmp)
    out: dict[str, float] = {}

    try:
        thread.start()
        kit.wait_snapshot_done(stats, thread)
        writer = mysql_writer(dsn, big, probe, rows, rate)
        writer.start()
        time.sleep(2)
        idle_from = int(time.time() * 1000)
        time.sleep(load_s)
        idle_to = int(time.time() * 1000)
        changes_start, started = writer.changes, time.perf_counter()
        TURNS.clear()
        out["incremental under load rows/s"] = kit.incremental_rate(
            kafka, config, runner, thread, big, rows
        )
        turns = [t for t in TURNS if t > 0.0002]  # turns with snapshot work to do
        out["snapshot turn p99 ms"] = kit.p99(turns) * 1000
        out["snapshot turn max ms"] = max(turns, default=float("nan")) * 1000
        during_to = int(time.time() * 1000)
        out["writer changes/s"] = (writer.changes - changes_start) / (time.perf_counter() - started)
        lat = kit.stopped_probe(writer, endpoints, f"{config.prefix}.{probe}", client_ms)
        out |= kit.probe_figures(lat, (idle_from, idle_to), (idle_to + 1, during_to), "before")
    finally:
        runner.request_stop()
        thread.join(60)
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {database}")
        admin.close()
    return out


def main() -> None:
    parser = kit.snapshot_parser(__doc__, rows=100_000, rate=2_000, load_s=8.0)
    parser.add_argument("--slice", type=int, default=128, help="rows per turn; 0: a chunk")
    args = parser.parse_args()

    from bizevents.capture.core import chunks
    from bizevents.capture.mariadb import stream as mysqlstream

    chunks.SLICE = args.slice or 2**31  # the bench's one knob
    # How long each turn's snapshot work holds the binlog loop (a change read after it
    # waits that long): the figure slices bound, less blurred by the machine's load than
    # the probe's end-to-end latency.
    step = mysqlstream.BinlogReader.snapshot_step

    def timed_step(self: Any, idle: bool = False, budget_s: float = 0.0) -> None:
        started = time.perf_counter()
        step(self, idle, budget_s)
        if not idle:
            TURNS.append(time.perf_counter() - started)

    mysqlstream.BinlogReader.snapshot_step = timed_step  # type: ignore[method-assign]
    with kit.bench_stack("bench-snapshot-mysql-", mysql=True) as (endpoints, tmp, _):
        runs = kit.each_run(
            args.runs,
            lambda n: one_run(
                endpoints, args.rows, args.rate, args.load_seconds, args.chunk_rows, tmp / f"s{n}"
            ),
        )
        per_turn = args.slice or "a chunk"
        title = f"{args.rows:,} rows, slice {per_turn}, {args.runs} runs, median (min-max):"
        kit.print_runs(runs, title, digits=1)


if __name__ == "__main__":
    main()
