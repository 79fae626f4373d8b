"""`bizevents contracts write`: the installed plugins' contracts as .avsc files (the store
example is installed in the project's environment as a user installs a plugin)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.cli import bizevents

REPO = Path(__file__).resolve().parents[2]
STORE_CATALOGUE = REPO / "examples" / "store" / "contracts"


def _write(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIZEVENTS_")}
    return bizevents("contracts", "write", *args, env=env, cwd=cwd, timeout=60)


def _catalogue(folder: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(folder.glob("*.avsc"))}


def test_every_plugins_contracts_into_a_new_folder(tmp_path: Path) -> None:
    """Without names, every installed plugin's; the folder is created; the files are those
    the store example keeps in git, byte for byte."""
    done = _write("--out", "avsc/new", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _catalogue(tmp_path / "avsc" / "new") == _catalogue(STORE_CATALOGUE)
    assert f"{len(_catalogue(STORE_CATALOGUE))} contract(s) written" in done.stdout


def test_by_translator_or_distribution_name(tmp_path: Path) -> None:
    by_translator = _write("--out", "t", "orders", cwd=tmp_path)
    assert by_translator.returncode == 0, by_translator.stderr
    assert sorted(_catalogue(tmp_path / "t")) == [
        "store.orders.OrderCancelled.avsc",
        "store.orders.OrderPlaced.avsc",
        "store.orders.OrderShipped.avsc",
        "store.orders.OrderStatusChanged.avsc",
    ]
    by_distribution = _write("--out", "d", "bizevents_store", cwd=tmp_path)
    assert by_distribution.returncode == 0, by_distribution.stderr
    assert _catalogue(tmp_path / "d") == _catalogue(STORE_CATALOGUE)
    default = _write(cwd=tmp_path)
    assert default.returncode == 0, default.stderr
    assert _catalogue(tmp_path / "contracts") == _catalogue(STORE_CATALOGUE)


def test_an_unknown_name_is_one_sentence(tmp_path: Path) -> None:
    done = _write("--out", "x", "parcels", cwd=tmp_path)
    assert done.returncode == 1
    assert "'parcels' is neither an installed translator plugin nor a translator's name" in (
        " ".join(done.stderr.split())
    )
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "x").exists()
