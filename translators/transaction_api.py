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

It stays pure (no I/O, no clock, no globals), so it runs the same under the transaction
worker (:mod:`translators.txworker`), in a test and in replay. It is registered and
pinned like any translator (it *is* a :class:`~translators.api.Translator`, whose
row-by-row ``translate`` refuses to run it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from contracts.business import BusinessEvent
from contracts.change import Change
from contracts.exceptions import Coordinates
from translators.api import NO_EVENTS, SKIP, TRANSLATE, Output, Policy, Translator, _problems
from translators.exceptions import PluginError, TranslationError

__all__ = [
    "TransactionChanges",
    "TransactionFunc",
    "TransactionTranslator",
    "is_transactional",
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


TransactionFunc: TypeAlias = Callable[[TransactionChanges], Output]


def _row_by_row(_change: Change) -> Output:
    raise TypeError("a transaction translator reads whole transactions, not one change")


@dataclass(frozen=True, slots=True)
class TransactionTranslator(Translator):
    """A translator of whole transactions; build it with :func:`transaction_translator`."""

    tx_func: TransactionFunc | None = field(default=None, repr=False)

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
        where = tx.changes[0].event.coordinates if tx.changes else Coordinates()
        assert self.tx_func is not None
        try:
            output = self.tx_func(tx)
            if output is None:
                return NO_EVENTS
            events = (output,) if isinstance(output, BusinessEvent) else tuple(output)
        except Exception as exc:  # a plugin's bug must not stop the stream
            raise TranslationError(self.ref, f"{type(exc).__name__}: {exc}", where) from exc
        for event in events:
            if not isinstance(event, self.emits):
                raise TranslationError(
                    self.ref,
                    f"returned {type(event).__name__}, which it does not declare in emits "
                    f"({', '.join(e.__name__ for e in self.emits)})",
                    where,
                )
        return events


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
) -> Callable[[TransactionFunc], TransactionTranslator]:
    """Declare a transaction translator; a malformed declaration fails where it is written.

    ``snapshots="translate"`` hands each snapshot read to the function alone (a
    snapshot row is a committed state with no transaction); the default skips them.
    """

    def wrap(func: TransactionFunc) -> TransactionTranslator:
        origin = f"{func.__module__}.{func.__qualname__}"
        problems = _problems(name, version, sources, emits, snapshots, TRANSLATE)
        if problems:
            raise PluginError(f"translator {name}@{version} ({origin}): {'; '.join(problems)}")
        return TransactionTranslator(
            name=name,
            version=version,
            sources=tuple(sources),
            emits=tuple(emits),
            func=_row_by_row,
            snapshots=snapshots,
            origin=origin,
            tx_func=func,
        )

    return wrap
