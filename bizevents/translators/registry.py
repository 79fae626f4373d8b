"""The registry of translators, keyed by ``(name, version)``, and plugin discovery.

Plugins are found through the entry-point group ``bizevents.translators``; each entry
point names a :class:`~bizevents.translators.api.Translator` or a sequence of them. Registering
a key twice is an error, never an overwrite. Which version runs live is pinned in
configuration (``orders = 2``); nothing picks the latest silently, and every version
stays loadable for replay.

Convention: an entry point is named after the translator whose versions it holds
(``orders = "bizevents_store.translators:ORDERS"``). Then ``discover(names=...)``
imports only the plugins asked for, so a broken plugin nobody pinned cannot stop the
worker. Entry points named otherwise (one per package, the older style) are imported
only while an asked-for name is still unresolved; their failures are recorded and
become fatal only if that name stays unresolved, in the sentence that says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Final

from bizevents.translators.api import Translator
from bizevents.translators.exceptions import PluginError

ENTRY_POINT_GROUP: Final = "bizevents.translators"


@dataclass(frozen=True, slots=True)
class PluginFailure:
    """A plugin entry point that could not be loaded, and why."""

    name: str
    value: str
    dist: str
    error: str

    @property
    def where(self) -> str:
        where = f"entry point {self.name!r} = {self.value!r}"
        return f"{where} of {self.dist}" if self.dist else where

    def __str__(self) -> str:
        return f"translator plugin {self.where} {self.error}"


class Registry:
    """Every known translator version; look-ups by ``(name, version)`` or ``name@version``.

    ``broken`` lists the plugins discovery could not load (see :func:`discover`).
    """

    def __init__(self, translators: Iterable[Translator] = ()) -> None:
        self._by_key: dict[tuple[str, int], Translator] = {}
        self.broken: list[PluginFailure] = []
        for item in translators:
            self.register(item)

    def register(self, item: Translator) -> None:
        if not isinstance(item, Translator):
            raise PluginError(
                f"{item!r} is not a translator; declare it with @translators.translator(...)"
            )
        key = (item.name, item.version)
        existing = self._by_key.get(key)
        if existing is not None:
            raise PluginError(
                f"translator {item.ref} is registered twice: by {existing.origin or '?'} "
                f"and by {item.origin or '?'}; give one of them a new version"
            )
        self._by_key[key] = item

    def __iter__(self) -> Iterator[Translator]:
        return iter(sorted(self._by_key.values(), key=lambda t: (t.name, t.version)))

    def __len__(self) -> int:
        return len(self._by_key)

    def versions(self, name: str) -> list[int]:
        return sorted(v for n, v in self._by_key if n == name)

    def get(self, name: str, version: int) -> Translator:
        try:
            return self._by_key[(name, version)]
        except KeyError:
            known = self.versions(name)
            have = f"versions {known}" if known else "no version at all"
            broken = "".join(f"; {failure}" for failure in self.broken)
            raise PluginError(
                f"no translator {name}@{version} is registered ({name} has {have}){broken}"
            ) from None

    def resolve(self, ref: str) -> Translator:
        """Look up ``name@version``; a bare name is refused (nothing picks the latest)."""
        name, sep, version = ref.partition("@")
        if not sep or not version.isdigit():
            raise PluginError(
                f"translator reference {ref!r} must be name@version, e.g. orders@2; "
                "nothing picks the latest version silently"
            )
        return self.get(name, int(version))

    def pinned(self, pins: Mapping[str, int]) -> list[Translator]:
        """The translators that run live, one version per name as configured."""
        if not pins:
            raise PluginError(
                "no translator is pinned; set e.g. [translators] orders = 2 in the settings"
            )
        return [self.get(name, version) for name, version in sorted(pins.items())]


def _where(entry_point: EntryPoint) -> str:
    return PluginFailure(entry_point.name, entry_point.value, _dist(entry_point), "").where


def _dist(entry_point: EntryPoint) -> str:
    return entry_point.dist.name if entry_point.dist is not None else ""


def _load(entry_point: EntryPoint) -> list[Translator]:
    where = _where(entry_point)
    try:
        loaded = entry_point.load()
    except Exception as exc:  # an import failure of any kind names the plugin
        raise PluginError(
            f"translator plugin {where} failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    items = [loaded] if isinstance(loaded, Translator) else loaded
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise PluginError(f"translator plugin {where} is neither a translator nor a list of them")
    result = list(items)
    bad = [repr(i) for i in result if not isinstance(i, Translator)]
    if bad or not result:
        raise PluginError(
            f"translator plugin {where} holds {', '.join(bad) or 'nothing'}, "
            "not translators declared with @translators.translator(...)"
        )
    return result


def _record(registry: Registry, entry_point: EntryPoint, exc: PluginError) -> None:
    prefix = f"translator plugin {_where(entry_point)} "
    error = str(exc).removeprefix(prefix)
    registry.broken.append(
        PluginFailure(entry_point.name, entry_point.value, _dist(entry_point), error)
    )


def discover(group: str = ENTRY_POINT_GROUP, names: Iterable[str | None] | None = None) -> Registry:
    """The translators that installed distributions declare under ``group``.

    Without ``names``, every entry point is loaded and the ones that fail are kept in
    ``registry.broken`` (``bizevents translators list`` shows them), a ``name@version``
    that an earlier one registered too among them. With ``names``
    (translator names, or ``name@version`` references; ``None`` is ignored), only the
    entry points of those names are loaded, and one that fails raises
    :class:`PluginError` naming it; other entry points are loaded only while a name is
    unresolved, and their failures are recorded for the look-up that then fails.
    """
    registry = Registry()
    found = sorted(entry_points(group=group), key=lambda e: e.name)
    if names is None:
        for entry_point in found:
            _load_or_record(registry, entry_point, duplicates_too=True)
        return registry
    wanted = {name.partition("@")[0] for name in names if name}
    for entry_point in found:
        if entry_point.name in wanted:
            for item in _load(entry_point):
                registry.register(item)
    if all(registry.versions(name) for name in wanted):
        return registry
    for entry_point in found:
        if entry_point.name not in wanted:
            _load_or_record(registry, entry_point)
    return registry


def _load_or_record(
    registry: Registry, entry_point: EntryPoint, duplicates_too: bool = False
) -> None:
    """Register what ``entry_point`` holds; a failure to load is recorded, not raised,
    and with ``duplicates_too`` a translator registered twice as well (start-up, which
    looks names up, still refuses it)."""
    try:
        items = _load(entry_point)
        if duplicates_too:
            twice = [i for i in items if (i.name, i.version) in registry._by_key]
            if twice:
                registry.register(twice[0])  # raises its sentence
    except PluginError as exc:
        _record(registry, entry_point, exc)
        return
    for item in items:
        registry.register(item)
