"""Errors of the translator layer: plugins that cannot load, translations that fail."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from bizevents.contracts.exceptions import Coordinates
from bizevents.plumbing.errors import ConfigError, TerminalError


class PluginError(ConfigError):
    """A translator plugin is malformed, a duplicate, missing, or failed to import.

    Raised at start-up, with a sentence naming the plugin, so a bad deployment
    never starts translating.
    """


class TranslationError(TerminalError):
    """A translator raised, or returned something its declaration does not allow.

    The record goes to the dead-letter topic with this reason; the stream goes on.
    A plugin raises it with its message alone (``TranslationError("no such region")``)
    to dead-letter a change on purpose: the runtime names the translator and the record
    (``TranslationError(translator, reason, where)``) and keeps the message as the reason.
    """

    def __init__(
        self, translator: str, reason: str | None = None, where: Coordinates | None = None
    ) -> None:
        if reason is None:  # a plugin's own: the message alone
            translator, reason = "", translator
        self.translator = translator
        self.reason = reason
        self.where = where or Coordinates()
        if translator:
            super().__init__(f"translator {translator} failed on {self.where}: {reason}")
        else:
            super().__init__(reason)


def plugin_failure(func: Callable[..., Any], exc: BaseException) -> str:
    """``exc`` as a dead letter's reason, with where the plugin's own code raised it:
    ``"ValueError: boom (at /.../bizevents_shipping/translate.py:27)"``.

    The place is the innermost line of the traceback in the plugin's package (the
    folder of its function's top-level package), so a library's line (pydantic
    refusing an event) points at the plugin's call; else the function's own line.
    """
    module = sys.modules.get(getattr(func, "__module__", "").partition(".")[0])
    file = getattr(module, "__file__", None) or ""
    root = os.path.dirname(file) + os.sep if hasattr(module, "__path__") else file
    frames = list(traceback.walk_tb(exc.__traceback__))[1:]  # the runtime's call first
    own = [(f, line) for f, line in frames if root and f.f_code.co_filename.startswith(root)]
    place = own or frames[:1]
    where = f" (at {place[-1][0].f_code.co_filename}:{place[-1][1]})" if place else ""
    return f"{type(exc).__name__}: {exc}{where}"
