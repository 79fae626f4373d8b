"""bizevents: change-data-capture events turned into business events.

The plugin author's face: what a translator and its contracts import, and nothing
else (the public API is exactly ``__all__``)::

    from bizevents import BusinessEvent, Change, Timestamp, condecimal, translator

- :func:`translator`, the decorator that declares a translator of one change, and its
  skip policies (:data:`TRANSLATE`, :data:`SKIP`);
- :class:`Change`, the change a translator reads, and :data:`UNAVAILABLE`, an unchanged
  TOASTed value;
- :class:`BusinessEvent` and :class:`Record`, the base classes of contracts, and the
  field types that map to Avro's logical types (:class:`Timestamp`, :class:`Int32`,
  :class:`Float32`, :func:`condecimal`, :class:`JsonDocument`);
- :class:`TranslationError`, what a translator raises to dead-letter a change on purpose.

The rest lives in named modules: transaction translators in :mod:`bizevents.transactions`,
the test kit in :mod:`bizevents.testing` (its pytest plugin is opt-in:
``pytest_plugins = ["bizevents.testing.pytest_plugin"]``), the runtime's registry of
plugins in :mod:`bizevents.plugins`. The floors of the house (``bizevents.capture``,
``bizevents.translators``, ...) are the runtime's, not a plugin's.

The names load on first use, so a process that imports only a floor (capture, a Spark
executor) does not pay for the plugin API.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from dataclasses_avroschema.types import Float32, condecimal

    from bizevents.contracts.business import BusinessEvent, Int32, Record, Timestamp
    from bizevents.contracts.change import Change
    from bizevents.contracts.logical import UNAVAILABLE, JsonDocument
    from bizevents.translators.api import SKIP, TRANSLATE, Policy, translator
    from bizevents.translators.exceptions import TranslationError

#: public name → the module it comes from
_FACE: Final[dict[str, str]] = {
    "translator": "bizevents.translators.api",
    "TRANSLATE": "bizevents.translators.api",
    "SKIP": "bizevents.translators.api",
    "Policy": "bizevents.translators.api",
    "Change": "bizevents.contracts.change",
    "UNAVAILABLE": "bizevents.contracts.logical",
    "BusinessEvent": "bizevents.contracts.business",
    "Record": "bizevents.contracts.business",
    "Timestamp": "bizevents.contracts.business",
    "Int32": "bizevents.contracts.business",
    "Float32": "dataclasses_avroschema.types",
    "condecimal": "dataclasses_avroschema.types",
    "JsonDocument": "bizevents.contracts.logical",
    "TranslationError": "bizevents.translators.exceptions",
}

__all__ = [
    "SKIP",
    "TRANSLATE",
    "UNAVAILABLE",
    "BusinessEvent",
    "Change",
    "Float32",
    "Int32",
    "JsonDocument",
    "Policy",
    "Record",
    "Timestamp",
    "TranslationError",
    "condecimal",
    "translator",
]


def __getattr__(name: str) -> Any:
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'bizevents' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next look-up is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
