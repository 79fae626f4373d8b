"""A local replay's Spark driver stays on loopback, like every embedded service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replay.job import LOOPBACK, is_local, loopback_conf

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("master", [None, "local", "local[2]", "local[*]"])
def test_local_masters_bind_the_driver_to_loopback(master: str | None) -> None:
    """Local runs get driver host and bind address 127.0.0.1."""
    assert is_local(master)
    assert loopback_conf(master, {}) == {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
    }


@pytest.mark.parametrize("master", ["spark://10.0.0.5:7077", "yarn", "k8s://https://k:443"])
def test_a_cluster_master_is_left_to_the_user(master: str) -> None:
    """Executors elsewhere must reach the driver: nothing is pinned to loopback."""
    assert not is_local(master)
    assert loopback_conf(master, {}) == {}


def test_an_explicit_spark_local_ip_wins() -> None:
    assert loopback_conf("local[2]", {"SPARK_LOCAL_IP": "10.1.2.3"}) == {}


_PROBE = """
import json, os, subprocess
from replay.job import spark_session
spark = spark_session("local[1]")
conf = spark.sparkContext.getConf()
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout
mine = [line.split()[3] for line in out.splitlines() if f"pid={pid}," in line]
print(json.dumps({"host": conf.get("spark.driver.host"), "listening": mine}))
spark.stop()
"""


def test_a_local_session_listens_on_loopback_only() -> None:
    """The JVM behind ``spark_session("local[1]")`` listens on 127.0.0.1 and nowhere else."""
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["host"] == LOOPBACK
    assert found["listening"], "the driver listens somewhere"
    loopback = ("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")
    assert all(address.startswith(loopback) for address in found["listening"]), found
