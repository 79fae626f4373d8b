"""The suite's processes: supervised components, the load generator, the log."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: How long a component may take to stop after SIGTERM (it finishes what it holds).
STOP_WAIT_S = 60.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a child of ours that exited is reaped first)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class Supervised:
    """A component as a process: killed on purpose, or restarted when it exits on its own."""

    name: str
    argv: list[str]
    env: dict[str, str]
    logs: Path
    #: a one-shot run (the replay): exit 0 means done, not a crash
    one_shot: bool = False
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0
    leaves: int = 0
    done: bool = False
    unexpected: list[str] = field(default_factory=list)

    @property
    def log_file(self) -> Path:
        return self.logs / f"{self.name}-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        with open(self.log_file, "wb") as out:
            self.process = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> bool:
        if not self.running():
            return False
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self.kills += 1
        log(f"SIGKILL {self.name} (start {self.starts})")
        self.start()
        return True

    def leave(self) -> bool:
        """SIGTERM (it stops without leaving its groups), then start it again: a rebalance."""
        if not self.running():
            return False
        assert self.process is not None
        self.process.terminate()
        try:
            self.process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            # a defect of the component, not of the run: counted, and the run goes on
            self.process.kill()
            self.process.wait(30)
            self.unexpected.append(
                f"{self.name} did not stop within {STOP_WAIT_S:.0f} s of SIGTERM "
                f"(killed):\n{tail(self.log_file)}"
            )
            log(f"UNEXPECTED: {self.name} did not stop within {STOP_WAIT_S:.0f} s of SIGTERM")
        self.leaves += 1
        log(f"SIGTERM {self.name} (start {self.starts}): it stopped (without leaving its groups)")
        self.start()
        return True

    def supervise(self) -> None:
        """Restart after an exit nobody asked for; a one-shot run that ended well is done."""
        if self.done or self.process is None or self.process.poll() is None:
            return
        code = self.process.returncode
        if self.one_shot and code == 0:
            self.done = True
            log(f"{self.name} finished")
            return
        self.unexpected.append(f"{self.name} exited {code}:\n{tail(self.log_file)}")
        log(f"UNEXPECTED: {self.name} exited {code}; restarting it")
        self.start()

    def stop(self) -> None:
        self.done = True  # no restart from here on
        if self.running():
            assert self.process is not None
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class Load(threading.Thread):
    """The store's load generator at a steady pace; it reconnects when the database restarts.

    ``connect`` opens a connection (psycopg2 or PyMySQL); ``lost`` are the errors that
    mean the server went away; ``orders_per_transaction`` is the load's
    (``StoreLoad.orders_per_transaction``)."""

    def __init__(
        self,
        connect: Callable[[], Any],
        lost: tuple[type[BaseException], ...],
        seed: int,
        steps_per_s: float,
        orders_per_transaction: int = 1,
    ) -> None:
        super().__init__(daemon=True)
        self.orders_per_transaction = orders_per_transaction
        self.connect = connect
        self.lost = lost
        self.seed = seed
        self.pause = 1.0 / steps_per_s
        self.stopping = threading.Event()
        self.steps = 0
        self.failed_steps = 0
        self.error: BaseException | None = None

    def _connect(self) -> Any:
        deadline = time.monotonic() + 180
        while True:
            try:
                return self.connect()
            except self.lost:
                if time.monotonic() > deadline or self.stopping.is_set():
                    raise
                time.sleep(0.3)

    def run(self) -> None:
        from bizevents_store.load import StoreLoad

        try:
            load = StoreLoad(
                self._connect(),
                seed=self.seed,
                orders_per_transaction=self.orders_per_transaction,
            )
            while not self.stopping.is_set():
                try:
                    load.step()
                    self.steps += 1
                except self.lost:
                    # the database restarted: whether the last COMMIT made it is unknown,
                    # which the check does not care about (it reads the database's history)
                    self.failed_steps += 1
                    with contextlib.suppress(Exception):
                        load.conn.close()
                    load.conn = self._connect()
                time.sleep(self.pause)
            load.conn.close()
        except BaseException as exc:  # reported by the main thread
            self.error = exc
