"""Translator plugins: the one import a plugin author needs, plus the registry.

Everything a translator and its contracts use comes from here::

    from bizevents.translators import BusinessEvent, Change, Timestamp, condecimal, translator

The decorators (:func:`translator` for one change, :func:`transaction_translator` for
one whole transaction) and their skip policies, the change a translator reads (and
:data:`UNAVAILABLE`, an unchanged TOASTed value), the base class of contracts and the
field types that map to Avro's logical types. Testing without a broker lives in
:mod:`bizevents.translators.testing`. The public API is exactly ``__all__``.
"""

from datetime import date
from decimal import Decimal
from uuid import UUID

from dataclasses_avroschema.types import Float32, condecimal

from bizevents.contracts.business import BusinessEvent, Int32, Record, Timestamp
from bizevents.contracts.change import Change
from bizevents.contracts.logical import UNAVAILABLE, JsonDocument
from bizevents.translators.api import SKIP, TRANSLATE, Policy, Translator, translator
from bizevents.translators.exceptions import PluginError, TranslationError
from bizevents.translators.registry import ENTRY_POINT_GROUP, PluginFailure, Registry, discover
from bizevents.translators.transaction_api import (
    Attributed,
    TransactionChanges,
    TransactionTranslator,
    stems_from,
    transaction_translator,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "SKIP",
    "TRANSLATE",
    "UNAVAILABLE",
    "UUID",
    "Attributed",
    "BusinessEvent",
    "Change",
    "Decimal",
    "Float32",
    "Int32",
    "JsonDocument",
    "PluginError",
    "PluginFailure",
    "Policy",
    "Record",
    "Registry",
    "Timestamp",
    "TransactionChanges",
    "TransactionTranslator",
    "TranslationError",
    "Translator",
    "condecimal",
    "date",
    "discover",
    "stems_from",
    "transaction_translator",
    "translator",
]
