"""The wheel as an index's user gets it: one top-level name, a manylinux tag, the licence, and
an install beside the PyPI distributions named like our floors (`translators`, `contracts`)
that leaves both sides whole, in either order. The sdist builds without a C compiler."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from tests.packaging.distributions import (
    ROOT,
    THEIRS_ENV,
    UV,
    Distributions,
    build,
    fresh_venv,
    install,
    run,
    uninstall,
    uv,
)

pytestmark = pytest.mark.packaging

THEIRS = ["translators", "contracts"]
DOCS = Path(__file__).parents[2] / "docs"


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Distributions:
    return build(tmp_path_factory.mktemp("dist"))


def _metadata(wheel: Path) -> tuple[list[str], dict[str, list[str]]]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(info).decode())
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(value)
    return names, fields


def test_the_only_top_level_name_is_bizevents(dists: Distributions) -> None:
    """One import name; beside it only the metadata. Nothing is grafted (no
    bizevents.libs/): the lineage's SHA-1 is linked into its extension."""
    names, _ = _metadata(dists.wheel)
    tops = {name.split("/")[0] for name in names}
    assert tops == {"bizevents", "bizevents-0.1.0.dist-info"}
    assert "bizevents/translators/api.py" in names
    # the compiled reader, force-included by hatch_build.py
    assert any(n.startswith("bizevents/contracts/avro_codegen/_native.") for n in names)
    assert any(n.startswith("bizevents/translators/_lineage.") for n in names)
    assert any(n.startswith("bizevents/capture/postgres/_tuples.") for n in names)


def test_the_wheel_is_manylinux_2_17_as_the_docs_say(dists: Distributions) -> None:
    """The extensions need glibc 2.14 and nothing else of the system: auditwheel's
    lowest tag for it; the guide installs the wheel by its real name, and the packaging
    notes give its tag."""
    tag = "cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64"
    assert dists.wheel.name == f"bizevents-0.1.0-{tag}.whl"
    assert f"pip install {dists.wheel.name}" in (DOCS / "writing-a-translator.md").read_text()
    assert "manylinux_2_17" in (DOCS / "architecture.md").read_text()


def test_the_wheel_builds_with_only_a_compiler_and_uv(tmp_path: Path) -> None:
    """A checkout without scripts/setup's work (no .venv/, no .tools/), uv on PATH: the
    script builds the same manylinux wheel."""
    checkout = tmp_path / "checkout"
    listed = run(["git", "ls-files", "-z"], cwd=ROOT).stdout.split("\0")
    for name in filter(None, listed):
        source, target = ROOT / name, checkout / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "uv").symlink_to(UV)
    env = {"PATH": f"{tools}:/usr/bin:/bin", "HOME": os.environ["HOME"]}
    done = subprocess.run(
        [checkout / "scripts" / "build-wheel", tmp_path / "out"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "out").glob("*.whl")
    assert wheel.name.endswith("-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"), wheel.name


def test_the_wheel_is_manylinux_and_carries_its_licence(dists: Distributions) -> None:
    names, fields = _metadata(dists.wheel)
    assert "-cp311-cp311-manylinux" in dists.wheel.name, dists.wheel.name
    assert "bizevents-0.1.0.dist-info/licenses/LICENSE" in names
    with zipfile.ZipFile(dists.wheel) as archive:
        licence = archive.read("bizevents-0.1.0.dist-info/licenses/LICENSE").decode()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert fields["License-Expression"] == ["Apache-2.0"]
    # one wheel per interpreter ABI: requires-python admits only the one it is built for
    (requires,) = fields["Requires-Python"]
    assert SpecifierSet(requires) == SpecifierSet(">=3.11,<3.12")


def _claims(venv: Path) -> tuple[set[str], set[str]]:
    """The files bizevents' RECORD claims, and those the other distributions' RECORDs claim."""
    (site,) = venv.glob("lib/python*/site-packages")
    ours: set[str] = set()
    theirs: set[str] = set()
    for record in site.glob("*.dist-info/RECORD"):
        paths = {line.rsplit(",", 2)[0] for line in record.read_text().splitlines()}
        (ours if record.parent.name.startswith("bizevents-") else theirs).update(paths)
    return ours, theirs


def _both_sides_import(venv: Path) -> None:
    # run from the environment's folder: from the checkout, `python -c` would find its
    # top-level folders (translators/, contracts/) on sys.path first
    bin_ = venv / "bin"
    assert "Usage: bizevents" in run([bin_ / "bizevents", "--help"], cwd=venv).stdout
    run(
        [bin_ / "python", "-c", "import bizevents.translators.api, bizevents.contracts.business"],
        cwd=venv,
    )
    # theirs, by what only theirs has
    probe = (
        "import translators, contracts\n"
        "assert callable(translators.translate_text), translators.__file__\n"
        "assert contracts.CONTRACTS_ENABLED is False, contracts.__file__\n"
    )
    run([bin_ / "python", "-c", probe], env=THEIRS_ENV, cwd=venv)


@pytest.fixture(scope="module", params=["ours first", "theirs first"])
def side_by_side(
    request: pytest.FixtureRequest, dists: Distributions, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    venv = fresh_venv(tmp_path_factory.mktemp("venv") / "env")
    steps: list[list[str | Path]] = [[dists.wheel], list(THEIRS)]
    if request.param == "theirs first":
        steps.reverse()
    for step in steps:
        install(venv, *step)
    yield venv


def test_both_sides_import_whichever_is_installed_first(side_by_side: Path) -> None:
    _both_sides_import(side_by_side)
    ours, theirs = _claims(side_by_side)
    assert "bizevents/translators/__init__.py" in ours
    assert {"translators/__init__.py", "contracts.py"} <= theirs
    assert ours & theirs == set(), "files of bizevents that another distribution also installs"


def test_uninstalling_theirs_leaves_ours_whole(side_by_side: Path) -> None:
    uninstall(side_by_side, *THEIRS)
    bin_ = side_by_side / "bin"
    assert "Usage: bizevents" in run([bin_ / "bizevents", "--help"], cwd=side_by_side).stdout
    run([bin_ / "python", "-c", "import bizevents.translators.api"], cwd=side_by_side)


PURE_PROBE = """
from collections.abc import Iterator

from bizevents import BusinessEvent, Change, translator
from bizevents.contracts.avro_codegen import native
from bizevents.testing import change, run


class Touched(BusinessEvent):
    id: int

    class Meta:
        namespace = "probe"


@translator(name="probe", version=1, sources=["public.t"], emits=[Touched])
def probe(c: Change) -> Iterator[BusinessEvent]:
    yield Touched(id=c.new("id"))


assert not native.AVAILABLE
assert run(probe, change("public.t", "c", after={"id": 7})).payloads == [Touched(id=7)]
"""


def test_the_sdist_builds_without_a_compiler_into_a_wheel_that_runs(
    dists: Distributions, tmp_path: Path
) -> None:
    """CC names a compiler that is not there: the build warns and falls back to Python."""
    with tarfile.open(dists.sdist) as sdist:
        held = set(sdist.getnames())
    assert {"bizevents-0.1.0/LICENSE", "bizevents-0.1.0/hatch_build.py"} <= held
    assert {
        "bizevents-0.1.0/bizevents/contracts/avro_codegen/_native.c",
        "bizevents-0.1.0/bizevents/translators/_lineage.c",
        "bizevents-0.1.0/bizevents/capture/postgres/_tuples.c",
        "bizevents-0.1.0/bizevents/plumbing/_text.h",
    } <= held
    built = uv(
        "build",
        "--wheel",
        "--out-dir",
        tmp_path / "out",
        dists.sdist,
        env={"CC": "/nonexistent"},
    )
    assert "no C compiler (/nonexistent)" in built.stderr
    assert "building without the compiled Avro reader" in built.stderr
    (wheel,) = (tmp_path / "out").glob("*.whl")
    assert wheel.name == "bizevents-0.1.0-py3-none-any.whl"
    names, _ = _metadata(wheel)
    assert not [n for n in names if n.endswith(".so")]
    venv = fresh_venv(tmp_path / "env")
    install(venv, wheel)
    run([venv / "bin" / "python", "-c", PURE_PROBE], cwd=venv)
