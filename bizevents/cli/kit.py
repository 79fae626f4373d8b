"""Small pieces every subcommand shares: settings, clean failure, tables."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bizevents.devstack.stack import with_running_stack
from bizevents.plumbing.errors import BizeventsError, ConfigError
from bizevents.plumbing.logging import configure_logging, redact_text
from bizevents.settings import Settings, load_settings

F = TypeVar("F", bound=Callable[..., Any])

#: The argument of the commands that act on a capture: its TOML file.
CAPTURE_FILE = click.argument(
    "capture_config",
    metavar="CAPTURE_FILE",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
)


def at_least(
    *decls: str, low: int, default: int | float, help: str | None = None
) -> Callable[[F], F]:
    """A number option no lower than ``low``, whole when ``default`` is, its default shown."""
    kind = click.IntRange(min=low) if isinstance(default, int) else click.FloatRange(min=low)
    return click.option(*decls, type=kind, default=default, show_default=True, help=help)


# Off a terminal rich assumes 80 columns; tables in logs and pipes read better wider.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, soft_wrap=True)  # one sentence, never re-wrapped


def fails_cleanly(func: F) -> F:
    """Turn our own errors into one sentence on stderr and exit code 1."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except BizeventsError as exc:
            err_console.print(
                f"[bold red]error:[/] {escape(redact_text(str(exc)))}", highlight=False
            )
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def settings_of(ctx: click.Context) -> Settings:
    """Load the settings once per command and set up logging from them; a running dev
    stack's endpoints stand in for those the settings leave out."""
    obj: dict[str, Any] = ctx.ensure_object(dict)
    if "settings" not in obj:
        settings = with_running_stack(load_settings(obj.get("config_file")))
        configure_logging(settings.log_level, settings.log_format)
        obj["settings"] = settings
    result: Settings = obj["settings"]
    return result


def capture_of(ctx: click.Context, capture_config: Path, what: str) -> tuple[Any, str]:
    """The capture's settings from its file, and the DSN of its database (the file's, else
    the settings' ``database.postgres_dsn``); a sentence naming both when neither has one.
    ``what``: the command's verb, for that sentence."""
    from bizevents.capture.config import load_capture_config

    settings = settings_of(ctx)
    config = load_capture_config(capture_config)
    dsn = config.dsn or settings.database.postgres_dsn
    if dsn is None:
        raise ConfigError(
            f"no database to {what}: set dsn in {capture_config} or database.postgres_dsn "
            "in the settings (BIZEVENTS_DATABASE__POSTGRES_DSN)"
        )
    return config, dsn.get_secret_value()


def table(title: str, columns: list[str], rows: list[list[str]]) -> Table:
    result = Table(title=title, title_justify="left")
    for column in columns:
        result.add_column(column)
    for row in rows:
        result.add_row(*row)
    return result


def print_json(payload: Any) -> None:
    click.echo(json.dumps(payload, indent=2, default=json_text))


def json_text(value: Any) -> Any:
    """``json.dumps``' ``default`` for what the CLI prints: a moment in RFC 3339, in UTC
    with ``Z`` (as capture writes a row's ``timestamptz``), whatever its zone; a date, a
    local time, a decimal or a UUID as its text."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)
