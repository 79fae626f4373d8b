"""``bizevents verify``: prove that the technical topics hold the tables (or show the gap)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bizevents.clikit import console, fails_cleanly, settings_of
from bizevents.plumbing.errors import ConfigError

if TYPE_CHECKING:
    from bizevents.capture.verify import TopicState


@click.command()
@click.option(
    "--config",
    "capture_config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    required=True,
    help="The capture's TOML file (its server, tables, topics).",
)
@click.option("--table", "tables", multiple=True, help="Only this table (repeatable).")
@click.option(
    "--chunk-rows",
    type=click.IntRange(min=1),
    default=5_000,
    show_default=True,
    help="Keys per compared chunk.",
)
@click.option(
    "--rechecks",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Times a differing key is checked again once capture passed the database.",
)
@click.option(
    "--wait",
    "wait_s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds to wait for capture to pass the database before saying it is behind.",
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
    wait_s: float,
    repair: bool,
    as_json: bool,
    spark: bool,
    master: str | None,
) -> None:
    """Compare each captured table with the latest state per key of its technical
    topic, chunk by chunk of primary keys (counts and a checksum of a canonical row
    encoding); print the missing, extra and differing keys. Exit 1 on any gap; exit 3
    when capture has not passed the database's position, so that a difference cannot be
    told from lag (nothing is repaired then).

    PostgreSQL and MySQL/MariaDB tables (the DSN says which).
    """
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from bizevents.capture.config import load_capture_config
    from bizevents.capture.core.filters import any_of, condition_text
    from bizevents.capture.core.signals import Signal, SignalTopic
    from bizevents.capture.verify import Report, capture_progress, check_table, open_readers
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
        behind = capture_progress(config, dsn, side, kafka, wait_s)
        for qualified, topic, table in readers:
            first: Callable[[], Report]
            state_of: Callable[[list[Any]], TopicState]
            if session is not None:
                from bizevents.verifyspark import SparkVerify, keys_state, verify_table

                job = SparkVerify(
                    kafka, settings.registry.client_config(), dsn, config, qualified, topic
                )
                first = partial(verify_table, session, job, chunk_rows, _SPARK_SLICE)
                state_of = partial(keys_state, session, job, slice_size=_SPARK_SLICE)
            else:
                first = partial(_compare, kafka, qualified, topic, table, chunk_rows)
                state_of = partial(_keys_state, kafka, topic, table.decoder)
            report = check_table(qualified, topic, behind, first, state_of, table, rechecks)
            reports.append(report)
            if repair and report.repairable:
                parts = [table.range_condition(lo, hi) for lo, hi in report.differing_chunks]
                extras = [d for d in report.differences if d.kind == "extra" and d.tombstone]
                if extras:
                    # Snapshotted again after their tombstones: a key inserted again
                    # meanwhile gets its row back after the tombstone.
                    parts.append(table.keys_condition([d.key for d in extras]))
                tombstones = [d.tombstone for d in extras if d.tombstone is not None]
                if parts:
                    repairs.append((qualified, topic, condition_text(any_of(parts)), tombstones))
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
    _print(reports, sent, as_json, repair)
    if any(r.differences and r.behind is None for r in reports):
        ctx.exit(1)
    if any(not r.ok for r in reports):
        ctx.exit(3)


def _compare(kafka: dict[str, Any], name: str, topic: str, table: Any, chunk_rows: int) -> Any:
    """The table compared with its topic, read here."""
    from bizevents.capture.verify import Report, compare, topic_state

    state = topic_state(kafka, topic, table.decoder)
    report = Report(name, topic, records_read=state.read)
    compare(report, state, table.chunks(chunk_rows))
    return report


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


def _key_text(key: Any) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in key)


def _print(reports: list[Any], repairs: list[dict[str, Any]], as_json: bool, repair: bool) -> None:
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
                            "compared": r.compared,
                            "behind": r.behind,
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
                default=str,
            )
        )
        return
    for r in reports:
        _print_report(r)
        if r.behind is not None and repair:
            console.print(
                f"repair: nothing asked for {r.table} while capture is behind; run verify "
                "again once it caught up",
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


def _print_report(r: Any) -> None:
    if not r.compared:
        console.print(f"{r.table}: not compared with {r.topic}: {r.behind}", highlight=False)
        return
    if r.behind is not None:
        verdict = f"{len(r.differences)} differences not confirmed: {r.behind}"
    else:
        verdict = "the topic holds the table" if r.ok else f"{len(r.differences)} differences"
    console.print(
        f"{r.table}: {r.rows} rows in {r.chunks} chunks, {r.topic_rows} keys in {r.topic} "
        f"({r.records_read} records): {verdict}",
        highlight=False,
    )
    unconfirmed = "unconfirmed " if r.behind is not None else ""
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
            f"  {unconfirmed}{d.kind} {_key_text(d.key)}: {what}; changed between {since} "
            f"and the database at {d.database_position}",
            highlight=False,
            soft_wrap=True,  # a line per key, for grep
        )
    if r.behind is None and any(d.kind == "extra" for d in r.differences):
        console.print(
            "  (extra keys are deletes the topic lacks: --repair writes their tombstones, "
            "then snapshots those keys again, for any that came back meanwhile)",
            highlight=False,
        )
