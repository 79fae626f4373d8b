"""Translator plugins: the one import a plugin author needs, plus the registry.

Everything a translator and its contracts use comes from here::

    from translators import BusinessEvent, Change, Timestamp, condecimal, translator

The decorator and its skip policies, the change a translator reads (and
:data:`UNAVAILABLE`, an unchanged TOASTed value), the base class of contracts and the
field types that map to Avro's logical types. Testing without a broker lives in
:mod:`translators.testing`. The public API is exactly ``__all__``.
"""

from datetime import date
from decimal import Decimal
from uuid import UUID

from dataclasses_avroschema.types import Float32, condecimal

from contracts.business import BusinessEvent, Int32, Timestamp
from contracts.change import Change
from contracts.logical import UNAVAILABLE, JsonDocument
from translators.api import SKIP, TRANSLATE, Policy, Translator, translator
from translators.exceptions import PluginError, TranslationError
from translators.registry import ENTRY_POINT_GROUP, PluginFailure, Registry, discover

__all__ = [
    "ENTRY_POINT_GROUP",
    "SKIP",
    "TRANSLATE",
    "UNAVAILABLE",
    "UUID",
    "BusinessEvent",
    "Change",
    "Decimal",
    "Float32",
    "Int32",
    "JsonDocument",
    "PluginError",
    "PluginFailure",
    "Policy",
    "Registry",
    "Timestamp",
    "TranslationError",
    "Translator",
    "condecimal",
    "date",
    "discover",
    "translator",
]
