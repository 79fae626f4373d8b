"""pytest plugin: the embedded stack, started once per test session and always stopped.

It runs exactly the code of ``bizevents dev up``, on free loopback ports and in a
temporary state folder, so a developer's own ``dev up`` stack is never touched.
Opt-in: a suite turns it on with ``pytest_plugins = ["bizevents.testing.pytest_plugin"]``
in its top ``conftest.py``, or ``-p bizevents.testing.pytest_plugin``. Fixtures:

- ``bizevents_stack``: the running stack's :class:`~bizevents.devstack.Endpoints`, on
  the broker ``--bizevents-broker`` or ``BIZEVENTS_TEST_BROKER`` names (``tansu``, the
  default, or ``kafka``);
- ``bizevents_stack_on``: a stack on the broker a test names, e.g. in a parametrized
  fixture, ``bizevents_stack_on("kafka")`` (each broker's stack starts once a session);
- ``bizevents_mysql``: the DSN of a MariaDB server of the session's own (started only
  by the tests that ask for it, so PostgreSQL-only runs do not pay for it);
- ``unique_topic``: a topic name no other test uses.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Literal, cast

import pytest

from bizevents.devstack import DevStack, Endpoints
from bizevents.settings import DevSettings

Broker = Literal["tansu", "kafka"]
BROKERS: tuple[Broker, ...] = ("tansu", "kafka")
BROKER_ENV = "BIZEVENTS_TEST_BROKER"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--bizevents-broker",
        choices=BROKERS,
        default=None,
        help=f"the broker of the bizevents_stack fixture (else ${BROKER_ENV}, else tansu)",
    )


def _broker(config: pytest.Config) -> Broker:
    chosen = config.getoption("--bizevents-broker") or os.environ.get(BROKER_ENV) or "tansu"
    if chosen not in BROKERS:
        raise pytest.UsageError(f"{BROKER_ENV}={chosen!r}: the broker is one of {BROKERS}")
    return cast(Broker, chosen)


def pytest_report_header(config: pytest.Config) -> str:
    return (
        f"bizevents: the integration tier's stack runs on {_broker(config)}; "
        "tests that name a broker (bizevents_stack_on) run on theirs"
    )


#: The brokers whose stacks this session started, for the closing summary.
_RAN_ON: dict[str, list[str]] = {}  # broker -> the tiers whose stacks ran on it


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its stacks' brokers to the controller, which prints them."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["bizevents_ran_on"] = dict(_RAN_ON)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    for broker, whys in getattr(node, "workeroutput", {}).get("bizevents_ran_on", {}).items():
        for why in whys:
            _ran_on(broker, why)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _RAN_ON:
        ran = ", ".join(f"{broker} ({', '.join(whys)})" for broker, whys in _RAN_ON.items())
        terminalreporter.write_line(f"bizevents: stacks ran on {ran}")


def _ran_on(broker: str, why: str) -> None:
    """Each tier is named once per broker, whichever test started the stack."""
    whys = _RAN_ON.setdefault(broker, [])
    if why not in whys:
        whys.append(why)


class _Stacks:
    """One stack per broker for the session, started on first use, all stopped at its end."""

    def __init__(self, factory: pytest.TempPathFactory):
        self.factory = factory
        self.running: dict[str, tuple[DevStack, Endpoints]] = {}

    def on(self, broker: Broker, why: str) -> Endpoints:
        if broker not in self.running:
            stack = DevStack(
                self.factory.mktemp(f"bizevents-stack-{broker}"),
                DevSettings(broker=broker, broker_port=0, registry_port=0, postgres_port=0),
            )
            try:
                stack.up()
            except BaseException:
                stack.down(purge=True)
                raise
            self.running[broker] = (stack, stack.endpoints())
        _ran_on(broker, why)
        return self.running[broker][1]

    def stop(self) -> None:
        for stack, _ in self.running.values():
            with contextlib.suppress(Exception):
                stack.down(purge=True)


@pytest.fixture(scope="session")
def _bizevents_stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Stacks]:
    stacks = _Stacks(tmp_path_factory)
    try:
        yield stacks
    finally:
        stacks.stop()


@pytest.fixture(scope="session")
def bizevents_stack(request: pytest.FixtureRequest, _bizevents_stacks: _Stacks) -> Endpoints:
    """Broker, schema registry and PostgreSQL for this test session."""
    return _bizevents_stacks.on(_broker(request.config), "the integration tier")


@pytest.fixture(scope="session")
def bizevents_stack_on(_bizevents_stacks: _Stacks) -> Callable[[Broker], Endpoints]:
    """A stack on the broker named: ``bizevents_stack_on("kafka")`` (the broker contract)."""
    return lambda broker: _bizevents_stacks.on(broker, "tests that name their broker")


@pytest.fixture(scope="session")
def bizevents_mysql(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A MariaDB server (row binlog, full metadata, GTIDs) for this test session: its DSN."""
    stack = DevStack(
        tmp_path_factory.mktemp("bizevents-mysql"),
        DevSettings(mysql=True, mysql_port=0),
        services=(),
    )
    try:
        stack.up()
        yield stack.dsn("mysql")
    finally:
        stack.down(purge=True)


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Make topic names unique to this test: ``unique_topic("orders")``."""
    tag = uuid.uuid4().hex[:8]
    test = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")[:40]

    def make(name: str = "t") -> str:
        return f"test.{test}.{name}.{tag}"

    return make
