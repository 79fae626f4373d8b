"""The floor plan holds: every import of our own code points down or sideways, never up.

The layers (docs/architecture.md), bottom first::

    base         errors, settings groups, logging, metrics serving, Kafka and registry plumbing
    contracts    the envelope, column types, the codec, business contracts, compatibility
    capture      sources into technical topics      translators   plugin API, core, worker
                 consumers    the consumer kit of business topics (same floor)
    replay       the Spark replay (builds on translators)
    bizevents    the shell: CLI, demo, dev stack, pytest plugin; nothing imports it

``capture`` and ``translators`` stand on the same floor and do not know each other.
The test reads imports as written (``ast``), including those inside functions, so a
lazy import that points up is caught as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: package → the packages of ours it may import (besides itself).
ALLOWED: dict[str, frozenset[str]] = {
    "base": frozenset(),
    "contracts": frozenset({"base"}),
    "capture": frozenset({"base", "contracts"}),
    "translators": frozenset({"base", "contracts"}),
    "consumers": frozenset({"base", "contracts"}),
    "replay": frozenset({"base", "contracts", "translators"}),
    "bizevents": frozenset({"base", "contracts", "capture", "translators", "replay", "consumers"}),
}
OURS = frozenset(ALLOWED)


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, top-level package)`` of every absolute import in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_point_down(package: str) -> None:
    """No module of ``package`` imports a package above it (or beside it, for capture)."""
    modules = _modules(package)
    assert modules, f"package {package} has no modules"
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in modules
        for line, target in _imports(path)
        if target in OURS and target != package and target not in ALLOWED[package]
    ]
    assert not wrong, "imports that point up or across:\n" + "\n".join(wrong)


def test_no_package_imports_the_shell_or_a_plugin() -> None:
    """Below the shell nothing imports ``bizevents`` or the example plugin."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for package in sorted(OURS - {"bizevents"})
        for path in _modules(package)
        for line, target in _imports(path)
        if target in ("bizevents", "bizevents_store")
    ]
    assert not wrong, "\n".join(wrong)


def test_the_rule_catches_an_import_that_points_up(tmp_path: Path) -> None:
    """The reader sees imports at module level and inside functions alike."""
    module = tmp_path / "m.py"
    module.write_text("import base.errors\n\ndef f():\n    from bizevents.cli import main\n")
    assert _imports(module) == [(1, "base"), (4, "bizevents")]
