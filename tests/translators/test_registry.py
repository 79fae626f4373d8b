"""The registry: (name, version) keys, no overwrite, pins, and entry-point discovery."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.translators.sample import ALL, things_v1, things_v2
from translators import PluginError, Registry, discover


def test_lookup_by_name_and_version() -> None:
    registry = Registry(ALL)
    assert registry.get("things", 1) is things_v1
    assert registry.resolve("things@2") is things_v2
    assert registry.versions("things") == [1, 2]
    assert [t.ref for t in registry] == ["things@1", "things@2"]


def test_duplicate_is_an_error_never_an_overwrite() -> None:
    registry = Registry([things_v1])
    with pytest.raises(PluginError, match="things@1 is registered twice"):
        registry.register(things_v1)
    assert registry.get("things", 1) is things_v1


def test_nothing_picks_the_latest() -> None:
    registry = Registry(ALL)
    with pytest.raises(PluginError, match="must be name@version"):
        registry.resolve("things")
    with pytest.raises(PluginError, match=r"no translator things@3 .*versions \[1, 2\]"):
        registry.resolve("things@3")
    with pytest.raises(PluginError, match="no translator is pinned"):
        registry.pinned({})
    assert registry.pinned({"things": 1}) == [things_v1]


@pytest.fixture
def plugin_path(tmp_path: Path) -> Iterator[Path]:
    """A folder on sys.path where tests put plugin modules and their dist-info."""
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("plugin_")]:
        del sys.modules[name]


def install(where: Path, dist: str, entry_points: str, modules: dict[str, str]) -> None:
    info = where / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[bizevents.translators]\n" + textwrap.dedent(entry_points)
    )
    for name, source in modules.items():
        (where / f"{name}.py").write_text(textwrap.dedent(source))


def test_discovery_through_entry_points(plugin_path: Path) -> None:
    install(
        plugin_path,
        "plugin-good",
        "things = plugin_good:ALL\n",
        {"plugin_good": "from tests.translators.sample import ALL\n"},
    )
    registry = discover()
    assert registry.resolve("things@1") is things_v1
    assert registry.resolve("things@2") is things_v2


def test_plugin_that_fails_to_import_is_named(plugin_path: Path) -> None:
    install(
        plugin_path,
        "plugin-broken",
        "broken = plugin_broken:ALL\n",
        {"plugin_broken": "import does_not_exist_anywhere\n"},
    )
    with pytest.raises(
        PluginError,
        match=r"'broken' = 'plugin_broken:ALL' of plugin-broken failed "
        r"to import: ModuleNotFoundError",
    ):
        discover()


def test_plugin_that_is_not_a_translator_is_named(plugin_path: Path) -> None:
    install(plugin_path, "plugin-odd", "odd = plugin_odd:thing\n", {"plugin_odd": "thing = 42\n"})
    with pytest.raises(PluginError, match=r"'odd' .* is neither a translator nor a list"):
        discover()


def test_duplicate_across_plugins_fails_start_up(plugin_path: Path) -> None:
    install(
        plugin_path,
        "plugin-one",
        "one = plugin_one:T\n",
        {"plugin_one": "from tests.translators.sample import things_v1 as T\n"},
    )
    install(
        plugin_path,
        "plugin-two",
        "two = plugin_two:T\n",
        {"plugin_two": "from tests.translators.sample import things_v1 as T\n"},
    )
    with pytest.raises(PluginError, match="things@1 is registered twice"):
        discover()
