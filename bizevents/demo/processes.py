"""The demo's processes: capture and the workers started as in production, watched, stopped."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bizevents.demo.view import _scrape
from bizevents.devstack import Endpoints, StackError
from bizevents.devstack.processes import free_port, tail
from bizevents.settings import Settings


def _env(endpoints: Endpoints, settings: Settings, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS": endpoints.bootstrap_servers,
        "BIZEVENTS_REGISTRY__URL": endpoints.registry_url,
        "BIZEVENTS_DATABASE__POSTGRES_DSN": endpoints.postgres_dsn,
        "BIZEVENTS_STATE_DIR": str(settings.state_dir.resolve()),
        "BIZEVENTS_LOG_FORMAT": "json",
        **extra,
    }


@contextmanager
def _process(
    argv: list[str], env: dict[str, str], log: Path, what: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A child process for the demo's lifetime; stopped with SIGTERM, as an operator would."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        _terminate(proc, what, log)


def _terminate(proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    """SIGTERM, as an operator stops it (killed after 60 s); an unexpected exit status
    prints the child's log tail."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.returncode not in (0, -signal.SIGTERM):
        print(f"{what} exited with {proc.returncode}; its log {log}:\n{tail(log)}", file=sys.stderr)


def _check_alive(proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    if proc.poll() is not None:
        raise StackError(
            f"{what} stopped with exit code {proc.returncode}; its log {log}:\n{tail(log)}"
        )


class _Worker:
    """The translator worker as a process of its own, restartable with other pins."""

    def __init__(
        self, cli: list[str], env: dict[str, str], log: Path, transactions: bool = False
    ) -> None:
        self.cli, self.env, self.log = cli, env, log
        self.transactions = transactions
        self.what = "the transaction worker" if transactions else "the translator worker"
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_url = ""

    def start(self, pins: dict[str, int]) -> None:
        env = {**self.env, "BIZEVENTS_TRANSLATORS": json.dumps(pins)}
        argv = [*self.cli, "translate"]
        if self.transactions:
            argv.append("--transactions")  # it serves no metrics: its events are counted
        else:
            port = free_port("127.0.0.1")
            self.metrics_url = f"http://127.0.0.1:{port}/metrics"
            env["BIZEVENTS_TRANSLATE__METRICS_PORT"] = str(port)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    @property
    def running(self) -> bool:
        return self.proc is not None

    def check(self) -> None:
        if self.proc is not None:
            _check_alive(self.proc, self.what, self.log)

    def scrape(self) -> dict[str, dict[str, float]] | None:
        if not self.metrics_url:
            return None
        try:
            return _scrape(self.metrics_url)
        except OSError:
            return None  # still starting

    def stop(self) -> None:
        """SIGTERM, as an operator stops it: it commits what the broker acknowledged."""
        proc, self.proc = self.proc, None
        if proc is not None:
            _terminate(proc, self.what, self.log)


class _Stopped(Exception):
    """--duration ran out."""


def _end(proc: subprocess.Popen[bytes], interrupt: bool) -> None:
    """Stop the replay and everything it started: it runs in a process group of its own
    (Spark's JVM ignores SIGINT and may outlive its driver), which gets SIGINT (for
    Ctrl-C), then SIGTERM, then SIGKILL, 10 s apart; what is left once the driver is
    done gets SIGTERM."""
    signals = ([signal.SIGINT] if interrupt else []) + [signal.SIGTERM, signal.SIGKILL]
    for sig in signals:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            continue
        break
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    if proc.stdout is not None:
        proc.stdout.close()
