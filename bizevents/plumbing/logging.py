"""Logging set-up: structlog, JSON off a terminal and readable on one.

Context (component, topic, partition, offset, translator) is bound with
``log.bind(...)`` or ``structlog.contextvars.bind_contextvars``, never formatted
into the message. A last processor masks anything that looks like a credential,
as a second line of defence behind ``SecretStr``.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, Literal

import structlog
from pydantic import SecretStr

_SECRET_KEY = re.compile(r"pass(word)?|secret|token|credential|user\.info|dsn", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://[^:/@\s]+:)[^@\s]+@", re.IGNORECASE)
#: A quoted SQL literal (doubled quotes and backslash escapes inside), or what is left
#: of one that a log line's length cut.
_SQL_STRING = r"'(?:[^'\\]|\\.|'')*(?:'|\\?$)"
#: A credential in SQL (``IDENTIFIED BY 'pw'``, ``IDENTIFIED VIA ... USING 'pw'``,
#: ``PASSWORD 'pw'``, ``PASSWORD('pw')``, ``SET PASSWORD FOR 'u'@'h' = 'pw'``: DDL that
#: capture reads from the log) or in a libpq keyword string (``password=pw``).
_SQL_SECRET = re.compile(
    r"(?P<lead>\b(?:IDENTIFIED\b[^']*?|SET\s+PASSWORD\b[^=]*=\s*(?:PASSWORD\s*\(\s*)?"
    rf"|PASSWORD(?:\s*\(\s*|\s*=\s*|\s+))){_SQL_STRING}"
    rf"|(?P<kw>\bpassword\s*=\s*)(?:{_SQL_STRING}|[^\s']+)",
    re.IGNORECASE,
)
MASK = "**********"


def redact_text(text: str) -> str:
    """Mask the password part of any ``scheme://user:password@host`` in ``text``, and
    the credentials of SQL statements and libpq keyword strings."""
    text = _URL_PASSWORD.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    return _SQL_SECRET.sub(lambda m: f"{m.group('lead') or m.group('kw')}'{MASK}'", text)


def _redact(value: Any, key: str = "") -> Any:
    if isinstance(value, SecretStr):
        return MASK
    if key and _SECRET_KEY.search(key) and isinstance(value, str | bytes):
        return MASK
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: _redact(v, str(k)) for k, v in value.items()}
    return value


def redact_processor(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: mask secrets in every key and value of a log line."""
    for key, value in list(event_dict.items()):
        event_dict[key] = _redact(value, key)
    return event_dict


def configure_logging(
    level: str = "INFO", fmt: Literal["auto", "json", "console"] = "auto"
) -> None:
    """Configure structlog and route the standard library's logging through it."""
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        redact_processor,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Client libraries are chatty at INFO (httpx, and confluent-kafka's registry client's
    # httpx2, log every request); their warnings still come through.
    for noisy in ("faust", "mode", "kafka", "httpx", "httpx2", "httpcore", "httpcore2"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    # The Kafka clients log every failed connection attempt, several a second while a
    # broker is away; our own retry sentences say that once. Their logs show at DEBUG.
    quiet = logging.DEBUG if level == "DEBUG" else logging.CRITICAL
    for client in (LIBRDKAFKA_LOGGER, "aiokafka"):
        logging.getLogger(client).setLevel(quiet)


#: The logger librdkafka's own log goes to (``KafkaSettings.librdkafka()`` names it).
LIBRDKAFKA_LOGGER = "librdkafka"


def librdkafka_logging() -> dict[str, Any]:
    """librdkafka settings routing its log through ours, at the level ours lets through.

    Without a ``logger`` librdkafka writes raw ``%3|...`` lines to stderr itself; its
    ``log_level`` (syslog levels) keeps lines we would drop from being made at all.
    """
    logger = logging.getLogger(LIBRDKAFKA_LOGGER)
    return {"logger": logger, "log_level": 7 if logger.isEnabledFor(logging.DEBUG) else 2}


def get_logger(name: str, **context: Any) -> Any:
    """A structlog logger with ``context`` bound."""
    return structlog.get_logger(name).bind(**context)
