"""Issue 11: every failure a user meets is one sentence and the right exit code.

Each case runs the real command line in a subprocess and reads what a user would see:
the exit code, a single ``error:`` sentence, no traceback, and never a secret.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bizevents.devstack import Endpoints

REPO = Path(__file__).resolve().parents[2]
SECRET = "S6cret%zzPct-7"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIZEVENTS_")}
    return {**env, "BIZEVENTS_LOG_FORMAT": "json", **extra}


def _run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bizevents", *args],
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def _one_sentence(result: subprocess.CompletedProcess[str]) -> str:
    """The error line, after checking there is exactly one and no traceback."""
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "Traceback" not in out, out
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out
    return errors[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _capture_config(tmp_path: Path, **extra: str) -> Path:
    lines = [
        'server = "t"',
        'tables = ["public.nothing"]',
        f'state_dir = "{tmp_path / "state"}"',
        *(f"{k} = {v!r}".replace("'", '"') for k, v in extra.items()),
    ]
    path = tmp_path / "capture.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


# -- settings -----------------------------------------------------------------------


def test_missing_config_file_is_refused_by_every_command(tmp_path: Path) -> None:
    """``--config`` naming no file fails even for ``version``, which needs no setting."""
    missing = tmp_path / "missing.toml"
    line = _one_sentence(_run("--config", str(missing), "version"))
    assert str(missing) in line and "does not exist" in line


def test_invalid_settings_toml_is_one_sentence_with_its_line(tmp_path: Path) -> None:
    """A TOML syntax error names the file and where, not a 76-line traceback."""
    bad = tmp_path / "settings.toml"
    bad.write_text('log_level = "INFO"\n[kafka\nbootstrap_servers = 1\n')
    line = _one_sentence(_run("--config", str(bad), "translators", "list"))
    assert str(bad) in line and "not valid TOML" in line and "line 2" in line


def test_invalid_settings_toml_from_the_environment(tmp_path: Path) -> None:
    """The same file named by BIZEVENTS_CONFIG is checked the same way."""
    bad = tmp_path / "settings.toml"
    bad.write_text("log_level = \n")
    line = _one_sentence(_run("version", env=_env(BIZEVENTS_CONFIG=str(bad))))
    assert "not valid TOML" in line


def test_invalid_capture_toml_is_one_sentence(tmp_path: Path) -> None:
    """The capture's own file: a syntax error is a sentence naming it."""
    bad = tmp_path / "capture.toml"
    bad.write_text('server = "t\n')
    line = _one_sentence(_run("capture", "postgres", str(bad)))
    assert str(bad) in line


# -- the database DSN ---------------------------------------------------------------


@pytest.mark.parametrize(
    "dsn",
    [
        pytest.param(f"postgresql://u:{SECRET}@127.0.0.1:1/db", id="bad-percent-escape"),
        pytest.param(f"host=127.0.0.1 password={SECRET} port=notanumber", id="port-not-a-number"),
        pytest.param(f"host=127.0.0.1 password='{SECRET}", id="unterminated-quote"),
        pytest.param(f"host=127.0.0.1 pasword={SECRET}", id="unknown-option"),
    ],
)
def test_malformed_dsn_is_terminal_and_never_shows_the_password(dsn: str, tmp_path: Path) -> None:
    """libpq's own message can quote the DSN: the user gets our sentence, at once."""
    config = _capture_config(tmp_path)
    started = time.monotonic()
    result = _run(
        "capture",
        "postgres",
        str(config),
        env=_env(
            BIZEVENTS_DATABASE__POSTGRES_DSN=dsn,
            BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS=f"127.0.0.1:{_closed_port()}",
        ),
    )
    line = _one_sentence(result)
    assert "DSN is malformed" in line
    assert SECRET not in result.stdout + result.stderr
    assert "S6cret" not in result.stdout + result.stderr
    assert time.monotonic() - started < 30  # refused, not retried


@pytest.mark.integration
def test_wrong_database_password_is_terminal(bizevents_stack: Endpoints, tmp_path: Path) -> None:
    """The server refusing the credentials is not an outage: one sentence, no retry."""
    dsn = re.sub(r"://([^:]+):[^@]+@", rf"://\1:{SECRET}@", bizevents_stack.postgres_dsn)
    dsn = dsn.replace("%", "%25")  # a well-formed DSN this time, with a wrong password
    assert dsn != bizevents_stack.postgres_dsn
    result = _run(
        "capture",
        "postgres",
        str(_capture_config(tmp_path)),
        env=_env(
            BIZEVENTS_DATABASE__POSTGRES_DSN=dsn,
            BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS=bizevents_stack.bootstrap_servers,
            BIZEVENTS_REGISTRY__URL=bizevents_stack.registry_url,
        ),
    )
    line = _one_sentence(result)
    assert "password authentication failed" in line
    assert SECRET not in result.stdout + result.stderr


# -- the broker away ----------------------------------------------------------------


def test_capture_against_an_unreachable_broker_is_quiet(tmp_path: Path) -> None:
    """librdkafka's own lines go through our logging, quiet below DEBUG: no flood."""
    env = _env(
        BIZEVENTS_DATABASE__POSTGRES_DSN="host=127.0.0.1 port=1 user=x dbname=x",
        BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS=f"127.0.0.1:{_closed_port()}",
        BIZEVENTS_REGISTRY__URL=f"http://127.0.0.1:{_closed_port()}",
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bizevents",
            "capture",
            "postgres",
            str(_capture_config(tmp_path)),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    time.sleep(8)
    process.terminate()
    out, err = process.communicate(timeout=60)
    lines = (out + err).splitlines()
    assert not [line for line in lines if re.match(r"%\d\|", line)], err[-2000:]
    assert len(lines) < 25, err[-2000:]
    assert "Traceback" not in out + err


def _translate_env(bootstrap: str, registry: str, prefix: str) -> dict[str, str]:
    return _env(
        BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS=bootstrap,
        BIZEVENTS_REGISTRY__URL=registry,
        BIZEVENTS_TRANSLATORS='{"orders": 2}',
        BIZEVENTS_TRANSLATE__TOPIC_PREFIX=prefix,
    )


def test_translate_against_an_unreachable_broker_is_one_quiet_sentence() -> None:
    """No librdkafka flood before the sentence, however long it waited for the broker
    (2 s here, 45 s by default); a non-zero exit."""
    closed = f"127.0.0.1:{_closed_port()}"
    env = _translate_env(closed, f"http://127.0.0.1:{_closed_port()}", "shop")
    result = _run("translate", env={**env, "BIZEVENTS_TRANSLATE__BROKER_WAIT_S": "2"}, timeout=120)
    line = _one_sentence(result)
    assert closed in line
    lines = (result.stdout + result.stderr).splitlines()
    assert not [x for x in lines if re.match(r"%\d\|", x)], result.stderr[-2000:]
    assert len(lines) < 10, result.stderr[-2000:]


@pytest.mark.integration
def test_translate_refuses_technical_topics_that_do_not_exist(
    bizevents_stack: Endpoints,
) -> None:
    """A mistyped topic_prefix: the worker names the missing topics and creates none."""
    from confluent_kafka.admin import AdminClient

    prefix = f"typo{time.monotonic_ns()}"
    result = _run(
        "translate",
        env=_translate_env(bizevents_stack.bootstrap_servers, bizevents_stack.registry_url, prefix),
        timeout=120,
    )
    line = _one_sentence(result)
    assert f"{prefix}.store.orders" in line and "topic_prefix" in line
    admin = AdminClient({"bootstrap.servers": bizevents_stack.bootstrap_servers})
    topics = admin.list_topics(timeout=15).topics
    assert not [t for t in topics if t.startswith(prefix)]
