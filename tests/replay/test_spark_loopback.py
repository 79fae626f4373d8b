"""A local replay's Spark driver stays on loopback, like every embedded service, and its
JVM runs without C2 unless the user gave it Java options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bizevents.replay.session import (
    DRIVER_ADDRESS,
    JAVA_OPTION_KEYS,
    LOCAL_JIT,
    LOOPBACK,
    is_local,
    local_jvm_conf,
    loopback_conf,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("master", [None, "local", "local[2]", "local[*]"])
def test_local_masters_bind_the_driver_to_loopback(master: str | None) -> None:
    """Local runs get driver host and bind address 127.0.0.1."""
    assert is_local(master)
    assert loopback_conf(master, {}, {"spark.executor.memory": "2g"}) == {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
    }


@pytest.mark.parametrize("master", ["spark://10.0.0.5:7077", "yarn", "k8s://https://k:443"])
def test_a_cluster_master_is_left_to_the_user(master: str) -> None:
    """Executors elsewhere must reach the driver: nothing is pinned to loopback."""
    assert not is_local(master)
    assert loopback_conf(master, {}, {}) == {}


def test_an_explicit_spark_local_ip_wins() -> None:
    assert loopback_conf("local[2]", {"SPARK_LOCAL_IP": "10.1.2.3"}, {}) == {}


def test_a_loopback_spark_local_ip_still_pins_the_driver() -> None:
    """Ours (set for the JVM's launch) or the user's, it asks for loopback anyway."""
    assert loopback_conf("local[2]", {"SPARK_LOCAL_IP": LOOPBACK}, {}) == dict.fromkeys(
        DRIVER_ADDRESS, LOOPBACK
    )


@pytest.mark.parametrize("key", DRIVER_ADDRESS)
def test_a_driver_address_the_user_gave_spark_wins(key: str) -> None:
    """spark-defaults.conf or ``--conf``: the user chose the driver's network, all of it."""
    assert loopback_conf("local[2]", {}, {key: "0.0.0.0"}) == {}


def test_a_local_driver_jvm_is_launched_with_c1_only() -> None:
    assert local_jvm_conf("local[2]", {}, "") == {"spark.driver.defaultJavaOptions": LOCAL_JIT}
    assert local_jvm_conf(None, {"PYSPARK_SUBMIT_ARGS": "--master local[2] pyspark-shell"}, "") == {
        "spark.driver.defaultJavaOptions": LOCAL_JIT
    }


@pytest.mark.parametrize("master", ["spark://10.0.0.5:7077", "yarn"])
def test_a_cluster_driver_jvm_keeps_its_jit(master: str) -> None:
    assert local_jvm_conf(master, {}, "") == {}


@pytest.mark.parametrize("key", JAVA_OPTION_KEYS)
def test_java_options_the_user_gave_spark_win(key: str) -> None:
    """In ``PYSPARK_SUBMIT_ARGS`` or spark-defaults.conf: the JVM is the user's to tune."""
    submit = {"PYSPARK_SUBMIT_ARGS": f"{key} -Xmx2g pyspark-shell"}
    assert local_jvm_conf("local[2]", submit, "") == {}
    assert local_jvm_conf("local[2]", {}, f"spark.master local[2]\n{key} -Xmx2g\n") == {}


_PROBE = """
import json, subprocess
from bizevents.replay.session import spark_session
spark = spark_session("local[1]")
conf = spark.sparkContext.getConf()
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout
mine = [line.split()[3] for line in out.splitlines() if f"pid={pid}," in line]
found = {key: conf.get(key) for key in ("spark.driver.host", "spark.driver.bindAddress")}
runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
jvm = [str(a) for a in runtime.getInputArguments()]
print(json.dumps({**found, "listening": mine, "jvm": jvm}))
spark.stop()
"""
LOOPBACK_ADDRESSES = ("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")


def _probe(**env: str) -> dict[str, Any]:
    """Start a local session in a fresh interpreter: its driver settings and sockets."""
    base = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_IP", "SPARK_CONF_DIR")}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
        env={**base, **env},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["listening"], "the driver listens somewhere"
    return found


def test_a_local_session_listens_on_loopback_only() -> None:
    """The JVM behind ``spark_session("local[1]")`` listens on 127.0.0.1 and nowhere else."""
    found = _probe()
    assert found["spark.driver.host"] == LOOPBACK
    assert found["spark.driver.bindAddress"] == LOOPBACK
    assert all(address.startswith(LOOPBACK_ADDRESSES) for address in found["listening"]), found
    assert LOCAL_JIT in found["jvm"], found["jvm"]


def test_driver_java_options_given_to_spark_win() -> None:
    """The user's Java options reach the driver's JVM, and the C1 setting stays out."""
    found = _probe(
        PYSPARK_SUBMIT_ARGS="--conf spark.driver.extraJavaOptions=-Dbizevents.probe=1 pyspark-shell"
    )
    assert "-Dbizevents.probe=1" in found["jvm"], found["jvm"]
    assert LOCAL_JIT not in found["jvm"], found["jvm"]


def test_a_bind_address_given_to_spark_wins() -> None:
    """A bind address given to Spark (``--conf``) is the user's: the driver listens there."""
    found = _probe(PYSPARK_SUBMIT_ARGS="--conf spark.driver.bindAddress=0.0.0.0 pyspark-shell")
    assert found["spark.driver.bindAddress"] == "0.0.0.0"
    assert not all(address.startswith(LOOPBACK_ADDRESSES) for address in found["listening"]), found
