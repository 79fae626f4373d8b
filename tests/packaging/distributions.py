"""Builds the project's distributions as a release does (scripts/build-wheel) and installs them
into fresh virtual environments, as a user would, for the packaging and guide tests.

Installing pulls the wheel's dependencies from PyPI, through uv's cache (fast after once).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[2]
UV = ROOT / ".tools" / "bin" / "uv"
#: uv as scripts/setup runs it: the system's certificates, no interpreter downloads.
UV_ENV = {"UV_SYSTEM_CERTS": "1", "UV_PYTHON_DOWNLOADS": "never"}
#: `import translators` (the PyPI package) probes the Internet for a region unless told one.
THEIRS_ENV = {"translators_default_region": "EN"}


@dataclass(frozen=True)
class Distributions:
    wheel: Path
    sdist: Path


def run(
    argv: list[str | Path], env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure the assertion shows its output."""
    done = subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        check=False,
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, argv))} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done


def build(out: Path) -> Distributions:
    """The sdist and the (manylinux) wheel built from it, as scripts/build-wheel makes them."""
    run([ROOT / "scripts" / "build-wheel", out])
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return Distributions(wheel, sdist)


def uv(*args: str | Path, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The project's uv (scripts/setup installs it), run as scripts/setup runs it."""
    return run([UV, *args], env={**UV_ENV, **(env or {})})


def fresh_venv(path: Path, *, with_pip: bool = False) -> Path:
    """A new virtual environment of this interpreter's version; returns its folder.
    ``with_pip`` puts pip in it, as ``python -m venv`` does."""
    uv("venv", "-q", *(["--seed"] if with_pip else []), "--python", sys.executable, path)
    return path


def install(venv: Path, *requirements: str | Path) -> None:
    """``pip install`` into the environment (uv's pip, with its cache)."""
    uv("pip", "install", "-q", "--python", venv / "bin" / "python", *requirements)


def uninstall(venv: Path, *names: str) -> None:
    uv("pip", "uninstall", "-q", "--python", venv / "bin" / "python", *names)
