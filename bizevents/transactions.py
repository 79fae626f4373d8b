"""Transaction translators: one whole committed transaction in, business events out.

::

    from bizevents import BusinessEvent
    from bizevents.transactions import TransactionChanges, stems_from, transaction_translator

How they are assembled, pinned and replayed: docs/transactions.md.
"""

from bizevents.translators.transaction_api import (
    Attributed,
    TransactionChanges,
    TransactionTranslator,
    stems_from,
    transaction_translator,
)

__all__ = [
    "Attributed",
    "TransactionChanges",
    "TransactionTranslator",
    "stems_from",
    "transaction_translator",
]
