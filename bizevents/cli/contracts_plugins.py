"""What ``bizevents contracts`` reads: the pinned translators' declared columns against
their tables' latest layouts (``check``), the plugins a ``write`` names (their entry
points), the registry's schemas a ``pull`` writes; the verdicts as CI logs show them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any

import click

from bizevents.contracts.gate import (
    RegistryHistory,
    Verdict,
)
from bizevents.contracts.technical.topics import table_topic
from bizevents.plumbing.settings import RegistrySettings
from bizevents.settings import Settings
from bizevents.translators.columns import ColumnProblem, Layout, column_problems
from bizevents.translators.exceptions import PluginError
from bizevents.translators.registry import ENTRY_POINT_GROUP, discover


def check_pinned(settings: Settings, registry: RegistryHistory) -> list[ColumnProblem]:
    """The pinned translators' declared columns against the latest layouts of their
    tables (the technical topics' value schemas in the registry)."""
    if not settings.translators:
        return []
    translate = settings.translate
    if not translate.topic_prefix and not translate.topics:
        click.echo(
            "pinned translators not checked: set translate.topic_prefix (or translate.topics) "
            "to name their technical topics"
        )
        return []
    problems: list[ColumnProblem] = []
    for translator in discover(names=settings.translators).pinned(settings.translators):
        for table in translator.sources:
            if any(c in table for c in "*?["):
                click.echo(f"{translator.ref}  {table}  not checked (a pattern)")
                continue
            topic = _topic_of(table, translate.topic_prefix, translate.topics)
            layouts = [Layout(v.label, v.schema) for v in registry.versions(f"{topic}-value")]
            found = column_problems(translator, table, layouts)
            if translator.columns is None and translator.changes is None:
                status = "declares no columns"
            elif not layouts:
                status = f"not checked ({topic}-value has no schema yet)"
            else:
                status = f"{'BROKEN' if found else 'ok'} against {layouts[-1].label} of {topic}"
            click.echo(f"{translator.ref}  {table}  {status}")
            for problem in found:
                click.echo(f"    - {problem}")
            problems += found
    return problems


def _topic_of(table: str, prefix: str | None, topics: Sequence[str]) -> str:
    for topic in topics:
        if topic.endswith(f".{table}"):
            return topic
    return table_topic(str(prefix), table)


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def entry_points_named(names: Sequence[str]) -> set[str]:
    """The translator entry points that ``names`` pick (all without names); a name that
    is neither an installed plugin distribution nor a translator is an error."""
    found = entry_points(group=ENTRY_POINT_GROUP)
    if not found:
        raise PluginError(
            f"no translator plugin is installed (entry-point group {ENTRY_POINT_GROUP})"
        )
    if not names:
        return {e.name for e in found}
    chosen: set[str] = set()
    for name in names:
        picked = {
            e.name
            for e in found
            if e.name == name
            or (e.dist is not None and _normalized(e.dist.name) == _normalized(name))
        }
        if not picked:
            raise PluginError(
                f"{name!r} is neither an installed translator plugin nor a translator's name"
            )
        chosen |= picked
    return chosen


def pull_schemas(registry: RegistrySettings, subjects: Sequence[str]) -> list[Any]:
    """The latest schema of each subject in the registry (``PulledSchema``), or one
    sentence naming the subject the registry does not have or could not give."""
    import json

    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from bizevents.contracts.exceptions import ContractError
    from bizevents.contracts.pymodule import PulledSchema
    from bizevents.plumbing.registry import registry_client

    client = registry_client({**registry.client_config(), "max.retries": 0})
    pulled = []
    for subject in subjects:
        try:
            text = client.get_latest_version(subject).schema.schema_str
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise ContractError(
                    f"the registry at {registry.url} has no subject {subject}"
                ) from None
            raise ContractError(f"cannot read {subject} from {registry.url}: {exc}") from None
        except Exception as exc:  # the client's network errors
            raise ContractError(f"the registry at {registry.url} did not answer: {exc}") from None
        topic = subject.removesuffix("-value") if subject.endswith("-value") else None
        pulled.append(PulledSchema(subject, json.loads(text), topic))
    return pulled


def _line(verdict: Verdict) -> str:
    level = verdict.level.value if verdict.level else "-"
    status = verdict.status if verdict.ok else verdict.status.upper()
    against = f" against {', '.join(verdict.compared_with)}" if verdict.compared_with else ""
    return f"{verdict.subject}  {level}  {status}  ({verdict.contract.path}{against})"


def report_verdicts(verdicts: list[Verdict]) -> None:
    """A line per subject (greppable CI logs), its messages under it, then the count."""
    for verdict in verdicts:
        click.echo(_line(verdict))
        for message in verdict.messages:
            click.echo(f"    - {message}")
    failed = sum(not v.ok for v in verdicts)
    click.echo(
        f"{len(verdicts)} contract(s) checked, "
        + (f"{failed} failed" if failed else "all compatible")
    )
