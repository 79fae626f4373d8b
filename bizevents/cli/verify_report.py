"""What ``bizevents verify`` prints: each table's verdict and differences, one line a
key (for grep), or the whole report as JSON; the repairs asked for."""

from __future__ import annotations

import json
from typing import Any

from bizevents.cli.kit import console, json_text


def _key_text(key: Any) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in key)


def print_reports(
    reports: list[Any], repairs: list[dict[str, Any]], as_json: bool, repair: bool
) -> None:
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
                default=json_text,
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
