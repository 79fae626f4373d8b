"""Errors of the translator layer: plugins that cannot load, translations that fail."""

from __future__ import annotations

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
