"""A message that sends a user to ``scripts/setup`` (which only a source checkout has) also
says what an installed user does: every such string of the product's code names both."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

import bizevents

PRODUCT = Path(bizevents.__file__).parent


def _sources() -> Iterator[Path]:
    """Every module of the package, the floors' folders linked into it included."""
    for folder, _dirs, files in os.walk(PRODUCT, followlinks=True):
        yield from (Path(folder, name) for name in sorted(files) if name.endswith(".py"))


def _is_internal(node: ast.Raise) -> bool:
    """``Unsupported`` is the codecs' signal to fall back to the Python reader, never shown."""
    call = node.exc
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "Unsupported"
    )


def _messages(tree: ast.AST) -> list[str]:
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    internal = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Raise) and _is_internal(node)
        for inner in ast.walk(node)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings | internal
    ]


def test_every_setup_advice_also_tells_an_installed_user() -> None:
    found: list[str] = []
    lacking: list[str] = []
    paths = list(_sources())
    assert PRODUCT / "contracts" / "avro_codegen" / "native.py" in paths
    for path in paths:
        for message in _messages(ast.parse(path.read_text(encoding="utf-8"))):
            if "scripts/setup" not in message:
                continue
            found.append(message)
            if "in a source checkout" not in message or not (
                "pip install" in message or "apt-get install" in message
            ):
                lacking.append(f"{path.relative_to(PRODUCT)}: {message}")
    assert found, "the scan found no message at all: it would pass on anything"
    assert lacking == []
