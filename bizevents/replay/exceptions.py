"""Errors of the replay; each says in one sentence what is missing or what failed."""

from __future__ import annotations

from bizevents.plumbing.errors import ConfigError, TerminalError, TransientError


class ReplayConfigError(ConfigError):
    """The replay's arguments, its topics or its translator versions do not fit."""


class TopicNotFoundError(ReplayConfigError):
    """No topic of the cluster matches the ``--topics`` pattern."""


class RegistryUnreachableError(TransientError):
    """The schema registry cannot be reached (the replay needs it to decode)."""


class RangeFailedError(TerminalError):
    """A range failed in its Spark task (after Spark's own retries)."""


class RunStateError(ReplayConfigError):
    """A run directory holds a state that does not belong to these arguments."""
