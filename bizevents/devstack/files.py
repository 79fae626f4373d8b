"""The dev stack's own folders and files: private from their first moment, never reached
through a link, never a folder another local user prepared.

Some of the stack's folders live at predictable paths under the system's temporary
directory, where any local user can create a name first; these helpers accept such a
folder only when it is a real folder of the expected user that nobody else can write,
and create files exclusively, with their final mode, without following a link.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import stat
from pathlib import Path

from bizevents.devstack.processes import StackError

_SECRET = re.compile(r"[A-Za-z0-9_-]{16,200}")


def _owner(user: str | None) -> tuple[int, int]:
    """The uid and gid of ``user``, or ours for ``None``."""
    if user is None:
        return os.geteuid(), os.getegid()
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def _name(uid: int) -> str:
    try:
        return f"'{pwd.getpwuid(uid).pw_name}'"
    except KeyError:
        return f"uid {uid}"


def private_dir(path: Path, user: str | None = None) -> Path:
    """``path`` as a folder of ``user`` (``None``: ours) that nobody else can write.

    A new folder is made 0700 (``mkdtemp``'s mode) and then handed to ``user``. An
    existing one is accepted only when it is a real folder (not a link), owned by
    ``user`` and writable by nobody else. Its mode is left as it is: closing an older
    stack's readable state folder would lock the server's user out of the data in it."""
    uid, gid = _owner(user)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    else:
        if uid != os.geteuid():
            os.chown(path, uid, gid)
        return path
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise StackError(f"{path} is not a folder (a link or a file is there); remove it")
    if info.st_uid != uid:
        raise StackError(
            f"{path} belongs to {_name(info.st_uid)}, not {_name(uid)}: the dev stack "
            "does not use a folder someone else prepared; remove it"
        )
    if info.st_mode & 0o022:
        raise StackError(
            f"{path} can be written by other users (mode {stat.S_IMODE(info.st_mode):o}): "
            "the dev stack does not use it; remove it"
        )
    return path


def write_new(path: Path, text: str, user: str | None = None) -> None:
    """Create ``path`` for ``user`` (``None``: us) with mode 0600 and write ``text``.

    The file must not exist: a file or a link already there is refused, and nothing is
    written through it."""
    uid, gid = _owner(user)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise StackError(
            f"{path} is already there and the dev stack did not leave it; remove it"
        ) from None
    with os.fdopen(fd, "w") as handle:
        if uid != os.geteuid():
            os.fchown(fd, uid, gid)
        handle.write(text)


def secret(path: Path) -> str:
    """The random password kept in ``path`` (mode 0600), made on first use."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        value = secrets.token_urlsafe(18)
        write_new(path, value + "\n")
        return value
    except OSError as exc:  # ELOOP: a link is there
        raise StackError(f"{path} cannot be read as the stack's secret: {exc.strerror}") from None
    with os.fdopen(fd) as handle:
        value = handle.read(1000).strip()
    # The stack writes these values into its servers' set-up statements: only its own shape.
    if not _SECRET.fullmatch(value):
        raise StackError(f"{path} does not hold a password the dev stack made; remove it")
    return value
