"""The suite's own fixtures: no test may reach a default address.

A test takes its addresses from the stack fixtures (``bizevents_stack``,
``bizevents_mysql``); one that falls back on a default address (the settings' broker
127.0.0.1:19092, registry 18081, PostgreSQL 15432) depends on what else runs on the
machine: a developer's ``dev up`` stack, or the one ``scripts/demo`` left running. While
the suite runs, it listens on each default port it can take itself and fails the test
whose process (or a process it started) connects there. A port already taken (a stack is
up) cannot be watched; the check then stays silent for it.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

from bizevents.settings import CONFIG_ENV

if TYPE_CHECKING:
    from bizevents.devstack import Endpoints

# Tests do not time things: an example slow on a loaded machine (CI's two workers, each
# with its stack) is no failure, which hypothesis' default 200 ms deadline makes it.
# Three examples of test_routing_keys.py, which has no setting of its own, failed on a
# machine busy with a fault run and passed when run again (their messages were lost).
settings.register_profile("bizevents", deadline=None)
settings.load_profile("bizevents")


@pytest.fixture(autouse=True)
def _config_file_stays_in_its_test() -> Iterator[None]:
    """``load_settings(file)`` names the file in ``BIZEVENTS_CONFIG`` for the processes it
    starts. Called in a test's own process, it stayed there: every worker a later test
    of that xdist worker started read the file (test_settings.py's, with ``log_level =
    "DEBUG"``)."""
    before = os.environ.get(CONFIG_ENV)
    yield
    if before is None:
        os.environ.pop(CONFIG_ENV, None)
    else:
        os.environ[CONFIG_ENV] = before


#: The default addresses of bizevents' settings (plumbing/settings.py, settings.py).
DEFAULT_ADDRESSES = {19092: "the broker", 18081: "the schema registry", 15432: "PostgreSQL"}


def _hits_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shared by the session's xdist workers (whichever holds a port tells the others):
    in the run's base folder, which pytest clears (a worker's is inside it)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "default-addresses"
    folder.mkdir(exist_ok=True)
    return folder


def _peer_pids(port: int, peer_port: int) -> list[int]:
    """The process that holds the client end of a loopback connection to ``port``, and
    its ancestors (a test's subprocess is charged to the test's process)."""
    wanted = (f"0100007F:{peer_port:04X}", f"0100007F:{port:04X}")
    inode = ""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if (fields[1], fields[2]) == wanted:
            inode = fields[9]
    if not inode:
        return []
    target = f"socket:[{inode}]"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) == target for fd in (proc / "fd").iterdir()):
                pid, chain = int(proc.name), []
                while pid > 1:
                    chain.append(pid)
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    pid = int(stat.rpartition(")")[2].split()[1])
                return chain
        except OSError:
            continue  # gone, or not ours to read
    return []


def _watch(server: socket.socket, port: int, hits: Path) -> None:
    while True:
        try:
            conn, (_, peer_port) = server.accept()
        except OSError:
            return  # closed at the session's end
        with conn:
            for pid in _peer_pids(port, peer_port):
                (hits / f"{pid}-{port}").touch()


@pytest.fixture(scope="session", autouse=True)
def _default_addresses_watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    hits = _hits_folder(tmp_path_factory)
    servers = []
    for port in DEFAULT_ADDRESSES:
        server = socket.socket()
        # the watcher's own closed connections of a run just before leave the port in
        # TIME_WAIT, which without this refuses the bind: the port went unwatched
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind(("127.0.0.1", port))
            server.listen(64)
        except OSError:
            server.close()  # taken: a stack, or another worker that watches it
            continue
        servers.append(server)
        threading.Thread(target=_watch, args=(server, port, hits), daemon=True).start()
    yield hits
    for server in servers:
        server.close()


@pytest.fixture(autouse=True)
def _no_default_address(_default_addresses_watched: Path) -> Iterator[None]:
    yield
    reached = sorted(_default_addresses_watched.glob(f"{os.getpid()}-*"))
    for hit in reached:
        hit.unlink()
    if reached:
        ports = [int(hit.name.partition("-")[2]) for hit in reached]
        named = ", ".join(f"127.0.0.1:{p} ({DEFAULT_ADDRESSES[p]})" for p in ports)
        pytest.fail(
            f"this test reached the default address {named}: take the address from the "
            "stack fixture (bizevents_stack), or give one known to be closed (closed_address)"
        )


@pytest.fixture
def closed_address() -> Iterator[str]:
    """``127.0.0.1:PORT`` where nothing answers: the port is bound, never listened on, so
    a connection is refused at once and no other process can take the port meanwhile."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{held.getsockname()[1]}"


@pytest.fixture
def tansu(bizevents_stack_on: Callable[[Any], Endpoints]) -> Endpoints:
    """The session's stack on the embedded broker (Tansu), for the tests of its own
    behaviour and of the paths taken only there; the suite's own broker is Apache Kafka."""
    return bizevents_stack_on("tansu")
