"""Builds the compiled reader (``_native.c``) next to its source; ``scripts/setup`` runs it.

    python -m bizevents.contracts.avro_codegen.build [--force]

It compiles with the C compiler and headers this Python was built with (Debian: gcc and
the interpreter's own headers), and only when the extension is missing or older than its
source. Without a compiler it says so and exits 1; the project still runs, on the
generated reader (:mod:`bizevents.contracts.avro_codegen.native`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

SOURCE = Path(__file__).with_name("_native.c")


def target() -> Path:
    return SOURCE.with_name("_native" + str(sysconfig.get_config_var("EXT_SUFFIX")))


def command(output: Path) -> list[str]:
    cc = shlex.split(os.environ.get("CC") or str(sysconfig.get_config_var("CC") or "cc"))
    include = sysconfig.get_paths()["include"]
    return [
        *cc,
        "-O2",
        "-fPIC",
        "-shared",
        "-Wall",
        "-Wno-unused-parameter",
        f"-I{include}",
        str(SOURCE),
        "-o",
        str(output),
    ]


def build(force: bool = False) -> Path:
    """The built extension (built now if missing or stale). Raises ``RuntimeError``."""
    output = target()
    if not force and output.exists() and output.stat().st_mtime >= SOURCE.stat().st_mtime:
        return output
    argv = command(output)
    if shutil.which(argv[0]) is None:
        raise RuntimeError(f"no C compiler ({argv[0]}) to build {SOURCE.name}")
    partial = output.with_suffix(".partial")
    argv[-1] = str(partial)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"building {SOURCE.name} failed:\n{done.stderr.strip()}")
    partial.replace(output)  # atomic: a running process keeps its mapped copy
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args()
    try:
        built = build(args.force)
    except RuntimeError as exc:
        print(f"build: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"compiled Avro reader: {built.name}")


if __name__ == "__main__":
    main()
