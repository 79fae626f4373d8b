"""Issue 41: more of what a user can type is one sentence, never a traceback.

Each case runs the real command line, as tests/bizevents/test_cli_failures.py does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bizevents.test_cli_failures import (
    _capture_config,
    _closed_port,
    _env,
    _one_sentence,
    _run,
)

SECRET = "S6cret-zz-41"


def _no_servers() -> dict[str, str]:
    """Kafka and the registry on a closed port: nothing here may need them."""
    port = _closed_port()
    return _env(
        BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS=f"127.0.0.1:{port}",
        BIZEVENTS_REGISTRY__URL=f"http://127.0.0.1:{port}",
    )


def test_capture_toml_that_is_not_utf8(tmp_path: Path) -> None:
    config = tmp_path / "capture.toml"
    config.write_bytes(b'server = "t"\ntables = ["public.x"]\nnote = "\xff\xfe"\n')
    line = _one_sentence(_run("capture", "postgres", str(config), env=_no_servers()))
    assert str(config) in line and "is not UTF-8 text" in line


@pytest.mark.parametrize("rows", ["-1", "0"])
def test_verify_chunk_rows_below_one(tmp_path: Path, rows: str) -> None:
    config = _capture_config(tmp_path)
    result = _run("verify", str(config), "--chunk-rows", rows, env=_no_servers())
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "Traceback" not in out
    assert f"Invalid value for '--chunk-rows': {rows} is not in the range x>=1" in out


def test_translators_setting_that_is_not_json() -> None:
    line = _one_sentence(_run("version", env=_env(BIZEVENTS_TRANSLATORS="notjson")))
    assert 'invalid settings: error parsing value for field "translators"' in line
    assert "notjson" not in line


def test_verify_with_an_unreachable_mysql_dsn(tmp_path: Path) -> None:
    port = _closed_port()
    config = _capture_config(tmp_path, dsn=f"mysql://u:{SECRET}@127.0.0.1:{port}/db")
    result = _run("verify", str(config), env=_no_servers())
    line = _one_sentence(result)
    assert "the database is unreachable" in line and "Connection refused" in line
    assert SECRET not in result.stdout + result.stderr


def test_verify_with_a_host_that_does_not_resolve(tmp_path: Path) -> None:
    config = _capture_config(tmp_path)
    env = {
        **_no_servers(),
        "BIZEVENTS_DATABASE__POSTGRES_DSN": f"postgresql://u:{SECRET}@nosuchhost.invalid/db",
    }
    result = _run("verify", str(config), env=env)
    line = _one_sentence(result)
    assert "the database is unreachable" in line and "nosuchhost.invalid" in line
    assert "malformed" not in line
    assert SECRET not in result.stdout + result.stderr


def test_capture_retries_a_host_that_does_not_resolve(tmp_path: Path) -> None:
    """Capture retries a name that does not resolve (DNS may come back) and says which
    host; the DSN is not called malformed."""
    config = _capture_config(tmp_path)
    env = {
        **_no_servers(),
        "BIZEVENTS_DATABASE__POSTGRES_DSN": f"postgresql://u:{SECRET}@nosuchhost.invalid/db",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "bizevents", "capture", "postgres", str(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "capture interrupted, retrying" in line:
                break
    finally:
        proc.terminate()
        rest, _ = proc.communicate(timeout=30)
    out = "".join(lines) + rest
    retry = json.loads(next(line for line in lines if "retrying" in line))
    assert 'could not translate host name "nosuchhost.invalid"' in retry["error"]
    assert "malformed" not in out and "Traceback" not in out and SECRET not in out


def test_capture_postgres_given_a_mysql_dsn(tmp_path: Path) -> None:
    config = _capture_config(tmp_path)
    env = {
        **_no_servers(),
        "BIZEVENTS_DATABASE__POSTGRES_DSN": f"mysql://u:{SECRET}@127.0.0.1:3306/db",
    }
    result = _run("capture", "postgres", str(config), env=env)
    line = _one_sentence(result)
    assert "is a MySQL/MariaDB one" in line and "bizevents capture mysql" in line
    assert SECRET not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "url", ["not a url", "file:///etc/passwd", "ftp://127.0.0.1/metrics", "http://h:x/"]
)
def test_status_accepts_only_http_urls(url: str) -> None:
    result = _run("status", "--url", url, "--interval", "0", env=_no_servers())
    line = _one_sentence(result)
    assert f"--url {url!r} is not an http(s) address" in line
    assert "root:" not in result.stdout + result.stderr  # /etc/passwd's first line
