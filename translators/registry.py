"""The registry of translators, keyed by ``(name, version)``, and plugin discovery.

Plugins are found through the entry-point group ``bizevents.translators``; each entry
point names a :class:`~translators.api.Translator` or a sequence of them. Registering
a key twice is an error, never an overwrite. Which version runs live is pinned in
configuration (``orders = 2``); nothing picks the latest silently, and every version
stays loadable for replay.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Final

from translators.api import Translator
from translators.exceptions import PluginError

ENTRY_POINT_GROUP: Final = "bizevents.translators"


class Registry:
    """Every known translator version; look-ups by ``(name, version)`` or ``name@version``."""

    def __init__(self, translators: Iterable[Translator] = ()) -> None:
        self._by_key: dict[tuple[str, int], Translator] = {}
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
            raise PluginError(
                f"no translator {name}@{version} is registered ({name} has {have})"
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


def _load(entry_point: EntryPoint) -> list[Translator]:
    where = f"entry point {entry_point.name!r} = {entry_point.value!r}"
    if entry_point.dist is not None:
        where += f" of {entry_point.dist.name}"
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


def discover(group: str = ENTRY_POINT_GROUP) -> Registry:
    """Every translator that installed distributions declare under ``group``."""
    registry = Registry()
    for entry_point in sorted(entry_points(group=group), key=lambda e: e.name):
        for item in _load(entry_point):
            registry.register(item)
    return registry
