"""``bizevents verify``: prove that the technical topics hold the tables (or show the gap)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bizevents.clikit import console, fails_cleanly, json_text, settings_of
from bizevents.plumbing.errors import ConfigError

if TYPE_CHECKING:
    from bizevents.capture.verify import TopicState


@click.command()
@click.argument(
    "capture_config",
    metavar="CAPTURE_FILE",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
)
@click.option("--table", "tables", multiple=True, help="Only this table (repeatable).")
@click.option("--chunk-rows", default=5_000, show_default=True, help="Keys per compared chunk.")
@click.option(
    "--rechecks",
    default=2,
    show_default=True,
    help="Times a differing key is checked again once capture passed the database.",
)
@click.option(
    "--repair", is_flag=True, help="Ask capture to snapshot again exactly the differing chunks."
)
@click.option("--json", "as_json", is_flag=True, help="The report as JSON.")
@click.option(
    "--spark",
    is_flag=True,
    help="Compare as a Spark job on the replay's executors (for tables larger than memory).",
)
@click.option("--master", default=None, help="With --spark: the Spark master (local[2], ...).")
@click.pass_context
@fails_cleanly
def verify(
    ctx: click.Context,
    capture_config: Path,
    tables: tuple[str, ...],
    chunk_rows: int,
    rechecks: int,
    repair: bool,
    as_json: bool,
    spark: bool,
    master: str | None,
) -> None:
    """Compare each captured table with the latest state per key of its technical
    topic, chunk by chunk of primary keys (counts and a checksum of a canonical row
    encoding); print the missing, extra and differing keys. Exit 1 on any gap.

    PostgreSQL and MySQL/MariaDB tables (the DSN says which).
    """
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from bizevents.capture.config import load_capture_config
    from bizevents.capture.signals import Signal, SignalTopic
    from bizevents.capture.verify import Report, compare, open_readers, topic_state
    from bizevents.plumbing.kafka import ensure_topics

    settings = settings_of(ctx)
    config = load_capture_config(capture_config)
    dsn_secret = config.dsn or settings.database.postgres_dsn
    if dsn_secret is None:
        raise ConfigError(
            f"no database to verify: set dsn in {capture_config} or database.postgres_dsn"
        )
    dsn = dsn_secret.get_secret_value()
    unknown = [t for t in tables if config.tables and t not in config.tables]
    if unknown:
        raise ConfigError(f"{', '.join(unknown)} is not captured by {capture_config}")
    kafka = settings.kafka.librdkafka()
    registry = SchemaRegistryClient(settings.registry.client_config())
    schemas: dict[int, str] = {}

    def lookup(schema_id: int) -> str:
        if schema_id not in schemas:
            schemas[schema_id] = str(registry.get_schema(schema_id).schema_str)
        return schemas[schema_id]

    session = None
    if spark:
        from bizevents.replay.job import spark_session

        session = spark_session(master, "bizevents-verify")
    readers, side, close = open_readers(config, dsn, list(tables), lookup)
    reports: list[Report] = []
    repairs: list[tuple[str, str, str, list[tuple[int, bytes]]]] = []
    try:
        caught_up = _caught_up(config, dsn, side, kafka)
        for qualified, topic, table in readers:
            # The topic holds at least everything up to the database's position now
            # once capture passed it; later changes are what the rechecks are for.
            captured = caught_up()
            state_of: Callable[[list[Any]], TopicState]
            if session is not None:
                from bizevents.verifyspark import SparkVerify, keys_state, verify_table

                job = SparkVerify(
                    kafka, settings.registry.client_config(), dsn, config, qualified, topic
                )
                report = verify_table(session, job, chunk_rows, _SPARK_SLICE)
                state_of = partial(keys_state, session, job, slice_size=_SPARK_SLICE)
            else:
                state = topic_state(kafka, topic, table.decoder)
                report = Report(qualified, topic, records_read=state.read)
                compare(report, state, table.chunks(chunk_rows))
                state_of = partial(_keys_state, kafka, topic, table.decoder)

            # The differing keys again, table and topic (with --spark the topic's
            # records of those keys, read by the executors).
            for _ in range(rechecks if captured else 0):
                if report.ok or not caught_up():
                    break
                keys = [d.key for d in report.differences]
                known = state_of(keys)
                again = Report(qualified, topic)
                compare(again, known, iter([table.rows_for(keys)]))
                report.differences = again.differences
                report.database_position = again.database_position
                if not report.differences:
                    report.differing_chunks = []
            reports.append(report)
            if repair:
                parts = [table.range_condition(lo, hi) for lo, hi in report.differing_chunks]
                extras = [d for d in report.differences if d.kind == "extra" and d.tombstone]
                if extras:
                    # Snapshotted again after their tombstones: a key inserted again
                    # meanwhile gets its row back after the tombstone.
                    parts.append(table.keys_condition([d.key for d in extras]))
                tombstones = [d.tombstone for d in extras if d.tombstone is not None]
                if parts:
                    repairs.append((qualified, topic, " OR ".join(parts), tombstones))
    finally:
        close()
    sent = []
    if repairs:
        producer = Producer(kafka)
        signals = SignalTopic(kafka, config.signal_topic_name, config.server)
        ensure_topics(AdminClient(kafka), [signals.topic], 1, timeout_s=15)
        for qualified, topic, condition, tombstones in repairs:
            _write_tombstones(producer, topic, tombstones)
            signal = Signal(
                uuid.uuid4().hex, "execute-snapshot", (qualified,), ((qualified, condition),)
            )
            signals.send(producer, signal)
            sent.append(
                {
                    "table": qualified,
                    "signal": signal.id,
                    "condition": condition,
                    "tombstones": len(tombstones),
                    "topic": topic,
                }
            )
        producer.flush(30)
    _print(reports, sent, as_json)
    if any(not r.ok for r in reports):
        ctx.exit(1)


def _keys_state(kafka: dict[str, Any], topic: str, decoder: Any, keys: list[Any]) -> TopicState:
    """The topic's latest state of these keys (the rechecks' topic side), read here."""
    from bizevents.capture.verify import TopicState, topic_state

    state = topic_state(kafka, topic, decoder)
    return TopicState(
        {k: state.rows[k] for k in keys if k in state.rows},
        {k: state.gone[k] for k in keys if k in state.gone},
    )


#: Offsets of a topic's partition per Spark task of ``verify --spark``.
_SPARK_SLICE = 200_000


def _write_tombstones(producer: Any, topic: str, tombstones: list[tuple[int, bytes]]) -> None:
    """The extra keys' tombstones, each to its key's partition, acknowledged before the
    snapshot that follows them is asked for."""
    from bizevents.plumbing.errors import TransientError
    from bizevents.plumbing.kafka import produce

    failed: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    for partition, key in tombstones:
        produce(producer, topic, None, key, partition=partition, on_delivery=delivered)
    if producer.flush(30) or failed:
        reason = failed[0] if failed else "no acknowledgement within 30 s"
        raise TransientError(
            f"the repair's tombstones for {topic} were not all written ({reason}); "
            "no snapshot was asked for: run verify --repair again"
        )


def _caught_up(config: Any, dsn: str, side: Any, kafka: dict[str, Any]) -> Callable[[], bool]:
    """Whether capture passed the database's position of the call (waiting up to 30 s):
    PostgreSQL's slot's confirmed position, MySQL/MariaDB's position in capture's state
    topic."""
    from bizevents.capture.verify import is_mysql, wait_until

    if not is_mysql(dsn):

        def slot_passed() -> bool:
            lsn = _wal_lsn(side)
            return wait_until(lambda: _confirmed(side, config.slot_name) >= lsn, 30)

        return slot_passed

    from bizevents.capture import mysql as my
    from bizevents.capture.state import StateStore

    store = StateStore(kafka, config.offsets_topic_name, config.server)

    def stored() -> tuple[str, int]:
        at = store.read(store.position_key()) or {}
        return str(at.get("file", "")), int(at.get("pos", 0))

    def binlog_passed() -> bool:
        now = my.master_position(side)
        return wait_until(lambda: stored() >= (now.file, now.pos), 30)

    return binlog_passed


def _wal_lsn(conn: Any) -> int:
    from bizevents.capture.pgoutput import parse_lsn

    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()::text")
        return parse_lsn(str(cur.fetchone()[0]))


def _confirmed(conn: Any, slot: str) -> int:
    from bizevents.capture.pgoutput import parse_lsn

    with conn.cursor() as cur:
        cur.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        )
        row = cur.fetchone()
    return parse_lsn(str(row[0])) if row and row[0] else 0


def _key_text(key: Any) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in key)


def _print(reports: list[Any], repairs: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        console.print_json(
            json.dumps(
                {
                    "tables": [
                        {
                            "table": r.table,
                            "topic": r.topic,
                            "rows": r.rows,
                            "topic_rows": r.topic_rows,
                            "chunks": r.chunks,
                            "differing_chunks": len(r.differing_chunks),
                            "differences": [
                                {
                                    "kind": d.kind,
                                    "key": dict(d.key),
                                    "topic_position": d.topic_position,
                                    "database_position": d.database_position,
                                }
                                for d in r.differences
                            ],
                        }
                        for r in reports
                    ],
                    "repairs": repairs,
                },
                default=json_text,
            )
        )
        return
    for r in reports:
        verdict = "the topic holds the table" if r.ok else f"{len(r.differences)} differences"
        console.print(
            f"{r.table}: {r.rows} rows in {r.chunks} chunks, {r.topic_rows} keys in {r.topic} "
            f"({r.records_read} records): {verdict}",
            highlight=False,
        )
        for d in r.differences:
            what = {
                "missing": "in the table, not in the topic",
                "differs": "the table's row differs from the topic's",
                "extra": "in the topic, not in the table",
            }[d.kind]
            since = (
                f"the topic's last record of it ({d.topic_position})"
                if d.topic_position is not None
                else "the start of the topic (it holds no record of this key)"
            )
            console.print(
                f"  {d.kind} {_key_text(d.key)}: {what}; changed between {since} "
                f"and the database at {d.database_position}",
                highlight=False,
                soft_wrap=True,  # a line per key, for grep
            )
        if any(d.kind == "extra" for d in r.differences):
            console.print(
                "  (extra keys are deletes the topic lacks: --repair writes their tombstones, "
                "then snapshots those keys again, for any that came back meanwhile)",
                highlight=False,
            )
    for fix in repairs:
        if fix["tombstones"]:
            console.print(
                f"repair: {fix['tombstones']} tombstones written to {fix['topic']} for the "
                "extra keys",
                highlight=False,
            )
        console.print(
            f"repair: signal {fix['signal']} asks capture to snapshot {fix['table']} where "
            f"{fix['condition']}",
            highlight=False,
        )
