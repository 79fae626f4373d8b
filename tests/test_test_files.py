"""Every module with logic has a test file named for it, where its path says.

``bizevents/translators/txcore.py`` is tested by ``tests/translators/test_txcore.py``,
``bizevents/capture/postgres/stream.py`` by ``tests/capture/postgres/test_stream.py`` and
a shell module such as ``bizevents/settings.py`` by ``tests/bizevents/test_settings.py``
(a leading underscore is dropped: ``_faust.py`` → ``test_faust.py``; a package's
``__init__.py`` is named for the package). A module has logic when it defines a function
or a method; one of constants, types and re-exports needs no test file of its own.

What is left without one is listed below with the reason; a new module without a test
file fails here.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatchcase
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bizevents"
FLOORS = frozenset({"plumbing", "contracts", "capture", "translators", "consumers", "replay"})

#: module paths below ``bizevents/`` (shell patterns) → why they have no test file of
#: their own
WITHOUT_TEST_FILE: dict[str, str] = {
    "__init__.py": "the plugin author's face, names loaded when first used: "
    "tests/translators/test_api.py, tests/packaging/test_wheel.py",
    "__main__.py": "runs the CLI; the CLI tests run it as `python -m bizevents`",
    "capture/exceptions.py": "the errors' sentences, met by the codec and stream tests: "
    "tests/capture/postgres/test_pgoutput.py, test_types.py, test_runner.py",
    "capture/postgres/messages.py": "pgoutput's message types, built by the decoder: "
    "tests/capture/postgres/test_pgoutput.py, test_pgoutput_live.py",
    "capture/postgres/parsers.py": "the text forms of PostgreSQL's types: "
    "tests/capture/postgres/test_types.py",
    "capture/verifylag.py": "verify's wait for capture to catch up, run whole by "
    "tests/capture/test_verify_lag.py",
    "capture/verifytables.py": "verify's table reads, run by tests/capture/test_verify*.py",
    "cli/*": "each command group is tested through the command: tests/bizevents/test_cli_*.py "
    "and tests/integration/test_*_cli.py",
    "demo/*": "the demo runs whole in tests/integration/test_demo.py and test_demo_story.py",
    "devstack/*": "the dev stack runs whole: tests/integration/test_devstack_*.py, "
    "tests/bizevents/test_registry_*.py, test_running_stack.py",
    "diffreport.py": "tests/bizevents/test_diff_report.py",
    "testing/pytest_plugin.py": "the fixtures every integration test stands on",
    "contracts/avro_codegen/*": "the generated codecs are tested against fastavro as one: "
    "tests/contracts/test_fast_serialize.py, test_fast_decode.py, test_native_helpers.py",
    "contracts/logical/*": "the logical types as one: tests/contracts/test_logical.py",
    "contracts/technical/*": "the technical codecs as one: tests/contracts/"
    "test_technical_codecs.py, test_strict_decoding.py, test_source_block.py, "
    "test_transaction_topic.py",
    "contracts/exceptions.py": "the errors' sentences, met by the codec tests",
    "replay/diff.py": "tests/replay/test_diff_html.py and test_replay_diff.py",
    "replay/job.py": "the Spark job: tests/replay/test_replay_*.py run it",
    "replay/parquet.py": "the Spark job's Parquet output: tests/replay/test_replay_outputs.py",
    "replay/run.py": "the Spark job's entry: tests/replay/test_replay_*.py run it",
    "replay/spec.py": "the replay's request, run by tests/replay/test_replay_*.py",
    "replay/state.py": "tests/replay/test_plan.py",
    "replay/task.py": "the Spark task: tests/replay/test_replay_*.py, test_files.py",
    "replay/transactions.py": "tests/replay/test_replay_transactions.py",
    "replay/txtasks.py": "tests/replay/test_replay_transactions.py",
    "replay/verify.py": "tests/capture/test_verify*.py run the Spark verify",
    "translators/parkingio.py": "tests/translators/test_parking.py",
}


def _has_logic(path: Path) -> bool:
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in ast.walk(tree))


def _test_file(module: Path) -> Path:
    """Where ``module``'s test file is (``bizevents/<path>/<name>.py`` →
    ``tests/<path>/test_<name>.py``; the shell's under ``tests/bizevents/``)."""
    rel = module.relative_to(PACKAGE)
    folder = rel.parent if rel.parts[0] in FLOORS else Path("bizevents", *rel.parts[:-1])
    name = rel.stem
    if name == "__init__" and len(rel.parts) > 1:
        folder, name = folder.parent, rel.parent.name
    return ROOT / "tests" / folder / f"test_{name.lstrip('_')}.py"


def _excused(module: Path) -> bool:
    rel = module.relative_to(PACKAGE).as_posix()
    return any(fnmatchcase(rel, pattern) for pattern in WITHOUT_TEST_FILE)


def test_every_module_with_logic_has_a_test_file_named_for_it() -> None:
    missing = [
        f"{module.relative_to(ROOT)}: {_test_file(module).relative_to(ROOT)}"
        for module in sorted(PACKAGE.rglob("*.py"))
        if _has_logic(module) and not _excused(module) and not _test_file(module).exists()
    ]
    assert not missing, "modules with logic and no test file named for them:\n" + "\n".join(missing)


def test_what_is_excused_is_still_there() -> None:
    """An entry that names nothing (a module moved, or tested now) leaves the list."""
    modules = [m.relative_to(PACKAGE).as_posix() for m in PACKAGE.rglob("*.py")]
    stale = [p for p in WITHOUT_TEST_FILE if not any(fnmatchcase(m, p) for m in modules)]
    tested = [p for p in WITHOUT_TEST_FILE if "*" not in p and _test_file(PACKAGE / p).exists()]
    assert not stale + tested, f"entries to remove: {stale + tested}"
