"""The translator author's view of one change event.

:class:`Change` wraps a :class:`~bizevents.contracts.envelope.ChangeEvent` and answers the
questions a translator asks (what kind of change, which columns changed, the old and
new value of a column, where it came from) without copying anything. Pure and cheap:
one object with one slot per event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from bizevents.contracts.envelope import (
    OP_CREATE,
    OP_DELETE,
    OP_READ,
    OP_TRUNCATE,
    OP_UPDATE,
    ChangeEvent,
    Op,
    Position,
    Row,
    Source,
)
from bizevents.contracts.logical import UNAVAILABLE

__all__ = ["Change"]

_NO_ROW: Final[Mapping[str, Any]] = {}
_MISSING: Final = object()


class Change:
    """A read-only view over a :class:`ChangeEvent` for translator code."""

    __slots__ = ("event", "reader", "reads")

    event: ChangeEvent
    #: The columns the translator declared it reads (``None``: any), and its ref.
    reads: frozenset[str] | None
    reader: str

    def __init__(
        self, event: ChangeEvent, reads: frozenset[str] | None = None, reader: str = ""
    ) -> None:
        self.event = event
        self.reads = reads
        self.reader = reader

    def reading(self, columns: frozenset[str], reader: str) -> Change:
        """This change as seen by a translator that declared it reads only ``columns``:
        any other column is refused by name, whatever the decoder left in the rows."""
        return Change(self.event, columns, reader)

    def __repr__(self) -> str:
        return f"Change({self.op} {self.table} key={dict(self.key or {})})"

    # -- what happened -------------------------------------------------------------

    @property
    def op(self) -> Op:
        return self.event.op

    @property
    def is_create(self) -> bool:
        """An insert, or a row read by a snapshot (both bring a row into being)."""
        return self.event.op in (OP_CREATE, OP_READ)

    @property
    def is_insert(self) -> bool:
        """An insert from the log only (a snapshot read is not one)."""
        return self.event.op == OP_CREATE

    @property
    def is_update(self) -> bool:
        return self.event.op == OP_UPDATE

    @property
    def is_delete(self) -> bool:
        return self.event.op == OP_DELETE

    @property
    def is_truncate(self) -> bool:
        return self.event.op == OP_TRUNCATE

    @property
    def is_snapshot(self) -> bool:
        """Read by a snapshot rather than from the log."""
        return self.event.source.snapshot

    # -- where ---------------------------------------------------------------------

    @property
    def source(self) -> Source:
        return self.event.source

    @property
    def table(self) -> str:
        """``schema.table`` (``db.table`` for MySQL)."""
        return self.event.source.qualified_table

    @property
    def position(self) -> Position | None:
        """The LSN (PostgreSQL) or binlog file/pos/row (MySQL) of the change."""
        return self.event.source.position

    @property
    def key(self) -> Row | None:
        return self.event.key

    @property
    def before(self) -> Row | None:
        return self.event.before

    @property
    def after(self) -> Row | None:
        return self.event.after

    # -- columns -------------------------------------------------------------------

    def old(self, column: str) -> Any:
        """The column's value before the change; ``None`` when there is no before row.

        A column the before row does not have raises ``KeyError`` naming it.
        """
        row = self.event.before
        reads = self.reads
        if row is not None and (reads is None or column in reads) and column in row:
            return row[column]
        return _get(row, column, "before", self)

    def new(self, column: str) -> Any:
        """The column's value after the change; ``None`` when there is no after row
        (a delete). :data:`~bizevents.contracts.logical.UNAVAILABLE` means an unchanged TOASTed
        value the database did not send; :meth:`current` falls back for it."""
        row = self.event.after
        reads = self.reads
        if row is not None and (reads is None or column in reads) and column in row:
            return row[column]
        return _get(row, column, "after", self)

    def current(self, column: str) -> Any:
        """The column's newest known value: the after value, or the before value where
        the after one is :data:`~bizevents.contracts.logical.UNAVAILABLE` or there is no after
        row."""
        after = self.event.after
        if after is not None:
            value = _get(after, column, "after", self)
            if value is not UNAVAILABLE:
                return value
        return _get(self.event.before, column, "before", self)

    def changed_columns(self) -> frozenset[str]:
        """The columns whose value differs between before and after.

        An insert or snapshot read changes all its columns, a delete all its before
        columns, a truncate none. An update without a before row (PostgreSQL's default
        replica identity logs none) counts every after column as changed, since
        nothing says otherwise; an UNAVAILABLE after value never counts as changed.
        """
        before = self.event.before
        after = self.event.after
        reads = self.reads
        if after is None:
            gone = frozenset(before or _NO_ROW)
            return gone if reads is None else gone & reads
        if before is None:
            came = frozenset(k for k, v in after.items() if v is not UNAVAILABLE)
            return came if reads is None else came & reads
        missing = object()
        changed = frozenset(
            k for k, v in after.items() if v is not UNAVAILABLE and before.get(k, missing) != v
        )
        return changed if self.reads is None else changed & self.reads

    def changed(self, *columns: str) -> bool:
        """Whether any of ``columns`` changed (see :meth:`changed_columns`; only the
        named columns are compared)."""
        before = self.event.before
        after = self.event.after
        reads = self.reads
        for c in columns:
            if reads is not None and c not in reads:
                continue
            if after is None:
                if before is not None and c in before:
                    return True
                continue
            value = after.get(c, _MISSING)
            if value is _MISSING or value is UNAVAILABLE:
                continue
            if before is None or before.get(c, _MISSING) != value:
                return True
        return False


def _get(row: Row | None, column: str, which: str, change: Change) -> Any:
    reads = change.reads
    if reads is not None and column not in reads:
        raise KeyError(
            f"{change.reader} reads column {column!r} of {change.table}, which it does not "
            "declare in columns="
        )
    if row is None:
        return None
    try:
        return row[column]
    except KeyError:
        raise KeyError(f"{change.table} has no column {column!r} in its {which} row") from None
