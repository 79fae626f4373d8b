"""pytest plugin: the embedded stack, started once per test session and always stopped.

It runs exactly the code of ``bizevents dev up``, on free loopback ports and in a
temporary state folder, so a developer's own ``dev up`` stack is never touched.
Opt-in: a suite turns it on with ``pytest_plugins = ["bizevents.testing.pytest_plugin"]``
in its top ``conftest.py``, or ``-p bizevents.testing.pytest_plugin``. Fixtures:

- ``bizevents_stack``: the running stack's :class:`~bizevents.devstack.Endpoints`;
- ``bizevents_mysql``: the DSN of a MariaDB server of the session's own (started only
  by the tests that ask for it, so PostgreSQL-only runs do not pay for it);
- ``unique_topic``: a topic name no other test uses.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from bizevents.devstack import DevStack, Endpoints
from bizevents.settings import DevSettings


@pytest.fixture(scope="session")
def bizevents_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    """Broker, schema registry and PostgreSQL for this test session."""
    stack = DevStack(
        tmp_path_factory.mktemp("bizevents-stack"),
        DevSettings(broker_port=0, registry_port=0, postgres_port=0),
    )
    try:
        stack.up()
        yield stack.endpoints()
    finally:
        stack.down(purge=True)


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
