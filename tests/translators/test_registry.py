"""The registry: (name, version) keys, no overwrite, pins, and entry-point discovery."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bizevents.plugins import PluginError, Registry, discover
from tests.plugins import install_plugin
from tests.translators.sample import ALL, things_v1, things_v2


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


#: what a plugin module holds: the sample's translators, one of them, or a half install
SAMPLE = "from tests.translators.sample import ALL\n"
ONE = "from tests.translators.sample import things_v1 as T\n"
HALF_INSTALLED = "raise RuntimeError('half installed')\n"


def install(where: Path, plugin: str, entry: str, source: str, attr: str = "ALL") -> None:
    """Installs distribution ``plugin-<plugin>`` whose module ``plugin_<plugin>`` holds
    ``source``, with the entry point ``<entry> = plugin_<plugin>:<attr>``."""
    install_plugin(where, f"plugin-{plugin}", entry, f"plugin_{plugin}:{attr}", source)


def test_discovery_through_entry_points(plugin_path: Path) -> None:
    install(plugin_path, "good", "things", SAMPLE)
    registry = discover()
    assert registry.resolve("things@1") is things_v1
    assert registry.resolve("things@2") is things_v2


def test_plugin_that_fails_to_import_is_named(plugin_path: Path) -> None:
    """Asked for by name, a broken plugin stops discovery with a sentence naming it."""
    install(plugin_path, "broken", "broken", "import does_not_exist_anywhere\n")
    with pytest.raises(
        PluginError,
        match=r"'broken' = 'plugin_broken:ALL' of plugin-broken failed "
        r"to import: ModuleNotFoundError",
    ):
        discover(names=["broken"])


def test_broken_plugin_nobody_pinned_does_not_stop_the_pinned_ones(plugin_path: Path) -> None:
    """Only the pinned names' entry points are imported; the broken one never is."""
    install(plugin_path, "good", "things", SAMPLE)
    install(plugin_path, "broken", "broken", HALF_INSTALLED)
    registry = discover(names=["things"])
    assert registry.pinned({"things": 2}) == [things_v2]
    assert registry.broken == []
    assert "plugin_broken" not in sys.modules


def test_listing_everything_records_a_broken_plugin_and_goes_on(plugin_path: Path) -> None:
    """Without names every plugin is loaded; the broken one is kept with its error."""
    install(plugin_path, "good", "things", SAMPLE)
    install(plugin_path, "broken", "broken", HALF_INSTALLED)
    registry = discover()
    assert registry.resolve("things@1") is things_v1
    (failure,) = registry.broken
    assert (failure.name, failure.dist) == ("broken", "plugin-broken")
    assert failure.error == "failed to import: RuntimeError: half installed"


def test_package_entry_point_is_loaded_for_a_name_it_holds(plugin_path: Path) -> None:
    """The older style (one entry point per package) still resolves a pin."""
    install(plugin_path, "pkg", "pkg", SAMPLE)
    assert discover(names=["things@2"]).pinned({"things": 2}) == [things_v2]


def test_broken_package_entry_point_is_named_when_a_pin_stays_unresolved(
    plugin_path: Path,
) -> None:
    """A failure met while looking for a pin is fatal only if the pin stays unresolved."""
    install(plugin_path, "pkg", "pkg", "import does_not_exist_anywhere\n")
    registry = discover(names=["widgets"])
    with pytest.raises(
        PluginError,
        match=r"no translator widgets@2 is registered \(widgets has no version at all\); "
        r"translator plugin entry point 'pkg' = 'plugin_pkg:ALL' of plugin-pkg failed to import",
    ):
        registry.pinned({"widgets": 2})


def test_plugin_that_is_not_a_translator_is_named(plugin_path: Path) -> None:
    install(plugin_path, "odd", "odd", "thing = 42\n", "thing")
    with pytest.raises(PluginError, match=r"'odd' .* is neither a translator nor a list"):
        discover(names=["odd"])


def test_duplicate_across_plugins_fails_start_up(plugin_path: Path) -> None:
    install(plugin_path, "one", "one", ONE, "T")
    install(plugin_path, "two", "two", ONE, "T")
    with pytest.raises(PluginError, match="things@1 is registered twice"):
        discover(names=["one", "two"])


def test_translators_list_shows_a_duplicate_as_broken_and_exits_0_if_unpinned(
    plugin_path: Path, tmp_path: Path
) -> None:
    """Nothing pinned: the table, with the second plugin of a name@version listed
    broken with the worker's sentence; exit 0 (start-up, above, refuses it)."""
    for name in ("one", "two"):
        install(plugin_path, name, name, ONE, "T")
    result = _list({"BIZEVENTS_STATE_DIR": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert "things@1" in result.stdout and "registered twice" in result.stdout


def _list(env: dict[str, str], *args: str) -> Any:
    from click.testing import CliRunner

    from bizevents.cli import main

    return CliRunner().invoke(main, ["translators", "list", *args], env=env)


def test_translators_list_shows_a_broken_plugin_and_exits_0_if_unpinned(
    plugin_path: Path, tmp_path: Path
) -> None:
    """The broken plugin is listed with its error; the pinned ones load, so exit 0."""
    install(plugin_path, "broken", "broken", HALF_INSTALLED)
    env = {"BIZEVENTS_TRANSLATORS": '{"orders": 2}', "BIZEVENTS_STATE_DIR": str(tmp_path)}
    result = _list(env, "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert listed["broken"] == [
        {
            "entry_point": "broken",
            "value": "plugin_broken:ALL",
            "dist": "plugin-broken",
            "error": "failed to import: RuntimeError: half installed",
        }
    ]
    assert "orders@2" in {t["translator"] for t in listed["translators"]}
    table = _list(env)
    assert table.exit_code == 0 and "half installed" in table.stdout


def test_translators_list_exits_1_when_a_pinned_plugin_is_broken(
    plugin_path: Path, tmp_path: Path
) -> None:
    """Pinned and broken: one sentence naming the plugin, exit 1, no traceback."""
    install(plugin_path, "broken", "broken", HALF_INSTALLED)
    env = {"BIZEVENTS_TRANSLATORS": '{"broken": 1}', "BIZEVENTS_STATE_DIR": str(tmp_path)}
    result = _list(env)
    assert result.exit_code == 1
    assert "'broken' = 'plugin_broken:ALL' of plugin-broken failed to import" in result.stderr
    assert "Traceback" not in result.stderr
