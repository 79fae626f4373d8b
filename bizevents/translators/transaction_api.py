"""Transaction translators: a pure function of one whole committed transaction.

A business moment is a database transaction, not a row: the store inserts an order with
total 0, then its items, then sets the total, in one transaction. A transaction
translator declares the tables it reads and receives every change of one committed
transaction to those tables at once, in commit order (``total_order``)::

    @transaction_translator(name="orders", version=3,
                            sources=["store.orders", "store.order_items"],
                            emits=[OrderPlaced])
    def orders(tx: TransactionChanges) -> Iterable[BusinessEvent]:
        for order in tx.of("store.orders"):
            ...

An event may say which change of the transaction it stems from, with
:func:`stems_from` (``yield stems_from(change, OrderPlaced(...))``): it then gets the id,
the key and the lineage that a row translator of the same name gives an event of that
contract from that change, so a transaction translator's corrected event supersedes the
one a row-by-row version emitted (:mod:`bizevents.translators.txcore`). An event that says nothing
is the transaction's own.

It stays pure (no I/O, no clock, no globals), so it runs the same under the transaction
worker (:mod:`bizevents.translators.txworker`), in a test and in replay. It is registered and
pinned like any translator (it *is* a :class:`~bizevents.translators.api.Translator`, whose
row-by-row ``translate`` refuses to run it).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from bizevents.contracts.business import BusinessEvent
from bizevents.contracts.change import Change
from bizevents.contracts.exceptions import Coordinates
from bizevents.translators.api import (
    SKIP,
    TRANSLATE,
    Output,
    Policy,
    Translator,
    _declared,
    _problems,
)
from bizevents.translators.exceptions import TranslationError, plugin_failure

__all__ = [
    "Attributed",
    "TransactionChanges",
    "TransactionFunc",
    "TransactionTranslator",
    "is_transactional",
    "stems_from",
    "transaction_translator",
]


@dataclass(frozen=True, slots=True)
class TransactionChanges:
    """The changes of one committed transaction to the tables a translator reads, in
    commit order. ``id`` is the transaction id of the metadata (``None`` for a snapshot
    read, which is delivered alone)."""

    id: str | None
    changes: tuple[Change, ...]

    def of(self, *tables: str) -> tuple[Change, ...]:
        """The changes of these ``schema.table`` names, in commit order."""
        return tuple(c for c in self.changes if c.table in tables)

    def __len__(self) -> int:
        return len(self.changes)


@dataclass(frozen=True, slots=True)
class Attributed:
    """A business event and the change of its transaction it stems from (``None``: the
    transaction as a whole); build it with :func:`stems_from`."""

    event: BusinessEvent
    change: Change | None = None


def stems_from(change: Change, event: BusinessEvent) -> Attributed:
    """``event`` stems from ``change``, one of the transaction's changes: it is identified,
    keyed and traced as a row translator's event from that change (docs/transactions.md)."""
    return Attributed(event, change)


TxOutput: TypeAlias = Output | Attributed | Iterable[BusinessEvent | Attributed]
TransactionFunc: TypeAlias = Callable[[TransactionChanges], TxOutput]


def _row_by_row(_change: Change) -> Output:
    raise TypeError("a transaction translator reads whole transactions, not one change")


@dataclass(frozen=True, slots=True)
class TransactionTranslator(Translator):
    """A translator of whole transactions; build it with :func:`transaction_translator`."""

    tx_func: TransactionFunc | None = field(default=None, repr=False)
    #: The business key of each table it reads, ``((table, (column, ...)), ...)``: the
    #: transaction worker assembles the transactions of one business key on one member,
    #: in commit order (docs/transactions.md). A table not named keys by its row key.
    keys: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def key_columns(self, table: str) -> tuple[str, ...]:
        """The business-key columns declared for ``schema.table`` (empty: the row key)."""
        for pattern, columns in self.keys:
            if pattern == table or fnmatch.fnmatchcase(table, pattern):
                return columns
        return ()

    def translate(self, change: Change) -> tuple[BusinessEvent, ...]:
        raise TranslationError(
            self.ref,
            "is a transaction translator: it reads whole transactions under "
            "`bizevents translate --transactions`, not one change at a time",
            change.event.coordinates,
        )

    def events(self, change: Change) -> tuple[BusinessEvent, ...]:
        return self.translate(change)

    def translate_transaction(self, tx: TransactionChanges) -> tuple[BusinessEvent, ...]:
        """The events of one transaction; :class:`TranslationError` on any failure."""
        return tuple(item.event for item in self.attributed(tx))

    def attributed(self, tx: TransactionChanges) -> tuple[Attributed, ...]:
        """The events of one transaction, each with the change it stems from (if it
        said); :class:`TranslationError` on any failure, or on a change it names that
        is not one of the transaction's."""
        where = tx.changes[0].event.coordinates if tx.changes else Coordinates()
        assert self.tx_func is not None
        try:
            output = self.tx_func(tx)
            if output is None:
                return ()
            if isinstance(output, BusinessEvent | Attributed):
                output = (output,)
            items = tuple(i if isinstance(i, Attributed) else Attributed(i) for i in output)
        except TranslationError as exc:  # the plugin's own: its message is the reason
            raise TranslationError(self.ref, exc.reason, where) from exc
        except Exception as exc:  # a plugin's bug must not stop the stream
            raise TranslationError(self.ref, plugin_failure(self.tx_func, exc), where) from exc
        ours = {id(c.event) for c in tx.changes}
        for item in items:
            event = item.event
            if not isinstance(event, self.emits):
                raise TranslationError(
                    self.ref,
                    f"returned {type(event).__name__}, which it does not declare in emits "
                    f"({', '.join(e.__name__ for e in self.emits)})",
                    where,
                )
            if item.change is not None and id(item.change.event) not in ours:
                raise TranslationError(
                    self.ref,
                    f"said its {type(event).__name__} stems from {item.change!r}, which is not "
                    "a change of the transaction it was given",
                    where,
                )
        return items


def _keys(
    keys: Mapping[str, str | Sequence[str]], problems: list[str]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The ``keys`` declaration as a tuple; what is wrong with it goes to ``problems``."""
    out = []
    for table, columns in keys.items():
        names = (columns,) if isinstance(columns, str) else tuple(columns)
        if not isinstance(table, str) or "." not in table:
            problems.append(f"keys names {table!r}, which is not a schema.table")
        elif not names or not all(isinstance(c, str) and c for c in names):
            problems.append(f"keys of {table} must be one or more column names")
        else:
            out.append((table, names))
    return tuple(out)


def is_transactional(item: Translator) -> bool:
    """Whether ``item`` reads whole transactions."""
    return isinstance(item, TransactionTranslator)


def transaction_translator(
    *,
    name: str,
    version: int,
    sources: Sequence[str],
    emits: Sequence[type[BusinessEvent]],
    snapshots: Policy = SKIP,
    keys: Mapping[str, str | Sequence[str]] | None = None,
) -> Callable[[TransactionFunc], TransactionTranslator]:
    """Declare a transaction translator; a malformed declaration fails where it is written.

    ``snapshots="translate"`` hands each snapshot read to the function alone (a
    snapshot row is a committed state with no transaction); the default skips them.
    ``keys`` names the business key of each source table, e.g. ``{"store.orders": "id",
    "store.order_items": "order_id"}``: the worker spreads the assembly over its members
    by that key and keeps each key's transactions in commit order (a table left out is
    keyed by its row key).
    """

    def wrap(func: TransactionFunc) -> TransactionTranslator:
        problems = _problems(name, version, sources, emits, snapshots, TRANSLATE)
        keyed = _keys(keys or {}, problems)
        declared = _declared(func, problems, name, version, sources, emits, snapshots)
        return TransactionTranslator(**declared, func=_row_by_row, tx_func=func, keys=keyed)

    return wrap
