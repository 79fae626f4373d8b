"""A translator plugin installed for a test: a distribution's ``.dist-info`` folder with its
``bizevents.translators`` entry point, found by discovery where the folder is on the path
(a worker's ``PYTHONPATH``, or this process's ``sys.path``)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def install_plugin(
    where: Path, dist: str, entry: str, target: str, source: str | None = None
) -> None:
    """Distribution ``dist`` (version 1.0) in ``where``, whose entry point is
    ``<entry> = <target>`` (``module:attribute``); with ``source``, the module itself in
    ``where`` too (else the module is found elsewhere on the path, as ``tests.…``)."""
    info = where / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[bizevents.translators]\n{entry} = {target}\n")
    if source is not None:
        (where / f"{target.split(':')[0]}.py").write_text(source)


def plugin_pythonpath(*folders: Path) -> str:
    """A ``PYTHONPATH`` with ``folders`` first, then the repository (for plugins in
    ``tests``) and the inherited one."""
    inherited = filter(None, [os.environ.get("PYTHONPATH")])
    return os.pathsep.join([*map(str, folders), str(REPO), *inherited])
