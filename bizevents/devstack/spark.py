"""A Spark standalone cluster on loopback: one master and N workers, separate JVMs.

Started with pyspark's own launcher (``bin/spark-class``, the script ``start-master.sh``
and ``start-worker.sh`` call; the pip package ships no ``sbin`` scripts for them), so
tests and benches run the replay against a real cluster master (``spark://...``) with
executors in their own JVMs and Python workers, as ``spark-submit`` does on a cluster.

Executors run the Python the driver names (``PYSPARK_PYTHON``): on one machine that is
the project's environment itself, in place of the packed environment a remote cluster
gets (docs/replay.md, "spark-submit on a cluster").
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

__all__ = ["SparkClusterError", "StandaloneCluster"]

LOOPBACK = "127.0.0.1"


class SparkClusterError(RuntimeError):
    """The cluster did not come up; the message names the part and its log."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster:
    """``with StandaloneCluster(folder, workers=2) as cluster: ... cluster.master_url``."""

    folder: Path
    workers: int = 2
    cores_per_worker: int = 1
    memory_per_worker: str = "1g"
    master_url: str = ""
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _ui_port: int = 0

    def _spawn(self, name: str, *args: str) -> None:
        home = _spark_home()
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOG_DIR": str(self.folder / "logs"),
            "SPARK_WORKER_DIR": str(self.folder / "work"),
        }
        log = (self.folder / f"{name}.log").open("wb")
        self._processes.append(
            subprocess.Popen(
                [str(home / "bin" / "spark-class"), *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                # a process group of its own, so its JVM and children stop together;
                # the same session, so Linux schedules it in the caller's autogroup (a
                # new session is a new one, nice 0: a cluster started from a niced run
                # took the CPU the run yielded, and a benchmark credited it to Spark)
                process_group=0,
            )
        )

    def _alive_workers(self) -> int:
        url = f"http://{LOOPBACK}:{self._ui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                state = json.load(answer)
        except (OSError, ValueError):
            return -1
        return sum(1 for w in state.get("workers", ()) if w.get("state") == "ALIVE")

    def start(self, timeout_s: float = 90.0) -> str:
        """Start the master and the workers; returns the master URL once all are alive."""
        self.folder.mkdir(parents=True, exist_ok=True)
        port, self._ui_port = _free_port(), _free_port()
        self.master_url = f"spark://{LOOPBACK}:{port}"
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--webui-port",
            str(self._ui_port),
        )
        for n in range(self.workers):
            self._spawn(
                f"worker-{n}",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                LOOPBACK,
                "--cores",
                str(self.cores_per_worker),
                "--memory",
                self.memory_per_worker,
                "--webui-port",
                str(_free_port()),
                "--work-dir",
                str(self.folder / f"work-{n}"),
                self.master_url,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [p for p in self._processes if p.poll() is not None]
            if dead:
                self.stop()
                raise SparkClusterError(
                    f"a Spark process exited with {dead[0].returncode} while starting; "
                    f"see the logs in {self.folder}"
                )
            if self._alive_workers() == self.workers:
                return self.master_url
            time.sleep(0.5)
        self.stop()
        raise SparkClusterError(
            f"the Spark master did not see {self.workers} workers alive within {timeout_s:.0f} s;"
            f" see the logs in {self.folder}"
        )

    def stop(self) -> None:
        """Stop every JVM of the cluster (TERM, then KILL after 10 s)."""
        for p in self._processes:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self._processes:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        self._processes.clear()

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self.stop()
