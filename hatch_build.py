"""Builds the compiled Avro reader into wheels (contracts/avro_codegen/build.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CompiledReader(BuildHookInterface):  # type: ignore[misc]
    """A wheel carries ``contracts/avro_codegen/_native*.so``, built for the interpreter
    that builds the wheel; an editable install builds it in place."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        script = Path(self.root, "contracts", "avro_codegen", "build.py")
        subprocess.run([sys.executable, str(script)], check=True)
        if version == "editable":
            return  # the extension sits next to its source, where the editable path finds it
        built = sorted(script.parent.glob("_native.*.so"))
        for path in built:
            build_data["force_include"][str(path)] = str(
                Path("bizevents", path.relative_to(self.root))
            )
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
