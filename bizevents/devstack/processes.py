"""Processes of the embedded stack: start detached, know them again by pid, stop them.

A pid alone can be reused by the system after the process ended, so each record
keeps the process's start time (from ``/proc``) too; ``down`` signals a pid only
while both still match, so it never touches a process it did not start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bizevents.plumbing.errors import BizeventsError


class StackError(BizeventsError):
    """The embedded stack could not be started, found or stopped."""


@dataclass(frozen=True, slots=True)
class ProcessId:
    """A process as ``up`` started it: pid plus its start time in clock ticks."""

    pid: int
    start_ticks: int

    def alive(self) -> bool:
        ticks = start_ticks(self.pid)
        return ticks is not None and ticks == self.start_ticks


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces.
    return raw[raw.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The start time of a live (non-zombie) process, or None when it is gone."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def identify(pid: int) -> ProcessId:
    ticks = start_ticks(pid)
    if ticks is None:
        raise StackError(f"process {pid} ended right after it started")
    return ProcessId(pid, ticks)


def spawn(
    argv: Sequence[str],
    log_file: Path,
    *,
    user: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session, output to ``log_file``; it outlives us."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        try:
            return subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                user=user,
                env=env,
                cwd=cwd,
            )
        except FileNotFoundError as exc:
            raise StackError(f"cannot start {argv[0]}: the program is not there") from exc


def run_once(argv: Sequence[str], failed: str, cwd: Path | None = None) -> None:
    """Run a set-up command to its end; ``failed`` and the end of its output make the error."""
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(f"{failed}:\n" + (result.stdout + result.stderr)[-2000:])


def reap(pid: int) -> None:
    """Collect a child that has exited, if it is ours; harmless otherwise."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def signal_once(proc: ProcessId, sig: signal.Signals) -> None:
    """Send ``sig`` to ``proc`` if it is still the process ``up`` started; do not wait."""
    if proc.alive():
        os.kill(proc.pid, sig)


def stop(proc: ProcessId, sig: signal.Signals = signal.SIGTERM, timeout: float = 20.0) -> bool:
    """Signal ``proc`` and wait for it, and every process of its session (``spawn``
    made it a session's leader: what it started is there), to end, escalating to
    SIGKILL after ``timeout``: a port or a data folder is free once this returns.

    Returns False when the recorded process was already gone (nothing signalled).
    """
    if not proc.alive():
        return False
    os.kill(proc.pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap(proc.pid)
        if not proc.alive() and not session_members(proc.pid):
            return True
        time.sleep(0.05)
    for pid in [proc.pid, *session_members(proc.pid)]:
        with contextlib.suppress(ProcessLookupError):
            if pid != proc.pid or proc.alive():
                os.kill(pid, signal.SIGKILL)
    while proc.alive() or session_members(proc.pid):
        reap(proc.pid)
        time.sleep(0.05)
    return True


def session_members(session: int) -> list[int]:
    """The live processes of ``session`` but its leader."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == session:
            continue
        fields = _stat_fields(int(entry.name))
        # fields[3] is the session id; a zombie has ended (its parent has not reaped it)
        if fields is not None and fields[0] not in ("Z", "X") and int(fields[3]) == session:
            members.append(int(entry.name))
    return members


def port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def claim_port(host: str, port: int, what: str, setting: str) -> int:
    """``port`` if it is free (any free port for 0), else a sentence saying how to fix it."""
    if port == 0:
        return free_port(host)
    if not port_is_free(host, port):
        raise StackError(
            f"port {port} on {host} for the {what} is already in use; "
            f"stop what holds it or choose another port with {setting}"
        )
    return port


def wait_until(
    check: Callable[[], bool],
    what: str,
    proc: subprocess.Popen[bytes],
    log_file: Path,
    timeout: float = 60.0,
) -> None:
    """Poll ``check`` until it passes; fail at once if the process died meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(
                f"the {what} exited with code {proc.returncode} while starting; "
                f"its log is {log_file}:\n{tail(log_file)}"
            )
        if check():
            return
        time.sleep(0.1)
    raise StackError(f"the {what} did not answer within {timeout:.0f} s; its log is {log_file}")


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
