"""Builds the project's C extensions next to their sources; ``scripts/setup`` runs it.

    python -m bizevents.contracts.avro_codegen.build [--force] [--sanitize --output-dir DIR]

Each extension (:data:`EXTENSIONS`: the codec's plan interpreter, the translators'
lineage, PostgreSQL capture's tuples and the routed partition) is compiled with the C
compiler and headers this Python was built with (Debian: gcc and the interpreter's own
headers), strictly (``-Wall -Wextra -Werror``), and only when it is missing or older
than its source. Without a compiler it says so and exits 1; the project still runs, on
the generated reader, the Python lineage, tuples and routing
(:mod:`bizevents.contracts.avro_codegen.native`, :mod:`bizevents.translators.lineage`,
:mod:`bizevents.capture.postgres.pgoutput`, :mod:`bizevents.contracts.technical.routing`).
``--sanitize`` builds them with AddressSanitizer and UndefinedBehaviorSanitizer into
another directory instead (``scripts/sanitize`` loads them from there).

Run as a script too (the wheel's build hook does): it imports nothing of the project.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

#: The repository's top (or the installed package's: the floors sit side by side).
_TOP = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class Extension:
    """One C source built as one extension module, next to it."""

    #: The C source.
    source: Path
    #: The libraries it links (``-l``; ``:libx.a`` links one statically, its symbols
    #: kept inside the extension).
    libraries: tuple[str, ...] = ()
    #: The module's import name.
    module: str = ""

    @property
    def name(self) -> str:
        return self.source.stem

    def target(self, directory: Path | None = None) -> Path:
        suffix = str(sysconfig.get_config_var("EXT_SUFFIX"))
        return (directory or self.source.parent) / (self.name + suffix)


#: Every C extension of the project, each in the floor that owns it (tests/test_layers.py).
EXTENSIONS = (
    Extension(
        _TOP / "contracts" / "avro_codegen" / "_native.c",
        module="bizevents.contracts.avro_codegen._native",
    ),
    Extension(
        _TOP / "translators" / "_lineage.c",
        # libcrypto linked in: a wheel then needs no libcrypto of the user's, nor one
        # grafted by auditwheel (whose glibc would set the wheel's tag)
        libraries=(":libcrypto.a",),
        module="bizevents.translators._lineage",
    ),
    Extension(
        _TOP / "capture" / "postgres" / "_tuples.c",
        module="bizevents.capture.postgres._tuples",
    ),
    Extension(
        _TOP / "contracts" / "technical" / "_routing.c",
        module="bizevents.contracts.technical._routing",
    ),
)
#: The headers the extensions share (ground floor: plumbing/_text.h).
INCLUDE = _TOP / "plumbing"

#: The flags every build takes: warnings are errors.
STRICT = ("-Wall", "-Wextra", "-Werror")
#: A sanitized build's flags: any report aborts the process.
SANITIZE = (
    "-O1",
    "-g",
    "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
)


def command(extension: Extension, output: Path, sanitize: bool = False) -> list[str]:
    cc = shlex.split(os.environ.get("CC") or str(sysconfig.get_config_var("CC") or "cc"))
    include = sysconfig.get_paths()["include"]
    return [
        *cc,
        *(SANITIZE if sanitize else ("-O2",)),
        "-fPIC",
        "-shared",
        *STRICT,
        f"-I{include}",
        f"-I{INCLUDE}",
        str(extension.source),
        *(f"-l{lib}" for lib in extension.libraries),
        *(("-Wl,--exclude-libs,ALL",) if extension.libraries else ()),
        "-o",
        str(output),
    ]


def build_one(
    extension: Extension,
    force: bool = False,
    sanitize: bool = False,
    output_dir: Path | None = None,
) -> Path:
    """The built extension (built now if missing or stale). Raises ``RuntimeError``."""
    output = extension.target(output_dir)
    source = extension.source
    newest = max(source.stat().st_mtime, *(h.stat().st_mtime for h in INCLUDE.glob("*.h")))
    if not force and output.exists() and output.stat().st_mtime >= newest:
        return output
    argv = command(extension, output, sanitize)
    if shutil.which(argv[0]) is None:
        raise RuntimeError(f"no C compiler ({argv[0]}) to build {source.name}")
    partial = output.with_suffix(".partial")
    argv[-1] = str(partial)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"building {source.name} failed:\n{done.stderr.strip()}")
    partial.replace(output)  # atomic: a running process keeps its mapped copy
    return output


def build(
    force: bool = False, sanitize: bool = False, output_dir: Path | None = None
) -> list[Path]:
    """Every extension built (see :func:`build_one`)."""
    return [build_one(e, force, sanitize, output_dir) for e in EXTENSIONS]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument(
        "--sanitize",
        action="store_true",
        help="with AddressSanitizer and UBSan (needs --output-dir)",
    )
    parser.add_argument("--output-dir", type=Path, help="build there, not next to the sources")
    args = parser.parse_args()
    if args.sanitize and args.output_dir is None:
        parser.error("--sanitize builds into --output-dir, never over the project's extensions")
    try:
        built = build(args.force or args.sanitize, args.sanitize, args.output_dir)
    except RuntimeError as exc:
        print(f"build: {exc}", file=sys.stderr)
        sys.exit(1)
    for path in built:
        print(f"compiled: {path.name}")


if __name__ == "__main__":
    main()
