"""The root of every error bizevents raises on purpose.

Each package keeps its own ``exceptions.py`` whose classes derive from these, so
a caller can catch one family (``TransientError`` to retry, ``BizeventsError``
for anything of ours) without knowing which package raised it.
"""

from __future__ import annotations


class BizeventsError(Exception):
    """Base class of every error raised by bizevents."""


class ConfigError(BizeventsError):
    """A setting is missing, malformed, or clashes with another one."""


class TransientError(BizeventsError):
    """A failure that may pass on its own (a peer unreachable); retrying is right."""


class TerminalError(BizeventsError):
    """A failure that retrying will not fix; the record or the run must be set aside."""
