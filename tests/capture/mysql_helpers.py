"""Helpers of the MySQL capture tests: a database per test, runs, the stored offset."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.state import StateStore
from bizevents.capture.mariadb import queries as my
from bizevents.capture.mariadb.capture import MysqlCapture
from bizevents.capture.postgres.runner import CaptureEndpoints
from bizevents.devstack import Endpoints
from tests.capture import capture_helpers
from tests.capture.capture_helpers import capture_endpoints


@dataclass
class MyDb:
    """A database of one test on the session's MariaDB."""

    dsn: str
    endpoints: Endpoints
    name: str
    server: str
    conn: Any

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(statement, params)
            return list(cur.fetchall()) if cur.description else []

    def config(self, tables: list[str], **extra: Any) -> CaptureConfig:
        return CaptureConfig(
            server=self.server,
            dsn=self.dsn,
            tables=tuple(f"{self.name}.{t}" for t in tables),
            **extra,
        )

    def topic(self, table: str) -> str:
        return f"{self.server}.{self.name}.{table}"

    def capture_endpoints(self, state_dir: Path) -> CaptureEndpoints:
        return capture_endpoints(self.endpoints, state_dir, self.dsn)

    def stored_offset(self, config: CaptureConfig) -> dict[str, Any] | None:
        store = StateStore(
            {"bootstrap.servers": self.endpoints.bootstrap_servers},
            config.offsets_topic_name,
            config.server,
        )
        return store.read(store.position_key())

    def binlog_end(self) -> my.BinlogPosition:
        return my.master_position(self.conn)


@contextmanager
def mysql_database(dsn: str, endpoints: Endpoints) -> Iterator[MyDb]:
    tag = uuid.uuid4().hex[:10]
    conn = my.connect(dsn)
    db = MyDb(dsn, endpoints, f"cap_{tag}", f"m{tag}", conn)
    db.sql(f"CREATE DATABASE {db.name}")
    db.sql(f"USE {db.name}")
    try:
        yield db
    finally:
        db.sql(f"DROP DATABASE IF EXISTS {db.name}")
        conn.close()


class InProcess(capture_helpers.InProcess):
    """A MariaDB capture run in a thread of the test process."""

    def __init__(self, config: CaptureConfig, endpoints: CaptureEndpoints) -> None:
        super().__init__(config, endpoints, MysqlCapture, "binlog")

    def wait_position(self, end: my.BinlogPosition, timeout: float = 60) -> None:
        """Until the stored position reached ``end`` (every event before it acked)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.error is not None:
                raise self.error
            at = self.runner.position
            if at is not None and (at.file, at.pos) >= (end.file, end.pos):
                return
            assert time.monotonic() < deadline, f"capture stored {at}, not {end}"
            time.sleep(0.05)


@contextmanager
def in_process(config: CaptureConfig, endpoints: CaptureEndpoints) -> Iterator[InProcess]:
    with capture_helpers.running(InProcess(config, endpoints)) as run:
        yield run


def wait_stored(
    db: MyDb, config: CaptureConfig, end: my.BinlogPosition, process: Any, timeout: float = 120
) -> None:
    """Until the capture ``process`` stored a binlog position at or past ``end``."""
    deadline = time.monotonic() + timeout
    while True:
        stored = db.stored_offset(config)
        if stored is not None and (stored["file"], stored["pos"]) >= (end.file, end.pos):
            return
        assert process.poll() is None, f"capture exited {process.returncode}"
        assert time.monotonic() < deadline, f"stored {stored}, not {end}"
        time.sleep(0.2)


def connect_as(dsn: str, user: str, password: str) -> pymysql.connections.Connection[Any]:
    settings = my.connection_settings(dsn)
    return pymysql.connect(
        host=settings["host"], port=settings["port"], user=user, password=password, autocommit=True
    )


class Proxy:
    """A TCP forwarder on loopback in front of the server, that a test can cut and
    restore (the server itself stays up for the other tests)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Refuse new connections and break the open ones."""
        if self._listener is not None:
            # shutdown wakes the thread blocked in accept (close alone leaves it listening)
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
