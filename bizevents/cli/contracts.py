"""``bizevents contracts``: the CI gate for business-event contracts (``.avsc`` files).

``write`` writes the installed plugins' contracts as ``.avsc`` files; ``check`` compares
each contract with its subject's registered versions (or with the same file at a git ref)
and exits 1 on any incompatibility; ``register`` checks first and registers only what
passes. Output is plain lines, one per subject, so that CI
logs stay greppable.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bizevents.cli.contracts_plugins import (
    check_pinned,
    entry_points_named,
    pull_schemas,
    report_verdicts,
)
from bizevents.cli.kit import fails_cleanly, settings_of
from bizevents.contracts.business import BusinessEvent
from bizevents.contracts.compatibility import CompatibilityLevel, parse_level
from bizevents.contracts.gate import (
    GitHistory,
    RegistryHistory,
    SchemaHistory,
    check_contracts,
    load_contracts,
    register_contracts,
)
from bizevents.contracts.subjects import STRATEGIES, subject_strategy
from bizevents.translators.columns import ColumnProblem
from bizevents.translators.registry import discover

_PATHS = click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
_STRATEGY = click.option(
    "--strategy",
    type=click.Choice(sorted(STRATEGIES)),
    default="topic",
    show_default=True,
    help="Subject naming: topic (<topic>-value), record (<fullname>), "
    "topic-record (<topic>-<fullname>).",
)


@click.group()
def contracts() -> None:
    """Business-event contracts: check them against what they replace, register them,
    pull them into a consumer's Python module."""


@contracts.command()
@_PATHS
@_STRATEGY
@click.option(
    "--against",
    "git_ref",
    metavar="GIT_REF",
    help="Compare with the same paths at this git ref instead of the registry.",
)
@click.option(
    "--level",
    type=click.Choice([level.value for level in CompatibilityLevel], case_sensitive=False),
    help="Compatibility level with --against (default BACKWARD); the registry's own "
    "level applies otherwise.",
)
@click.option(
    "--translators/--no-translators",
    default=True,
    show_default=True,
    help="Also check the pinned translators' declared columns against the registry's "
    "technical schemas.",
)
@click.pass_context
@fails_cleanly
def check(
    ctx: click.Context,
    paths: tuple[Path, ...],
    strategy: str,
    git_ref: str | None,
    level: str | None,
    translators: bool,
) -> None:
    """Check .avsc contracts (files or directories); exit 1 on any incompatibility.

    Against the registry, the pinned translators' declared columns are also held against
    their tables' latest layouts: a column dropped or retyped is reported (exit 1)."""
    if level is not None and git_ref is None:
        raise click.UsageError(
            "--level applies only with --against; against the registry, each subject's "
            "own level decides"
        )
    found = load_contracts(paths)
    history: SchemaHistory
    registry: RegistryHistory | None = None
    if git_ref is not None:
        history = GitHistory(git_ref, parse_level(level or "BACKWARD"))
    else:
        registry = RegistryHistory(settings_of(ctx).registry)
        history = registry
    problems: list[ColumnProblem] = []
    try:
        verdicts = check_contracts(found, history, subject_strategy(strategy))
        report_verdicts(verdicts)
        if registry is not None and translators:
            problems = check_pinned(settings_of(ctx), registry)
    finally:
        if registry is not None:
            registry.close()
    if problems or not all(v.ok for v in verdicts):
        sys.exit(1)


@contracts.command()
@_PATHS
@_STRATEGY
@click.pass_context
@fails_cleanly
def register(ctx: click.Context, paths: tuple[Path, ...], strategy: str) -> None:
    """Check .avsc contracts against the registry and register those that pass."""
    found = load_contracts(paths)
    registry = RegistryHistory(settings_of(ctx).registry)
    try:
        verdicts = check_contracts(found, registry, subject_strategy(strategy))
        report_verdicts(verdicts)
        registrations = register_contracts(verdicts, registry)
    finally:
        registry.close()
    for done in registrations:
        subject = done.verdict.subject
        if done.error is None:
            version = f" version {done.version}" if done.version is not None else ""
            click.echo(f"registered {subject}{version} (id {done.schema_id})")
        else:
            click.echo(f"NOT registered {subject} ({done.verdict.contract.path}): {done.error}")
    if any(done.error is not None for done in registrations):
        sys.exit(1)


@contracts.command()
@click.argument("names", nargs=-1)
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("contracts"),
    show_default=True,
    help="The folder to write into (created if missing).",
)
@fails_cleanly
def write(names: tuple[str, ...], out: Path) -> None:
    """Write the .avsc of the contracts that installed translators emit, one
    <fullname>.avsc each, for `check` and `register` and for version control.

    NAMES are plugin distributions (bizevents-shipping) or translator names (parcels);
    without any, every installed plugin's. Every version of a translator counts."""
    from bizevents.contracts.business import write_avsc

    chosen = entry_points_named(names)
    emitted: dict[str, type[BusinessEvent]] = {}
    for translator in discover(names=chosen):
        if translator.name in chosen:
            for model in translator.emits:
                emitted.setdefault(model.contract_fullname(), model)
    for fullname, model in sorted(emitted.items()):
        click.echo(f"{fullname}  {write_avsc(model, out)}")
    click.echo(f"{len(emitted)} contract(s) written to {out}")


@contracts.command()
@click.argument("subjects", nargs=-1, required=True)
@click.option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="The Python module to write, e.g. shipping_events.py.",
)
@click.pass_context
@fails_cleanly
def pull(ctx: click.Context, subjects: tuple[str, ...], out: Path) -> None:
    """Write a Python module of the contracts SUBJECTS hold in the schema registry (their
    latest versions), for a consumer: typed events without the producer's package.

    SUBJECTS as the registry names them, <topic>-value (shipping.parcel-delivered-value).
    Each class is checked to give back its subject's schema before the file is written."""
    from bizevents.contracts.pymodule import contracts_module

    pulled = pull_schemas(settings_of(ctx).registry, subjects)
    header = f"Contracts of {', '.join(subjects)}, as the schema registry holds them."
    out.write_text(contracts_module(pulled, header), encoding="utf-8")
    for item in pulled:
        click.echo(f"{item.subject}  {item.schema['name']}  {out}")
