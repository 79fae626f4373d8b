"""Translator plugins: the API a team writes against, the registry, and the runtime."""

from translators.api import SKIP, TRANSLATE, Translator, translator
from translators.exceptions import PluginError, TranslationError
from translators.registry import ENTRY_POINT_GROUP, Registry, discover

__all__ = [
    "ENTRY_POINT_GROUP",
    "SKIP",
    "TRANSLATE",
    "PluginError",
    "Registry",
    "TranslationError",
    "Translator",
    "discover",
    "translator",
]
