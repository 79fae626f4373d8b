"""Builds the C extensions into wheels (bizevents/contracts/avro_codegen/build.py: the
codec's plan interpreter and the translators' lineage).

Without a C compiler (or when the compile fails) the wheel is built without the extension,
with a warning: the code runs on the generated pure-Python reader, only slower. Such a wheel
is tagged ``py3-none-any``; one with the extension carries this interpreter's tag, which
``scripts/build-wheel`` turns into a manylinux tag.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# Through the package's path, not the top-level folder: an sdist holds only bizevents/.
BUILD_SCRIPT = Path("bizevents", "contracts", "avro_codegen", "build.py")


def _build_module(root: str) -> ModuleType:
    """The build script, loaded from its file: it needs only the standard library, and the
    build environment has none of bizevents' dependencies to import the package with."""
    spec = importlib.util.spec_from_file_location(
        "_bizevents_native_build", Path(root, BUILD_SCRIPT)
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class CompiledReader(BuildHookInterface):  # type: ignore[misc]
    """A wheel carries the extensions (``_native*.so``, ``_lineage*.so``, ``_tuples*.so``),
    built for the interpreter that builds the wheel; an editable install builds them in
    place."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        module = _build_module(self.root)
        try:
            built: list[Path] = module.build()
        except RuntimeError as exc:
            self.app.display_warning(
                f"bizevents: {exc}; building without the compiled Avro reader "
                "(the pure-Python reader runs instead, slower)"
            )
            return  # a pure wheel: hatchling tags it py3-none-any
        if version == "editable":
            return  # the extension sits next to its source, where the editable path finds it
        for path in built:  # each extension where its floor sits inside the package
            build_data["force_include"][str(path)] = str(
                Path("bizevents", path.relative_to(module._TOP))
            )
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
