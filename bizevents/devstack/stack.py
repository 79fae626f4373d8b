"""The embedded development stack: ``up``, ``status`` and ``down`` over one state file.

The state file (``<state_dir>/stack.json``) records what runs where: pid, start
time, port, endpoint and log of each service. ``up`` starts only what is not
already running and answering, so a second ``up`` is harmless; ``down`` stops
exactly the processes the file names, and only while they are still the ones
``up`` started. The other commands read the same file for the endpoints their settings
leave out (:func:`with_running_stack`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bizevents.devstack.files import private_dir
from bizevents.devstack.kafkanode import check_broker, stack_services
from bizevents.devstack.processes import ProcessId, StackError, signal_once, stop
from bizevents.devstack.services import (
    OPTIONAL_SERVICES,
    Service,
    Started,
    as_dict,
    from_dict,
)
from bizevents.settings import DevSettings, Settings

STATE_FILE = "stack.json"


@dataclass(frozen=True, slots=True)
class Health:
    name: str
    state: str  # "up", "not answering", "stopped"
    started: Started | None

    @property
    def ok(self) -> bool:
        return self.state == "up"


@dataclass(frozen=True, slots=True)
class Endpoints:
    """What a script or a test needs to reach the stack."""

    bootstrap_servers: str
    registry_url: str
    postgres_dsn: str
    #: The MariaDB server's DSN when it runs (``dev up --mysql``).
    mysql_dsn: str | None = None

    def as_dict(self) -> dict[str, str]:
        out = {
            "bootstrap_servers": self.bootstrap_servers,
            "registry_url": self.registry_url,
            "postgres_dsn": self.postgres_dsn,
        }
        if self.mysql_dsn is not None:
            out["mysql_dsn"] = self.mysql_dsn
        return out


class DevStack:
    """The broker, the schema registry and PostgreSQL (and MariaDB when asked), as
    processes of this machine.

    Without ``services``, the broker is the one the state file records, else the one
    ``dev.broker`` names (:func:`~bizevents.devstack.kafkanode.stack_services`).
    ``optional`` services start only when the settings ask for them (``dev.mysql``);
    once recorded they are shown by ``status`` and stopped by ``down`` like the others.
    """

    def __init__(
        self,
        state_dir: Path,
        dev: DevSettings,
        services: tuple[Service, ...] | None = None,
        optional: tuple[Service, ...] = OPTIONAL_SERVICES,
    ):
        self.state_dir = state_dir.resolve()
        self.dev = dev
        self.services = services
        self.optional = optional

    def _required(self, records: dict[str, Started]) -> tuple[Service, ...]:
        if self.services is not None:
            return self.services
        return stack_services(self.dev, records.get("broker"), self.state_dir)

    def _every(self, records: dict[str, Started]) -> tuple[Service, ...]:
        return (*self._required(records), *self.optional)

    def _asked(self, records: dict[str, Started]) -> tuple[Service, ...]:
        """The services this stack runs: the required ones, the optional ones asked for
        or already recorded."""
        extra = tuple(
            s for s in self.optional if getattr(self.dev, s.name, False) or s.name in records
        )
        return (*self._required(records), *extra)

    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE

    def _load(self) -> dict[str, Started]:
        """The records, each brought up to date by its service (a restarted server)."""
        try:
            raw: dict[str, Any] = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise StackError(f"the state file {self.state_file} is unreadable: {exc}") from exc
        records = {name: from_dict(entry) for name, entry in raw.get("services", {}).items()}
        # A stack of some services only (one restarting MariaDB) keeps the others' records:
        # dropping them left the broker and the registry running after `down`.
        known = {s.name: s for s in self._every(records)}
        current = {
            name: known[name].current(started) if name in known else started
            for name, started in records.items()
        }
        if current != records:
            self._save(current)
        return current

    def _save(self, records: dict[str, Started]) -> None:
        private_dir(self.state_dir)
        # mkstemp makes the file 0600 at once (it holds the databases' DSNs with their
        # passwords), exclusively, under a name nobody else chose.
        fd, tmp = tempfile.mkstemp(dir=self.state_dir, prefix=".stack.", suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            json.dump({"services": {n: as_dict(s) for n, s in records.items()}}, handle, indent=2)
        os.replace(tmp, self.state_file)

    def _health(self, service: Service, started: Started | None) -> Health:
        if started is None or not ProcessId(started.pid, started.start_ticks).alive():
            return Health(service.name, "stopped", started)
        if not service.healthy(started):
            return Health(service.name, "not answering", started)
        return Health(service.name, "up", started)

    def up(self, on_start: Callable[[str], None] | None = None) -> list[Health]:
        """Start every service that is not running and answering; wait for each.
        ``on_start`` hears each service's name just before it is started."""
        private_dir(self.state_dir)
        records = self._load()
        if self.services is None:
            check_broker(self.dev, records.get("broker"))
        result: list[Health] = []
        for service in self._asked(records):
            health = self._health(service, records.get(service.name))
            if health.state == "not answering" and health.started is not None:
                stop(ProcessId(health.started.pid, health.started.start_ticks), service.stop_signal)
            if not health.ok:
                records.pop(service.name, None)
                self._save(records)
                if on_start is not None:
                    on_start(service.name)
                started = service.start(self.state_dir, self.dev)
                records[service.name] = started
                self._save(records)
                health = Health(service.name, "up", started)
            result.append(health)
        return result

    def endpoint(self, name: str) -> str | None:
        """The recorded endpoint of one service (``broker``, ``registry``...), if any."""
        started = self._load().get(name)
        return None if started is None else started.endpoint

    def status(self) -> list[Health]:
        records = self._load()
        return [self._health(s, records.get(s.name)) for s in self._asked(records)]

    def endpoints(self) -> Endpoints:
        records = self._load()
        missing = [s.name for s in self._required(records) if s.name not in records]
        if missing:
            raise StackError(
                f"the stack in {self.state_dir} has no {', '.join(missing)}; run `bizevents dev up`"
            )
        return Endpoints(
            bootstrap_servers=records["broker"].endpoint,
            registry_url=records["registry"].endpoint,
            postgres_dsn=records["postgres"].extra["dsn"],
            mysql_dsn=records["mysql"].extra["dsn"] if "mysql" in records else None,
        )

    def running(self) -> dict[str, str]:
        """The recorded endpoints of the services whose processes still run, by name
        (``broker``, ``registry`` and the databases' DSNs as ``postgres``, ``mysql``).

        It reads the state file and looks at the processes, without asking the services
        anything: cheap enough for every command to call on start (the fallback of
        :func:`with_running_stack`)."""
        found: dict[str, str] = {}
        for name, started in self._load().items():
            if ProcessId(started.pid, started.start_ticks).alive():
                found[name] = started.extra.get("dsn", started.endpoint)
        return found

    def dsn(self, service: str) -> str:
        """The DSN of one running database service (``postgres`` or ``mysql``)."""
        started = self._load().get(service)
        if started is None or "dsn" not in started.extra:
            raise StackError(f"the stack in {self.state_dir} runs no {service}; start it first")
        return started.extra["dsn"]

    def down(self, purge: bool = False) -> list[tuple[str, bool]]:
        """Stop what ``up`` started, in reverse order; ``purge`` also deletes its data."""
        records = self._load()
        stopped: list[tuple[str, bool]] = []
        every = self._every(records)
        # The nodes of a Kafka cluster are told to stop at once: a node's shutdown waits
        # for a quorum of controllers, which nodes stopped one by one take from the last.
        for service in every:
            started = records.get(service.name)
            if started is not None and getattr(service, "stops_together", False):
                signal_once(ProcessId(started.pid, started.start_ticks), service.stop_signal)
        for service in reversed(every):
            started = records.get(service.name)
            if started is None:
                continue
            was_running = stop(ProcessId(started.pid, started.start_ticks), service.stop_signal)
            stopped.append((service.name, was_running))
            del records[service.name]
            self._save(records)
        if purge:
            for service in every:
                service.purge(self.state_dir)
            shutil.rmtree(self.state_dir, ignore_errors=True)
        return stopped


def with_running_stack(settings: Settings) -> Settings:
    """The settings, with the endpoints of the dev stack recorded in ``settings.state_dir``
    where the settings name none: the broker, the registry, the databases' DSNs.

    ``bizevents dev up`` on free ports (port 0) writes where each service listens into its
    state file; other commands read it here, so that nobody has to export the addresses.
    Whatever the settings file or the environment set wins, even with the stack running;
    a stack not running (or never started) changes nothing."""
    running = DevStack(settings.state_dir, settings.dev).running()
    if not running:
        return settings
    update: dict[str, Any] = {}
    kafka, registry, database = settings.kafka, settings.registry, settings.database
    if "broker" in running and "bootstrap_servers" not in kafka.model_fields_set:
        update["kafka"] = kafka.model_copy(update={"bootstrap_servers": running["broker"]})
    if "registry" in running and "url" not in registry.model_fields_set:
        update["registry"] = registry.model_copy(update={"url": running["registry"]})
    dsns = {
        f"{name}_dsn": SecretStr(running[name])
        for name in ("postgres", "mysql")
        if name in running and f"{name}_dsn" not in database.model_fields_set
    }
    if dsns:
        update["database"] = database.model_copy(update=dsns)
    return settings.model_copy(update=update) if update else settings
