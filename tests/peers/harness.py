"""Debezium's embedded engine run beside bizevents capture, by the equivalence tests and
bench/capture_peers.py: its properties, its process and its output read back.

``scripts/setup-debezium`` resolves tests/peers/debezium/pom.xml and compiles the Java
harness (tests/peers/debezium/src/...): one JSON line per record, ``{"topic", "key",
"value"}``, key and value as Kafka Connect's JSON converter writes them.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / ".tools" / "debezium"
#: Debezium 3.5.0's MariaDB connector, on a classpath of its own (tests/peers/debezium/mariadb/)
MARIADB_TOOLS = REPO / ".tools" / "debezium-mariadb"
MEMORY_OFFSETS = "org.apache.kafka.connect.storage.MemoryOffsetBackingStore"


def missing(tools: Path = TOOLS) -> str | None:
    """Why the harness cannot run here (one sentence), or None."""
    if not (tools / "classpath.txt").exists() or not (tools / "classes").is_dir():
        return "the Debezium harness is not set up: run scripts/setup-debezium"
    return None


def _common(server: str, dsn: str, default_port: int, **extra: Any) -> dict[str, str]:
    """A connector's properties: ``server``'s topics, the database at ``dsn``, ``extra``."""
    u = urlsplit(dsn)
    extra = {
        "database.hostname": u.hostname or "127.0.0.1",
        "database.port": u.port or default_port,
        "database.user": unquote(u.username or ""),
        "database.password": unquote(u.password or ""),
        **extra,
    }
    props = {
        "name": f"dbz-{server}",
        "topic.prefix": server,
        "offset.storage": MEMORY_OFFSETS,
        "offset.flush.interval.ms": "60000",
        "provide.transaction.metadata": "true",
        "converter.schemas.enable": "true",
        "errors.max.retries": "0",
    }
    props.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in extra.items()})
    return props


def postgres_properties(
    dsn: str, server: str, slot: str, publication: str, tables: list[str], **extra: Any
) -> dict[str, str]:
    """The PostgreSQL connector on ``dsn`` (pgoutput, its own slot and publication)."""
    return _common(
        server,
        dsn,
        5432,
        **{
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.dbname": urlsplit(dsn).path.lstrip("/"),
            "plugin.name": "pgoutput",
            "slot.name": slot,
            "slot.drop.on.stop": True,
            "publication.name": publication,
            "publication.autocreate.mode": "filtered",
            "table.include.list": ",".join(tables),
            "snapshot.mode": "initial",
            **extra,
        },
    )


def mariadb_properties(
    dsn: str, server: str, database: str, tables: list[str], server_id: int, **extra: Any
) -> dict[str, str]:
    """The MariaDB connector on ``dsn`` (a replica of ``server_id``), its schema history
    in memory."""
    return _common(
        server,
        dsn,
        3306,
        **{
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "database.server.id": server_id,
            "database.include.list": database,
            "table.include.list": ",".join(f"{database}.{t}" for t in tables),
            "schema.history.internal": "io.debezium.relational.history.MemorySchemaHistory",
            "include.schema.changes": False,
            # BIGINT UNSIGNED as a decimal, as bizevents writes it (its default wraps)
            "bigint.unsigned.handling.mode": "precise",
            "snapshot.mode": "initial",
            **extra,
        },
    )


def start(
    props: dict[str, str],
    folder: Path,
    *,
    max_changes: int | None = None,
    idle_ms: int | None = None,
    until_topic: str | None = None,
    from_change: int = 1,
    heap: str = "1g",
    out: Path | None = None,
    tools: Path = TOOLS,
) -> Run:
    """The harness started on ``props`` (on the classpath of ``tools``); its records go
    to ``out`` (default ``folder/records.jsonl``)."""
    props_file = _properties(folder, "debezium", props)
    out = out or folder / "records.jsonl"
    args = [str(props_file), str(out)]
    if max_changes is not None:
        args += ["--max", str(max_changes)]
    if idle_ms is not None:
        args += ["--idle-ms", str(idle_ms)]
    if until_topic is not None:
        args += ["--until-topic", until_topic]
    if from_change != 1:
        args += ["--from", str(from_change)]
    log = folder / "debezium.log"
    return Run(java("bizevents.peers.Harness", args, log, heap, tools), log, out)


def classpath(tools: Path = TOOLS) -> str:
    """The harness's classes and the connector's jars, refused when not set up."""
    reason = missing(tools)
    if reason is not None:
        raise RuntimeError(reason)
    return f"{tools / 'classes'}:{(tools / 'classpath.txt').read_text().strip()}"


def java(main: str, args: list[str], log: Path, heap: str, tools: Path) -> subprocess.Popen[bytes]:
    """``main`` on the classpath of ``tools``, its output (and errors) into ``log``."""
    command = [
        "java",
        f"-Xmx{heap}",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        classpath(tools),
        main,
        *args,
    ]
    with open(log, "wb") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)


def _properties(folder: Path, name: str, props: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.properties"
    path.write_text("".join(f"{k}={_escape(v)}\n" for k, v in props.items()))
    return path


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


@dataclass
class Record:
    """One record as Debezium's engine handed it over: the JSON documents, parsed."""

    topic: str
    key: Any
    value: Any


@dataclass
class JavaProcess:
    """A Java process and its log, stopped with :meth:`stop`."""

    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log.exists() else ""


@dataclass
class Run(JavaProcess):
    out: Path

    def records(self) -> list[Record]:
        if not self.out.exists():
            return []
        # the last line may be half written (the harness's buffer flushed mid-record)
        lines = self.out.read_text().split("\n")[:-1]
        return [Record(d["topic"], d["key"], d["value"]) for d in map(json.loads, lines)]

    def wait_for(self, predicate: Any, timeout: float = 120) -> list[Record]:
        """Until ``predicate(records)`` holds; the records then."""
        deadline = time.monotonic() + timeout
        while True:
            records = self.records()
            if predicate(records):
                return records
            if self.process.poll() is not None:
                raise AssertionError(f"Debezium exited {self.process.returncode}: {self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"Debezium: not within {timeout}s: {self.tail()}")
            time.sleep(0.1)

    def finish(self, timeout: float = 120) -> dict[str, Any]:
        """Wait for the harness to stop by itself; its summary line."""
        code = self.process.wait(timeout)
        assert code == 0, f"Debezium exited {code}: {self.tail()}"
        for line in reversed(self.log.read_text().splitlines()):
            if line.startswith('{"records"'):
                return dict(json.loads(line))
        raise AssertionError(f"Debezium wrote no summary: {self.tail()}")


# -- Kafka Connect standalone ------------------------------------------------------------


def connect_worker_properties(bootstrap: str, folder: Path, **extra: Any) -> dict[str, str]:
    """A Connect standalone worker writing to ``bootstrap``: JSON with schemas, its
    offsets in ``folder``, its REST listener on a port the system picks."""
    props = {
        "bootstrap.servers": bootstrap,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
        "offset.storage.file.filename": str(folder / "connect.offsets"),
        "offset.flush.interval.ms": "1000",
        "listeners": "http://127.0.0.1:0",
    }
    props.update({k: str(v) for k, v in extra.items()})
    return props


def connect_connector_properties(props: dict[str, str]) -> dict[str, str]:
    """The embedded engine's connector ``props`` as a Connect connector's: Connect keeps
    the offsets and the converters; topics it creates get one partition."""
    engine_only = {"offset.storage", "offset.flush.interval.ms", "converter.schemas.enable"}
    out = {k: v for k, v in props.items() if k not in engine_only}
    out["tasks.max"] = "1"
    out["topic.creation.default.partitions"] = "1"
    out["topic.creation.default.replication.factor"] = "1"
    return out


class Connect(JavaProcess):
    """Kafka Connect standalone as a process."""

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"Kafka Connect exited {self.process.returncode}: {self.tail()}")


def start_connect(
    worker: dict[str, str],
    connector: dict[str, str],
    folder: Path,
    heap: str = "1g",
    tools: Path = TOOLS,
) -> Connect:
    """``ConnectStandalone`` on the classpath of ``tools``, running one connector."""
    files = [
        str(_properties(folder, n, p)) for n, p in (("worker", worker), ("connector", connector))
    ]
    log = folder / "connect.log"
    return Connect(
        java("org.apache.kafka.connect.cli.ConnectStandalone", files, log, heap, tools), log
    )
