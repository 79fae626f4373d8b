"""The runtime's registry of translator plugins, for tools that load plugins themselves.

Plugins are found through the entry-point group :data:`ENTRY_POINT_GROUP`
(``bizevents.translators``); :func:`discover` loads them by name into a :class:`Registry`
keyed by ``(name, version)``. A plugin author does not need this module: the worker, the
replay and ``bizevents translators list`` use it.
"""

from bizevents.translators.api import Translator
from bizevents.translators.exceptions import PluginError
from bizevents.translators.registry import ENTRY_POINT_GROUP, PluginFailure, Registry, discover

__all__ = [
    "ENTRY_POINT_GROUP",
    "PluginError",
    "PluginFailure",
    "Registry",
    "Translator",
    "discover",
]
