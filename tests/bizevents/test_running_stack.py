"""A running dev stack's recorded endpoints stand in for the settings that name none."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bizevents.devstack.processes import identify, spawn, start_ticks, stop
from bizevents.devstack.stack import with_running_stack
from bizevents.settings import load_settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("BIZEVENTS_"):
            monkeypatch.delenv(key)


def _record(pid: int, endpoint: str, **extra: str) -> dict[str, object]:
    ticks = start_ticks(pid)
    return {
        "pid": pid,
        "start_ticks": ticks if ticks is not None else 1,
        "port": int(endpoint.rsplit(":", 1)[1].split("/")[0]),
        "endpoint": endpoint,
        "log": "-",
        "extra": extra,
    }


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state file whose broker, registry and PostgreSQL 'run' (this process's pid) and whose
    MariaDB is gone (a pid that exited)."""
    services = {
        "broker": _record(os.getpid(), "127.0.0.1:40001"),
        "registry": _record(os.getpid(), "http://127.0.0.1:40002"),
        "postgres": _record(
            os.getpid(), "127.0.0.1:40003", dsn="postgresql://u:p@127.0.0.1:40003/d"
        ),
        "mysql": _record(_dead_pid(), "127.0.0.1:40004", dsn="mysql://u:p@127.0.0.1:40004/d"),
    }
    (tmp_path / "stack.json").write_text(json.dumps({"services": services}))
    monkeypatch.setenv("BIZEVENTS_STATE_DIR", str(tmp_path))
    return tmp_path


def test_the_running_stacks_endpoints_fill_what_is_not_set(state: Path) -> None:
    settings = with_running_stack(load_settings())
    assert settings.kafka.bootstrap_servers == "127.0.0.1:40001"
    assert settings.registry.url == "http://127.0.0.1:40002"
    assert settings.database.postgres_dsn is not None
    assert settings.database.postgres_dsn.get_secret_value() == "postgresql://u:p@127.0.0.1:40003/d"
    assert settings.database.mysql_dsn is None, "a service whose process is gone is not used"


def test_the_environment_and_the_file_win(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "bizevents.toml"
    config.write_text('[registry]\nurl = "http://registry.example:8081"\n')
    monkeypatch.setenv("BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS", "kafka.example:9092")
    monkeypatch.setenv("BIZEVENTS_DATABASE__POSTGRES_DSN", "postgresql://x@db.example/x")
    settings = with_running_stack(load_settings(config))
    assert settings.kafka.bootstrap_servers == "kafka.example:9092"
    assert settings.registry.url == "http://registry.example:8081"
    assert settings.database.postgres_dsn is not None
    assert settings.database.postgres_dsn.get_secret_value() == "postgresql://x@db.example/x"


def test_no_stack_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIZEVENTS_STATE_DIR", str(tmp_path / "never-started"))
    settings = load_settings()
    assert with_running_stack(settings) == settings
    assert settings.kafka.bootstrap_servers == "127.0.0.1:19092"


def test_a_stack_of_some_services_keeps_the_others_records(tmp_path: Path) -> None:
    """A DevStack that manages only MariaDB (bench/faults.py restarts it so) reads and
    rewrites the state file without dropping the broker's and the registry's records,
    so that a later `down` of the whole stack still stops them."""
    from bizevents.devstack.services import OPTIONAL_SERVICES
    from bizevents.devstack.stack import STATE_FILE, DevStack
    from bizevents.settings import DevSettings

    records = {
        "broker": _record(os.getpid(), "127.0.0.1:9092"),
        "registry": _record(os.getpid(), "http://127.0.0.1:8081"),
        "mysql": _record(_dead_pid(), "127.0.0.1:3306"),
    }
    (tmp_path / STATE_FILE).write_text(json.dumps({"services": records}))
    some = DevStack(tmp_path, DevSettings(mysql=True), services=(), optional=OPTIONAL_SERVICES)
    some.status()  # reads the records (and writes back any a service brought up to date)
    kept = json.loads((tmp_path / STATE_FILE).read_text())["services"]
    assert {"broker", "registry"} <= set(kept)


def test_stop_returns_once_every_process_of_the_service_ended(tmp_path: Path) -> None:
    """A service whose first process exits at once on SIGTERM while a process it started
    does not: `dev down` (stop) returns only when both are gone."""
    child = (
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('child', os.getpid(), flush=True); time.sleep(600)"
    )
    script = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(600)"
    )
    log = tmp_path / "service.log"
    leader = identify(spawn([sys.executable, "-c", script], log).pid)
    deadline = time.monotonic() + 30
    while "child" not in log.read_text():
        assert time.monotonic() < deadline, f"the service's child did not start: {log.read_text()}"
        time.sleep(0.05)
    pid = int(log.read_text().split()[1])
    try:
        assert stop(leader, timeout=2) is True
        assert not leader.alive() and start_ticks(pid) is None  # ended, not left behind
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
