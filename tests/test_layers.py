"""The floor plan holds: every import of our own code points down or sideways, never up.

The layers (docs/architecture.md), bottom first, each a subpackage of the one import
name ``bizevents``::

    plumbing     errors, settings groups, logging, metrics serving, Kafka and registry plumbing
    contracts    the envelope, column types, the codec, business contracts, compatibility
    capture      sources into technical topics      translators   plugin API, core, worker
                 consumers    the consumer kit of business topics (same floor)
    replay       the Spark replay (builds on translators)
    bizevents    the shell (every other module of ``bizevents``): CLI, demo, dev stack, the
                 plugin author's face; nothing imports it

``capture`` and ``translators`` stand on the same floor and do not know each other.
The test reads imports as written (``ast``), including those inside functions, so a
lazy import that points up is caught as well. An import of a floor by its bare folder
name (``import capture``) is wrong everywhere: the wheel installs only ``bizevents``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the floors' real folders are bizevents/<floor>; the checkout's <floor> are links to them
PACKAGE = ROOT / "bizevents"

#: floor → the floors of ours it may import (besides itself).
ALLOWED: dict[str, frozenset[str]] = {
    "plumbing": frozenset(),
    "contracts": frozenset({"plumbing"}),
    "capture": frozenset({"plumbing", "contracts"}),
    "translators": frozenset({"plumbing", "contracts"}),
    "consumers": frozenset({"plumbing", "contracts"}),
    "replay": frozenset({"plumbing", "contracts", "translators"}),
    "bizevents": frozenset(
        {"plumbing", "contracts", "capture", "translators", "replay", "consumers"}
    ),
}
FLOORS = frozenset(ALLOWED) - {"bizevents"}
#: what an import of a bare folder name is reported as
BARE = "bare folder name"


def _floor(module: str) -> str | None:
    """The floor ``module`` (a dotted import name) stands on; ``None`` when not ours."""
    parts = module.split(".")
    if parts[0] in FLOORS:
        return BARE
    if parts[0] != "bizevents":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in FLOORS else "bizevents"


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, floor)`` of every absolute import of our code in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "bizevents":
                names += [(node.lineno, f"bizevents.{alias.name}") for alias in node.names]
            else:
                names.append((node.lineno, node.module))
    return [(line, floor) for line, name in names if (floor := _floor(name)) is not None]


def _modules(floor: str) -> list[Path]:
    if floor != "bizevents":
        return sorted((PACKAGE / floor).rglob("*.py"))
    return sorted(
        path for path in PACKAGE.rglob("*.py") if path.relative_to(PACKAGE).parts[0] not in FLOORS
    )


@pytest.mark.parametrize("floor", sorted(ALLOWED))
def test_imports_point_down(floor: str) -> None:
    """No module of ``floor`` imports a floor above it (or beside it, for capture)."""
    modules = _modules(floor)
    assert modules, f"floor {floor} has no modules"
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in modules
        for line, target in _imports(path)
        if target != floor and (target == BARE or target not in ALLOWED[floor])
    ]
    assert not wrong, "imports that point up or across:\n" + "\n".join(wrong)


def test_no_floor_imports_the_shell_or_a_plugin() -> None:
    """Below the shell nothing imports the shell or the example plugin."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for floor in sorted(FLOORS)
        for path in _modules(floor)
        for line, target in _imports(path)
        if target == "bizevents"
    ]
    plugin = [
        f"{path.relative_to(ROOT)} imports bizevents_store"
        for floor in sorted(ALLOWED)
        for path in _modules(floor)
        if "bizevents_store" in {name.split(".")[0] for name in _names(path)}
    ]
    assert not wrong + plugin, "\n".join(wrong + plugin)


def test_nothing_imports_a_floor_by_its_folder_name() -> None:
    """Tests, benchmarks, examples and scripts import ``bizevents.capture``, never ``capture``."""
    paths = [
        path
        for folder in ("tests", "bench", "examples", "scripts", *sorted(ALLOWED))
        for path in sorted((ROOT / folder).rglob("*.py"))
    ]
    wrong = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in paths
        for line, target in _imports(path)
        if target == BARE
    ]
    assert not wrong, "imports of a bare folder name:\n" + "\n".join(wrong)


def _names(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return found


def test_the_rule_catches_an_import_that_points_up(tmp_path: Path) -> None:
    """The reader sees imports at module level and inside functions alike."""
    module = tmp_path / "m.py"
    module.write_text(
        "import bizevents.plumbing.errors\n\ndef f():\n    from bizevents.cli import main\n"
        "    from bizevents import capture\n    import translators.api\n"
    )
    assert _imports(module) == [(1, "plumbing"), (4, "bizevents"), (5, "capture"), (6, BARE)]


# -- the C sources ------------------------------------------------------------------------


def _c_sources() -> list[Path]:
    return sorted(
        path
        for floor in sorted(FLOORS)
        for ext in ("*.c", "*.h")
        for path in (PACKAGE / floor).rglob(ext)
    )


def _c_floor(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0]


def _c_references(path: Path) -> list[tuple[int, str]]:
    """``(line, floor)`` of what a C source reaches of ours: the headers it includes
    (found next to it, else in the shared include folder) and the modules it names
    (``PyImport_ImportModule("bizevents.contracts...")``, type and module names)."""
    from bizevents.contracts.avro_codegen.build import INCLUDE

    found: list[tuple[int, str]] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        include = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if include:
            header = path.parent / include[1]
            header = header if header.exists() else INCLUDE / include[1]
            assert header.exists(), f"{path.relative_to(ROOT)}:{number} includes {include[1]}"
            found.append((number, _c_floor(header.resolve())))
        for name in re.findall(r'"(bizevents(?:\.\w+)+)', line):
            floor = _floor(name)
            if floor is not None:
                found.append((number, floor))
    return found


def test_every_c_source_stands_on_a_floor_and_points_down() -> None:
    """A C source belongs to the floor of its folder; what it includes and the modules it
    imports or names stand on that floor or below it, as its Python would."""
    sources = _c_sources()
    assert {_c_floor(p) for p in sources} >= {"contracts", "translators", "plumbing"}
    wrong = [
        f"{path.relative_to(ROOT)}:{line} reaches {target}"
        for path in sources
        for line, target in _c_references(path)
        if target != _c_floor(path) and (target == BARE or target not in ALLOWED[_c_floor(path)])
    ]
    assert not wrong, "C that points up or across:\n" + "\n".join(wrong)


def test_each_extension_is_built_as_a_module_of_its_own_floor() -> None:
    """Every C source is built (contracts/avro_codegen/build.py) into one extension whose
    import name is under the source's floor: the codec's interpreter in contracts, the
    lineage in translators."""
    from bizevents.contracts.avro_codegen.build import EXTENSIONS

    built = {e.source.resolve(): e.module for e in EXTENSIONS}
    sources = [p.resolve() for p in _c_sources() if p.suffix == ".c"]
    assert sorted(built) == sorted(sources)
    for source, module in built.items():
        floor = _c_floor(source)
        inside = source.relative_to(PACKAGE / floor).with_suffix("").parts
        assert module == ".".join(("bizevents", floor, *inside))
        assert f'"{source.stem}"' in source.read_text(), f"{source.name} names its module"


def test_the_c_rule_catches_a_source_that_points_up(tmp_path: Path) -> None:
    """A codec source that imported the translators' Python would be reported."""
    path = tmp_path / "probe.c"
    path.write_text('#include "_text.h"\nPyImport_ImportModule("bizevents.translators.lineage");\n')
    reached = [target for _, target in _c_references(path)]
    assert reached == ["plumbing", "translators"]
    assert "translators" not in ALLOWED["contracts"] and "plumbing" in ALLOWED["contracts"]


@pytest.mark.parametrize("floor", sorted(FLOORS))
def test_a_bare_floor_name_does_not_import_in_the_checkout(floor: str, tmp_path: Path) -> None:
    """The checkout's root is on ``sys.path`` (the editable install), so without its guard
    ``import capture`` would load a second copy of every module of the floor; each floor
    refuses to be imported under any name but its own, with one sentence."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", f"import {floor}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last == f"ImportError: import bizevents.{floor}, not {floor}: the floors have one name"
    assert (ROOT / floor).resolve() == PACKAGE / floor, "<floor> is a link to bizevents/<floor>"


# -- cycles inside a floor ----------------------------------------------------------------


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(("bizevents", *parts))


def _graph(paths: list[Path], root: Path = PACKAGE) -> dict[str, set[str]]:
    """``module -> the modules of paths it imports`` (at any depth of the code)."""
    known = {_module_name(path, root): path for path in paths}
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets.add(node.module)
                targets.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in known and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("floor", sorted(FLOORS))
def test_no_import_cycle_inside_a_floor(floor: str) -> None:
    """No two modules of a floor import each other, however far round (a package's
    ``__init__``, which re-exports its modules, is left out)."""
    paths = [path for path in _modules(floor) if path.name != "__init__.py"]
    cycles = _cycles(_graph(paths))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_rule_catches_a_lazy_cycle(tmp_path: Path) -> None:
    """An import inside a function closes a cycle as well as one at the top."""
    (tmp_path / "a.py").write_text("from bizevents.b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from bizevents.a import y\n")
    (tmp_path / "c.py").write_text("import bizevents.a\n")
    assert _cycles(_graph(sorted(tmp_path.glob("*.py")), tmp_path)) == [
        ["bizevents.a", "bizevents.b"]
    ]


# -- room sizes and the thin shell ----------------------------------------------------------

#: the most lines a module of the product may have, and a module of the shell's CLI
MODULE_LINES, CLI_LINES = 600, 200
#: what only a floor may do: SQL, producing to Kafka, Spark jobs (the CLI parses, calls one
#: floor function, prints; reading a topic to print it, as `read` does, is the CLI's)
FLOOR_ONLY = re.compile(
    r"\b(SELECT|INSERT INTO|DELETE FROM|UPDATE \w+ SET)\b"
    r"|\b(Producer|AIOKafkaProducer|produce|send_confirmed|SparkSession)\b"
    r"|^\s*(import|from) (psycopg2|pymysql|pyspark\.sql)\b",
    re.MULTILINE,
)


def test_no_module_outgrows_its_room() -> None:
    """No module of the product over 600 lines, no CLI module over 200."""
    over = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := len(path.read_text().splitlines()))
        > (CLI_LINES if path.parent == PACKAGE / "cli" else MODULE_LINES)
    ]
    assert not over, "modules over their size:\n" + "\n".join(over)


def test_the_cli_holds_no_sql_kafka_client_or_spark_job() -> None:
    """`bizevents/cli/` parses arguments, calls one floor function and prints."""
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for path in sorted((PACKAGE / "cli").rglob("*.py"))
        for match in FLOOR_ONLY.finditer(path.read_text())
    ]
    assert not found, "floor work in the shell's CLI:\n" + "\n".join(found)
