"""The plugin API: a translator turns one technical change into zero or more business events.

A translator is a pure function of a :class:`~bizevents.contracts.change.Change`: no I/O, no
clock, no globals, so the same code runs in a Faust agent, a Spark executor and a
test. Zero events means the change is irrelevant to the business; the runtime drops
and counts it. A translator declares its name, an integer version, the tables it
reads, the contracts it emits, and what it does with snapshot reads and deletes::

    @translator(name="orders", version=2, sources=["public.orders"],
                emits=[OrderPlaced, OrderStatusChanged])
    def orders(change: Change) -> Iterable[BusinessEvent]:
        ...
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from bizevents.contracts.business import BusinessEvent
from bizevents.contracts.change import Change
from bizevents.contracts.envelope import OPS
from bizevents.translators.exceptions import PluginError, TranslationError, plugin_failure

Policy: TypeAlias = Literal["translate", "skip"]
TRANSLATE: Final = "translate"
SKIP: Final = "skip"

Output: TypeAlias = BusinessEvent | Iterable[BusinessEvent] | None
TranslateFunc: TypeAlias = Callable[[Change], Output]

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
NO_EVENTS: Final[tuple[BusinessEvent, ...]] = ()


@dataclass(frozen=True, slots=True)
class Translator:
    """A translator function with its declaration; build it with :func:`translator`."""

    name: str
    version: int
    sources: tuple[str, ...]
    emits: tuple[type[BusinessEvent], ...]
    func: TranslateFunc = field(repr=False)
    snapshots: Policy = TRANSLATE
    deletes: Policy = TRANSLATE
    origin: str = ""
    #: The only columns it reads (``None``: any); the runtime decodes no others.
    columns: frozenset[str] | None = None
    #: The ops that can give it an event (``None``: any); other changes are dropped
    #: before it is called.
    ops: frozenset[str] | None = None
    #: The columns without whose change an update gives it no event (``None``: any
    #: update may); the other updates are dropped before their rows are decoded.
    changes: frozenset[str] | None = None
    #: ``name@version``, as pinned, logged and written in lineage (made once: the
    #: runtime reads it for every change).
    ref: str = field(init=False, repr=False, compare=False)
    #: The ops that can give it an event at all (:meth:`may_emit`; made once).
    emitting: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ref", f"{self.name}@{self.version}")
        emitting = {
            op
            for op in OPS
            if (self.ops is None or op in self.ops)
            and not (op == "r" and self.snapshots == SKIP)
            and not (op == "d" and self.deletes == SKIP)
        }
        object.__setattr__(self, "emitting", frozenset(emitting))

    def may_emit(self, op: str) -> bool:
        """Whether a change with ``op`` can give this translator an event at all."""
        return op in self.emitting

    def reads(self, table: str) -> bool:
        """Does this translator read ``schema.table``? Sources may use shell wildcards."""
        return _reads(self.sources, table)

    def translate(self, change: Change) -> tuple[BusinessEvent, ...]:
        """The events for ``change``; raises :class:`TranslationError` on any failure."""
        if not self.may_emit(change.op):
            return NO_EVENTS
        if self.columns is not None:
            change = change.reading(self.columns, self.ref)
        return self.events(change)

    def events(self, change: Change) -> tuple[BusinessEvent, ...]:
        """:meth:`translate` once its caller knows the change's op may give events and
        hands the change as this translator reads it (``Change(event, columns, ref)``):
        the pipeline does both once per record."""
        try:
            output = self.func(change)
            # a generator runs only here, so its exceptions must be caught here too
            if output is None:
                return NO_EVENTS
            events = (output,) if isinstance(output, BusinessEvent) else tuple(output)
        except TranslationError as exc:  # the plugin's own: its message is the reason
            raise TranslationError(self.ref, exc.reason, change.event.coordinates) from exc
        except Exception as exc:  # a plugin's bug must not stop the stream
            raise TranslationError(
                self.ref, plugin_failure(self.func, exc), change.event.coordinates
            ) from exc
        for event in events:
            if not isinstance(event, self.emits):
                raise TranslationError(
                    self.ref,
                    f"returned {type(event).__name__}, which it does not declare in emits "
                    f"({', '.join(e.__name__ for e in self.emits)})",
                    change.event.coordinates,
                )
        return events

    def __call__(self, change: Change) -> tuple[BusinessEvent, ...]:
        return self.translate(change)


@functools.lru_cache(maxsize=4096)
def _reads(sources: tuple[str, ...], table: str) -> bool:
    """Whether a table matches one of ``sources`` (asked for every change of a
    transaction: the answer is kept)."""
    return any(fnmatch.fnmatchcase(table, pattern) for pattern in sources)


def translator(
    *,
    name: str,
    version: int,
    sources: Sequence[str],
    emits: Sequence[type[BusinessEvent]],
    snapshots: Policy = TRANSLATE,
    deletes: Policy = TRANSLATE,
    columns: Sequence[str] | None = None,
    ops: Sequence[str] | None = None,
    changes: Sequence[str] | None = None,
) -> Callable[[TranslateFunc], Translator]:
    """Declare a translator; a malformed declaration fails where it is written.

    ``columns`` lists the only columns the function reads (of every source table,
    the key's included) and ``ops`` the only ops that can give it an event
    (``"c"``, ``"u"``, ``"d"``, ``"r"``, ``"t"``). Both are optional: without them it
    sees every column of every change. With them the runtime decodes nothing else
    and drops the other changes before calling it; reading an undeclared column
    is a translation error naming it, in tests as in production.

    ``changes`` lists the columns without whose change an update gives no event
    (``["status"]``: only a new status matters). The runtime drops an update with a
    before row in which none of them changed, before its rows are decoded. An update
    without a before row (PostgreSQL's default replica identity) is always passed on,
    as is one whose value is an unchanged out-of-line (TOASTed) placeholder. They must
    be among ``columns`` when those are declared.
    """

    def wrap(func: TranslateFunc) -> Translator:
        problems = _problems(name, version, sources, emits, snapshots, deletes)
        problems += _declaration_problems(columns, ops)
        problems += _changes_problems(changes, columns)
        declared = _declared(func, problems, name, version, sources, emits, snapshots)
        return Translator(
            **declared,
            func=func,
            deletes=deletes,
            columns=None if columns is None else frozenset(columns),
            ops=None if ops is None else frozenset(ops),
            changes=None if changes is None else frozenset(changes),
        )

    return wrap


def _declared(
    func: Callable[..., object],
    problems: list[str],
    name: str,
    version: int,
    sources: Sequence[str],
    emits: Sequence[type[BusinessEvent]],
    snapshots: Policy,
) -> dict[str, Any]:
    """The fields every translator's declaration gives its record, ``origin`` (where
    ``func`` is) among them, once it has no ``problems`` (else a :class:`PluginError`
    naming them all)."""
    origin = f"{func.__module__}.{func.__qualname__}"
    if problems:
        raise PluginError(f"translator {name}@{version} ({origin}): {'; '.join(problems)}")
    return {
        "name": name,
        "version": version,
        "sources": tuple(sources),
        "emits": tuple(emits),
        "snapshots": snapshots,
        "origin": origin,
    }


def _problems(
    name: object,
    version: object,
    sources: Sequence[str],
    emits: Sequence[object],
    snapshots: str,
    deletes: str,
) -> list[str]:
    problems = []
    if not isinstance(name, str) or not _NAME.match(name):
        problems.append(f"name {name!r} must be lower case letters, digits, '-' or '_'")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        problems.append(f"version {version!r} must be a positive integer")
    if (
        isinstance(sources, str)
        or not sources
        or not all(isinstance(s, str) and "." in s for s in sources)
    ):
        problems.append(f"sources {sources!r} must be a list of 'schema.table' patterns")
    if not emits:
        problems.append("emits names no contract")
    for contract in emits:
        if not (isinstance(contract, type) and issubclass(contract, BusinessEvent)):
            problems.append(f"emits {contract!r}, which is not a BusinessEvent contract")
    for label, value in (("snapshots", snapshots), ("deletes", deletes)):
        if value not in (TRANSLATE, SKIP):
            problems.append(f"{label}={value!r} must be 'translate' or 'skip'")
    return problems


def _declaration_problems(columns: object, ops: object) -> list[str]:
    problems = []
    if columns is not None and (
        isinstance(columns, str)
        or not isinstance(columns, Sequence | frozenset | set)
        or not columns
        or not all(isinstance(c, str) and c for c in columns)
    ):
        problems.append(f"columns {columns!r} must be a non-empty list of column names")
    if ops is not None and (
        isinstance(ops, str)
        or not isinstance(ops, Sequence | frozenset | set)
        or not ops
        or not set(ops) <= OPS
    ):
        problems.append(f"ops {ops!r} must be a non-empty list of {', '.join(sorted(OPS))}")
    return problems


def _changes_problems(changes: object, columns: object) -> list[str]:
    if changes is None:
        return []
    if (
        isinstance(changes, str)
        or not isinstance(changes, Sequence | frozenset | set)
        or not changes
        or not all(isinstance(c, str) and c for c in changes)
    ):
        return [f"changes {changes!r} must be a non-empty list of column names"]
    if isinstance(columns, Sequence | frozenset | set) and not isinstance(columns, str):
        unread = sorted(set(changes) - set(columns))
        if unread:
            return [f"changes names {', '.join(map(repr, unread))}, which columns does not list"]
    return []
