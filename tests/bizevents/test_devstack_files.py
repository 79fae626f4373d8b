"""The dev stack's folders and files are its own: made private from the start, never a
folder another user prepared, never written through a planted link (issue 41)."""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from bizevents.devstack import services
from bizevents.devstack.files import private_dir, secret
from bizevents.devstack.processes import StackError
from bizevents.devstack.services import Postgres, Started
from bizevents.devstack.stack import DevStack
from bizevents.settings import DevSettings

# The case the issue reproduced: root, whose database servers run as their own users.
as_root = os.geteuid() == 0


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def no_chmod(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Files and folders must get their mode when made, not from a chmod afterwards; an
    open umask shows any mode that was not asked for."""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("chmod after creation: the file was open to others meanwhile")

    monkeypatch.setattr(os, "chmod", refuse)
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_state_file_and_secrets_are_private_from_the_start(tmp_path: Path, no_chmod: None) -> None:
    stack = DevStack(tmp_path / "state", DevSettings())
    started = Started(1, 1, 1, "127.0.0.1:1", "log", {"dsn": "postgresql://u:pw@h:1/d"})
    stack._save({"postgres": started})
    assert _mode(tmp_path / "state") == 0o700
    assert _mode(stack.state_file) == 0o600
    password = secret(tmp_path / "state" / "postgres.password")
    assert _mode(tmp_path / "state" / "postgres.password") == 0o600
    assert secret(tmp_path / "state" / "postgres.password") == password
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == [
        "postgres.password",
        "stack.json",
    ]


def test_a_secret_behind_a_link_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("not yours\n")
    (tmp_path / "mysql-root.password").symlink_to(target)
    with pytest.raises(StackError, match=r"mysql-root\.password"):
        secret(tmp_path / "mysql-root.password")
    assert target.read_text() == "not yours\n"


def test_a_server_folder_is_made_0700(tmp_path: Path, no_chmod: None) -> None:
    state = private_dir(tmp_path / "state")
    root = services._server_root(state, "postgres", "postgres" if as_root else None)
    assert root.is_dir()
    assert _mode(root) == 0o700


def test_a_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    state = private_dir(tmp_path / "state")
    open_to_all = state / "postgres"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    with pytest.raises(StackError, match="can be written by other users"):
        services._server_root(state, "postgres", None)
    assert _mode(open_to_all) == 0o777


@pytest.mark.skipif(not as_root, reason="needs root to prepare a folder of another user")
def test_a_folder_another_user_prepared_is_refused(tmp_path: Path) -> None:
    """The predictable fallback folder under $TMPDIR, made first by someone else, is
    neither used nor chowned."""
    state = private_dir(tmp_path / "state")  # 0700 root: out of the postgres user's reach
    outside = services._outside_root(state, "postgres")
    nobody = pwd.getpwnam("nobody")
    os.mkdir(outside, 0o777)
    os.chmod(outside, 0o777)
    os.chown(outside, nobody.pw_uid, nobody.pw_gid)
    try:
        with pytest.raises(StackError, match="belongs to 'nobody', not 'postgres'"):
            services._server_root(state, "postgres", "postgres")
        assert os.lstat(outside).st_uid == nobody.pw_uid
        assert _mode(outside) == 0o777
        assert list(outside.iterdir()) == []
    finally:
        outside.rmdir()


@pytest.mark.skipif(not as_root, reason="needs root to prepare a folder of another user")
def test_a_linked_fallback_folder_is_refused(tmp_path: Path) -> None:
    state = private_dir(tmp_path / "state")
    outside = services._outside_root(state, "postgres")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outside.symlink_to(elsewhere)
    try:
        with pytest.raises(StackError, match="is not a folder"):
            services._server_root(state, "postgres", "postgres")
        assert os.lstat(elsewhere).st_uid == 0
    finally:
        outside.unlink()


def test_a_planted_pwfile_link_is_not_written_through(tmp_path: Path) -> None:
    """initdb's password copy goes to a new file only: a link planted in its place is
    refused, and the file it points at keeps its content and its owner."""
    run_as = "postgres" if as_root else None
    root = private_dir(tmp_path / "root", run_as)
    victim = tmp_path / "victim"
    victim.write_text("root's own file\n")
    (root / ".pwfile").symlink_to(victim)
    with pytest.raises(StackError, match=r"\.pwfile is already there"):
        Postgres()._initdb(Path("/nonexistent"), root, root / "data", "s3cret-password", run_as)
    assert victim.read_text() == "root's own file\n"
    assert os.stat(victim).st_uid == os.geteuid()
